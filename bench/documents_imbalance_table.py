#!/usr/bin/env python3
"""The table of docs/documents.md, "Imbalance (S = 65536)", from the lines that
bench/documents_imbalance.py recorded: documents_imbalance_table.py DATA.jsonl

One row per mix and mask: each layout's imbalance (max / mean of the ranks' work) at P = 4, 8 and
16, and the most runs a rank holds in the balanced layout; then what the rows show, and the
commit the table was recorded at. The last recording of each row counts."""
import json
import sys

rows, worst, commit = {}, None, None
for line in open(sys.argv[1]):
    if not line.strip():
        continue
    r = json.loads(line)
    if "worst_balanced" in r:
        worst = r
        continue
    rows[(r["mix"], r["mask"], r["P"])] = r
    commit = r.get("commit", commit)
ps = sorted({k[2] for k in rows})
slash = " / ".join(map(str, ps))
print(f"| mix | docs | longest | mask | contiguous, P = {slash} | zigzag, P = {slash} | "
      f"balanced, P = {slash} | runs |")
print("|---|---:|---:|---|---:|---:|---:|---:|")
for mix, mask in dict.fromkeys((k[0], k[1]) for k in rows):
    rs = [rows[(mix, mask, p)] for p in ps if (mix, mask, p) in rows]

    def cells(key):
        return " / ".join(f"{r[key]:.3f}" for r in rs)

    print(f"| {mix} | {rs[0]['docs']} | {rs[0]['longest']} | {mask} | {cells('contiguous')} | "
          f"{cells('zigzag')} | {cells('balanced')} | {max(r['runs'] for r in rs)} |")


def most(mask, key):
    return max(r[key] for r in rows.values() if r["mask"] == mask)


print(f"\nOn causal mixes contiguous reaches {most('causal', 'contiguous'):.1f}x and zigzag "
      f"{most('causal', 'zigzag'):.1f}x; the balanced layout stays within "
      f"{100 * (most('causal', 'balanced') - 1):.1f} % on every causal case and within "
      f"{100 * (most('full', 'balanced') - 1):.1f} % on every full one (contiguous "
      f"{most('full', 'contiguous'):.1f}x, zigzag {most('full', 'zigzag'):.1f}x)"
      + (f"; the test's worst {worst['worst_balanced']:.4f} against its target "
         f"{worst['target']:.2f}" if worst else "")
      + (f". Commit {commit.split()[0]}." if commit else "."))
