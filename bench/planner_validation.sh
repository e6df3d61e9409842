#!/usr/bin/env bash
# Validation of the cost model on this machine (a benchmark, not a test: it compares times): for
# P = 2 and 4 ranks, calibrate with P ranks, then tune with the same P, and compare the predicted
# attention time (forward + backward of one layer) of every strategy with the measured one, for a
# full and a causal model at 2048 tokens. Prints every error; exits non-zero when a prediction is
# off by more than a factor BAND (default 1.6: a wrong rate, volume or schedule, not noise) in all
# of 3 attempts. docs/results.md has the errors of a run on this machine.
# Usage: bench/planner_validation.sh [WALLFACER [MPIRUN [SOURCE_DIR]]]   (make validate-planner)
#   defaults: build/wallfacer, mpirun, the repository; WALLFACER_VALIDATION_BAND sets BAND.
#   WALLFACER_VALIDATION_OUT=FILE appends every tune's JSON to FILE (bench/record.py: the command,
#   the commit, the load, the CPU), and WALLFACER_VALIDATION_ROUNDS=N then runs N attempts
#   (rounds) whatever their errors; bench/cost_model_table.py FILE prints the table of
#   docs/results.md from them.
set -u
wf=${1:-build/wallfacer}
mpirun=${2:-mpirun}
src=${3:-$(cd "$(dirname "$0")/.." && pwd)}
band=${WALLFACER_VALIDATION_BAND:-1.6}
run() { OMP_NUM_THREADS=1 "$mpirun" -q --oversubscribe --bind-to none -np "$@"; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export WALLFACER_NODE_SIZE=

ok_all=1
for P in 2 4; do
  ok=0
  for attempt in $(seq 1 "${WALLFACER_VALIDATION_ROUNDS:-3}"); do
    out=$(run $P "$wf" tune --calibrate --out "$tmp/local.toml" 2>&1) || { echo "calibrate P=$P failed: $(echo "$out" | tail -3)"; exit 1; }
    worst_ok=1
    for model in tiny tiny-causal; do
      load=$(cut -d' ' -f1-3 /proc/loadavg)
      out=$(run $P "$wf" tune --cluster "$tmp/local.toml" --model "$src/tests/plan/$model.toml" \
        --seq 2048 --top 10 --iters 3 --steps 0 --json --out "$tmp/tuned.toml" 2>&1) || { echo "tune P=$P failed: $out"; exit 1; }
      if [[ -n ${WALLFACER_VALIDATION_OUT:-} ]]; then
        python3 "$src/bench/record.py" "$WALLFACER_VALIDATION_OUT" --run "P=$P $model" \
          --round "$attempt" --load "$load" --json "$out" --command "OMP_NUM_THREADS=1 mpirun -np $P wallfacer tune --calibrate --out cal.toml; OMP_NUM_THREADS=1 mpirun -np $P wallfacer tune --cluster cal.toml --model tests/plan/$model.toml --seq 2048 --top 10 --iters 3 --steps 0 --json" || exit 1
      fi
      python3 - "$out" "$P" "$attempt" "$band" <<'PY' || worst_ok=0
import json, sys
j = json.loads(sys.argv[1])
band = float(sys.argv[4])
worst = 0
for c in j["configs"]:
    pred = c["predicted_ms"]["fwd"] + c["predicted_ms"]["bwd"]
    meas = c.get("measured_iteration_ms") or c["measured_ms"]["fwd"] + c["measured_ms"]["bwd"]
    print(f"P={sys.argv[2]} attempt {sys.argv[3]}: {j['model']:<12} {c['label']:<30} predicted "
          f"{pred:8.2f} ms measured {meas:8.2f} ms  error {100 * (pred / meas - 1):+6.1f}%")
    worst = max(worst, max(pred / meas, meas / pred))
sys.exit(0 if worst <= band else 1)
PY
    done
    [ $worst_ok -eq 1 ] && { ok=1; [[ -n ${WALLFACER_VALIDATION_ROUNDS:-} ]] || break; }
  done
  [ $ok -eq 1 ] || { echo "FAIL: P=$P: a prediction is off by more than a factor $band in ${WALLFACER_VALIDATION_ROUNDS:-3} attempts"; ok_all=0; }
done
[ $ok_all -eq 1 ] && echo "tune validation: ok"
[ $ok_all -eq 1 ]
