#!/usr/bin/env python3
"""The table of docs/results.md, "The cost model against measurement", from the tune results that
bench/planner_validation.sh appends with WALLFACER_VALIDATION_OUT:

  python3 bench/cost_model_table.py docs/data/cost-model.jsonl

One row per P, model and configuration, one column per round (calibration and measurement
repeated): predicted / measured milliseconds of one layer's attention forward + backward, and the
error predicted / measured - 1.
"""
import collections
import json
import sys

from kernels_table import context


def main():
    rows = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
    rounds = sorted({r["round"] for r in rows})
    cells = collections.OrderedDict()  # (P, model, label) -> round -> (pred, meas)
    for r in sorted(rows, key=lambda r: (r["P"], r["round"])):
        for c in r["configs"]:
            pred = c["predicted_ms"]["fwd"] + c["predicted_ms"]["bwd"]
            meas = c.get("measured_iteration_ms") or c["measured_ms"]["fwd"] + c["measured_ms"]["bwd"]
            cells.setdefault((r["P"], r["model"], c["label"]), {})[r["round"]] = (pred, meas)
    print("| P | model | configuration | " + " | ".join(f"round {x}" for x in rounds) + " |")
    print("|---|---|---|" + "---|" * len(rounds))
    errs = collections.defaultdict(list)
    for key in sorted(cells, key=lambda k: (k[0], k[1])):
        p, model, label = key
        out = []
        for x in rounds:
            if x in cells[key]:
                pred, meas = cells[key][x]
                e = pred / meas - 1
                errs[p].append(e)
                out.append(f"{pred:.0f} / {meas:.0f} ({100 * e:+.0f}%)")
            else:
                out.append("")
        print(f"| {p} | {model} | {label} | " + " | ".join(out) + " |")
    print()
    parts = []
    for p, es in sorted(errs.items()):
        within = sum(abs(e) <= 0.25 for e in es)
        parts.append(f"P = {p}: {within} of {len(es)} cells within ±25% "
                     f"({100 * min(es):+.0f}% to {100 * max(es):+.0f}%)")
    print("; ".join(parts) + ".")
    print(context(rows, ["one OpenMP thread per rank"]))


if __name__ == "__main__":
    main()
