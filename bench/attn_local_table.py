#!/usr/bin/env python3
"""The table of docs/results.md, "Measured on this machine", from bench/attn_local.sh's results:

  python3 bench/attn_local_table.py docs/data/attn-local.jsonl

One row per run (P and configuration): forward and backward milliseconds (the slowest rank's
median over the iterations; the median over rounds when there are several), the time exposed in
waits and collectives and its share, and the bytes one rank hands to MPI per call.
"""
import collections
import json
import sys

from kernels_table import context, med

LABELS = {
    "ring": "ring (contiguous)",
    "zigzag": "zigzag",
    "ulysses": "ulysses",
    "wallfacer-1": "wallfacer-1",
    "wallfacer-2": "wallfacer-2",
    "zigzag-whole-blocks": "zigzag, `--progress-rows 0`",
    "zigzag-full": "zigzag, full mask",
}


def main():
    rows = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
    runs = collections.defaultdict(list)
    for r in rows:
        runs[(r["P"], r["run"])].append(r)
    print("| P | strategy | fwd ms | exposed fwd | bwd ms | exposed bwd | P2P bytes fwd / bwd | "
          "coll bytes fwd / bwd |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for (p, run), rs in runs.items():
        cells = []
        for x in ("fwd", "bwd"):
            t = med([r["time_ms"][x] for r in rs])
            e = med([r["exposed_comm_ms"][x] for r in rs])
            cells += [f"{t:,.0f}", f"{e:,.0f} ms ({100 * e / t:.1f}%)"]
        b = rs[0]["bytes"]
        print(f"| {p} | {LABELS.get(run, run)} | " + " | ".join(cells) +
              f" | {b['p2p_fwd']:,} / {b['p2p_bwd']:,} | {b['coll_fwd']:,} / {b['coll_bwd']:,} |")
    print()
    r0 = rows[0]
    print(f"S = {r0['seq']:,}, {r0['heads']} heads of {r0['head_dim']}, batch {r0['batch']}, "
          f"median of {r0['iters']} iterations. " + context(rows))


if __name__ == "__main__":
    main()
