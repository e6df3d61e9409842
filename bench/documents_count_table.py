#!/usr/bin/env python3
"""The table of docs/documents.md "Imbalance and wire" from bench/documents_count.sh's JSON lines:

    documents_count_table.py RESULTS.jsonl

Per mask and strategy: the work imbalance (max / mean of the ranks' forward work) without
documents, with documents in the strategy's layout and with documents in the balanced layout, and
the forward point-to-point bytes of the busiest rank (MB = 10^6 bytes) in the same three cases.
A case recorded more than once counts its last line (the newest run); a case not recorded shows
"-". Below the table: the shape, the documents and the commit(s) the lines came from."""
import json
import sys


def label(j):
    if j["strategy"] == "wallfacer":
        return f"wallfacer C={j['C']}"
    if j["ulysses"] > 1:
        return f"ulysses {j['ulysses']} x {j['strategy']}"
    return j["strategy"]


def case(r):
    """'none' (no documents), 'strategy' or 'balanced' (documents in that layout)."""
    words = r["command"].split()
    if "--docs" not in words and "--docs-random" not in words:
        return "none"
    return r["layout"]


def main():
    if len(sys.argv) != 2:
        print("usage: documents_count_table.py RESULTS.jsonl", file=sys.stderr)
        return 2
    rows = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
    if not rows:
        print(f"documents_count_table.py: {sys.argv[1]} holds no results; run "
              "bench/documents_count.sh", file=sys.stderr)
        return 2
    cells, keys = {}, []
    for r in rows:
        key = ("causal" if r["causal"] else "full", label(r))
        if key not in keys:
            keys.append(key)
        cells[key + (case(r),)] = r  # the last line of a case wins

    def imb(key, c):
        r = cells.get(key + (c,))
        return f"{r['work_imbalance']:.3f}" if r else "-"

    def mb(key, c):
        r = cells.get(key + (c,))
        return f"{r['bytes']['p2p_fwd'] / 1e6:.1f}" if r else "-"

    print("| mask | strategy | imbalance no docs | imbalance docs, strategy layout | "
          "imbalance docs, balanced | p2p fwd MB no docs / docs | p2p fwd MB docs, balanced |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for key in keys:
        print(f"| {key[0]} | {key[1]} | {imb(key, 'none')} | {imb(key, 'strategy')} | "
              f"{imb(key, 'balanced')} | {mb(key, 'none')} / {mb(key, 'strategy')} | "
              f"{mb(key, 'balanced')} |")

    used = list(cells.values())
    r0 = used[0]
    shape = (f"P = {r0['P']}, S = {r0['seq']:,}, {r0['heads']} heads of {r0['head_dim']} "
             f"({r0['dtype']})")
    docs = [r for r in used if case(r) != "none"]
    text = ""
    if docs:
        d = docs[0]["docs"]
        words = docs[0]["command"].split()
        how = " ".join(words[words.index("--docs-random"):words.index("--docs-random") + 4]
                       if "--docs-random" in words else ["--docs", "..."])
        kept = {("causal" if r["causal"] else "full"): r["docs"]["kept"] for r in docs}
        shown = {m: f"{100 * v:.1f} %" for m, v in sorted(kept.items())}
        if len(set(shown.values())) == 1:
            kept_text = f"{next(iter(shown.values()))} of the mask's pairs ({' and '.join(shown)})"
        else:
            kept_text = " and ".join(f"{v} of the {m} mask's pairs" for m, v in shown.items())
        text = (f"; {d['count']} documents (`{how}`), the longest {d['longest']:,} positions, "
                f"keeping {kept_text}")
    commits = sorted({r["commit"] for r in used})
    print(f"\n{shape}{text}. Commit{'s' if len(commits) > 1 else ''} {', '.join(commits)}.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
