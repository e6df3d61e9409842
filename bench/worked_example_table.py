#!/usr/bin/env python3
"""The worked example of docs/algorithm.md from the JSON lines of
`bench/schedule_bytes.sh WALLFACER worked-example`: per C, MiB
per rank and layer that each phase sends point to point and through the team collectives, and
its point-to-point rounds; the ratios are against C = 1 (ring).

  python3 bench/worked_example_table.py docs/data/worked-example.jsonl
"""
import json
import sys

MIB = 1 << 20


def mib(b):
    v = b / MIB
    return f"{v:,.0f}" if v == int(v) else f"{v:,.1f}"


def main(path):
    rows = {}
    for line in open(path):
        out = json.loads(line)["output"]
        rows[(out["C"], out["keep_kv"])] = out
    ring = rows[(1, False)]["bytes"]
    print("| C | G | fwd P2P | fwd rounds | fwd collectives | bwd P2P | bwd P2P, keep_kv "
          "| bwd rounds | bwd collectives |")
    print("|---|---|---|---|---|---|---|---|---|")
    for C in sorted({c for c, _ in rows}):
        r = rows[(C, False)]
        b, st = r["bytes"], r["steps"]
        G = r["P"] // (C * C)
        ratio = lambda x, y: "" if C == 1 else f" ({x / y:.2f}×)"
        keep = rows.get((C, True))
        keep_cell = "—" if C == 1 or keep is None else (
            mib(keep["bytes"]["p2p_bwd"]) + ratio(keep["bytes"]["p2p_bwd"], ring["p2p_bwd"]))
        name = "1 (ring)" if C == 1 else str(C)
        print(f"| {name} | {G} | {mib(b['p2p_fwd'])}{ratio(b['p2p_fwd'], ring['p2p_fwd'])} "
              f"| {st['p2p_fwd']} | {mib(b['coll_fwd'])} "
              f"| {mib(b['p2p_bwd'])}{ratio(b['p2p_bwd'], ring['p2p_bwd'])} | {keep_cell} "
              f"| {st['p2p_bwd']} | {mib(b['coll_bwd'])} |")


if __name__ == "__main__":
    main(sys.argv[1])
