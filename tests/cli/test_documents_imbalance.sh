#!/usr/bin/env bash
# docs/documents.md, "Imbalance (S = 65536)": the table is generated from
# docs/data/documents-imbalance.jsonl, which bench/documents_imbalance.py recorded from the unit
# test DocLayout.BalancedLayoutMeetsTheTarget. The layouts are computed, not timed, so this build's
# test prints the same rows: every recorded row (and the worst line) equals what
# documents_imbalance.py gives now, and no row is missing or extra. A change to the layouts makes
# this fail until the data is recorded again (the command is in the script's docstring).
set -u
unit=$1 src=$2
python3 - "$src/bench/documents_imbalance.py" "$unit" "$src/docs/data/documents-imbalance.jsonl" <<'PY'
import json, subprocess, sys
script, unit, data = sys.argv[1:]
FIELDS = ("mix", "docs", "longest", "P", "mask", "contiguous", "zigzag", "balanced", "runs",
          "worst_balanced", "target")
def key(r):
    return (r.get("mix"), r.get("mask"), r.get("P"))
def rows(lines):
    out = {}
    for line in lines:
        if line.strip():
            r = json.loads(line)
            out[key(r)] = {f: r[f] for f in FIELDS if f in r}
    return out
now = rows(subprocess.run([sys.executable, script, unit], capture_output=True, text=True,
                          check=True).stdout.splitlines())
recorded = rows(open(data))
bad = [k for k in set(now) | set(recorded) if now.get(k) != recorded.get(k)]
for k in sorted(bad, key=str)[:10]:
    print(f"FAIL: {k}: recorded {recorded.get(k)}, now {now.get(k)}")
if bad:
    print(f"documents imbalance: {len(bad)} rows differ; record again: python3 bench/record.py "
          "docs/data/documents-imbalance.jsonl --run documents_imbalance -- python3 "
          "bench/documents_imbalance.py build/tests/wallfacer_unit_tests (after removing the file)")
    sys.exit(1)
print(f"documents imbalance: {len(now)} rows as recorded")
PY
