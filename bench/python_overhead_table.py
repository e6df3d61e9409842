#!/usr/bin/env python3
"""The table of docs/python.md from bench/python_overhead.sh's results:
python3 bench/python_overhead_table.py docs/data/python-overhead.jsonl

One row per run (the C++ `wallfacer attn`, wallfacer.Attention on NumPy, wallfacer.torch.attention):
forward and backward milliseconds (the slowest rank's median; for the Python runs the wall time
around the calls), the library's own time inside those calls, the share of the wall time spent
outside the library (the Python path's overhead, measured within one run), and the total against
the C++ run before them (separate runs: on a loaded machine this ratio mostly shows the load).
"""
import json
import statistics
import sys

rows = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
print("| run | fwd ms | bwd ms | fwd + bwd ms | library's time inside, ms | Python's share | "
      "vs C++ `attn` | load |")
print("|---|---:|---:|---:|---:|---:|---:|---|")
base = None
ratios = {"numpy": [], "torch": []}
shares = {"numpy": [], "torch": []}
for r in rows:
    t = r["wall_ms"] if r["run"] != "cli" else r["time_ms"]
    total = t["fwd"] + t["bwd"]
    if r["run"] == "cli":
        base = total
        name, inside, share, ratio = "C++ `wallfacer attn`", "", "", "1"
    else:
        name = {"numpy": "`wallfacer.Attention` (NumPy)",
                "torch": "`wallfacer.torch.attention`"}[r["run"]]
        lib = r["time_ms"]["fwd"] + r["time_ms"]["bwd"]
        inside, share = f"{lib:.0f}", f"{100 * (total - lib) / total:.2f} %"
        ratio = f"{total / base:.3f}" if base else ""
        if base:
            ratios[r["run"]].append(total / base)
        shares[r["run"]].append(100 * (total - lib) / total)
    print(f"| {name} | {t['fwd']:.0f} | {t['bwd']:.0f} | {total:.0f} | {inside} | {share} | {ratio} | "
          f"{r['loadavg'].split()[0]} |")
print()
for api, label in (("numpy", "NumPy"), ("torch", "PyTorch")):
    if ratios[api]:
        print(f"{label}: median against the C++ run before it {statistics.median(ratios[api]):.3f} "
              f"over {len(ratios[api])} rounds ({min(ratios[api]):.3f} to {max(ratios[api]):.3f}); "
              f"Python's share {min(shares[api]):.2f} to {max(shares[api]):.2f} %.")
