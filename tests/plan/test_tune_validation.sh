#!/usr/bin/env bash
# Validation of the cost model on this machine: calibrate with P ranks, then tune with the same P,
# and compare the predicted attention time (forward + backward of one layer) of every strategy
# with the measured one. The machine is small and shared, so this checks a generous band
# (predicted within a factor of 5 of measured: catches unit and volume mistakes, not noise) and
# takes the best of 3 attempts, run alone (RUN_SERIAL); the errors seen
# are printed and docs/planner.md lists them.
set -u
wf=$1
mpirun=$2
src=$3
run() { OMP_NUM_THREADS=1 "$mpirun" -q --oversubscribe --bind-to none -np "$@"; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export WALLFACER_NODE_SIZE=

ok_all=1
for P in 2 4; do
  ok=0
  for attempt in 1 2 3; do
    run $P "$wf" tune --calibrate --out "$tmp/local.toml" >/dev/null 2>&1 || { echo "calibrate P=$P failed"; exit 1; }
    out=$(run $P "$wf" tune --cluster "$tmp/local.toml" --model "$src/tests/plan/tiny.toml" \
      --seq 512 --top 10 --iters 3 --json --out "$tmp/tuned.toml" 2>&1) || { echo "tune P=$P failed: $out"; exit 1; }
    if python3 - "$out" "$P" "$attempt" <<'PY'; then ok=1; break; fi
import json, sys
j = json.loads(sys.argv[1])
worst = 0
for c in j["configs"]:
    pred = c["predicted_ms"]["fwd"] + c["predicted_ms"]["bwd"]
    meas = c["measured_ms"]["fwd"] + c["measured_ms"]["bwd"]
    print(f"P={sys.argv[2]} attempt {sys.argv[3]}: {c['label']:<26} predicted {pred:8.2f} ms "
          f"measured {meas:8.2f} ms  error {100 * (pred / meas - 1):+6.1f}%")
    worst = max(worst, max(pred / meas, meas / pred))
sys.exit(0 if worst <= 5.0 else 1)
PY
  done
  [ $ok -eq 1 ] || { echo "FAIL: P=$P: a prediction is off by more than 5x in 3 attempts"; ok_all=0; }
done
[ $ok_all -eq 1 ] && echo "tune validation: ok"
[ $ok_all -eq 1 ]
