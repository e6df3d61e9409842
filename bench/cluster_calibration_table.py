#!/usr/bin/env python3
"""The link rates that `tune --calibrate` measured on the emulated two-tier clusters, as a markdown
table: cluster_calibration_table.py RATE_MBIT FILE...

FILE: cluster files written by tune --calibrate (docs/data/cluster-NxR.toml); RATE_MBIT: the rate
the cards were shaped to (bench/two-tier.sh: 50)."""
import os
import re
import sys
import tomllib

rate = float(sys.argv[1]) * 1e6 / 8  # bytes/s
print("| cluster | between nodes | of the shaped card | inside a node | inside / between |")
print("|---|---:|---:|---:|---:|")
rows = []
for path in sys.argv[2:]:
    with open(path, "rb") as f:
        c = tomllib.load(f)
    inter, intra = c["links"]["inter"]["bandwidth"], c["links"]["intra"]["bandwidth"]
    m = re.search(r"cluster-(\d+x\d+)", os.path.basename(path))
    name = m.group(1).replace("x", "×") if m else os.path.basename(path)
    rows.append((inter, intra))
    print(f"| {name} nodes | {inter / 1e6:.2f} MB/s | {100 * inter / rate:.0f}% | "
          f"{intra / 1e9:.2f} GB/s | {intra / inter:.0f}× |")
lo, hi = min(r[0] for r in rows), max(r[0] for r in rows)
print(f"\nBetween nodes {lo / 1e6:.2f}–{hi / 1e6:.2f} MB/s of the shaped {rate / 1e6:.2f}; "
      f"inside a node {min(r[1] for r in rows) / 1e9:.2f}–{max(r[1] for r in rows) / 1e9:.2f} "
      f"GB/s: a two-tier ratio of {min(r[1] / r[0] for r in rows):.0f}–"
      f"{max(r[1] / r[0] for r in rows):.0f}×.")
