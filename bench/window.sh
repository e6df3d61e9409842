#!/usr/bin/env bash
# Sliding window against the full causal mask (docs/documents.md, "Sliding windows: measured"):
#   bench/window.sh WALLFACER OUT.jsonl [SEQ] [WINDOW] [STRATEGIES...]
# For each strategy, `wallfacer attn --check` on 8 ranks (one OpenMP thread each) with --causal and
# with --causal --window WINDOW, alternating, each run's JSON output as one line of OUT.jsonl with the
# command, the commit and the load average beside it. Then the schedule counter (`--count 8`) of
# the same configurations. bench/window_table.py prints the tables.
set -euo pipefail
wf=$1
out=$2
seq=${3:-32768}
window=${4:-4096}
shift $(($# < 4 ? $# : 4))
strategies=("$@")
[ ${#strategies[@]} -gt 0 ] || strategies=(ring zigzag)
commit=$(git rev-parse --short HEAD)
mpirun=$(dirname "$0")/../scripts/wallfacer-mpirun
record() {  # kind, command...
  local kind=$1; shift
  local load json
  load=$(cut -d' ' -f1 /proc/loadavg)
  json=$("$@")
  python3 - "$json" "$kind" "$commit" "$load" "$*" >>"$out" <<'PY'
import json, sys
run = json.loads(sys.argv[1].strip().splitlines()[-1])
run.update({"kind": sys.argv[2], "commit": sys.argv[3], "load_before": float(sys.argv[4]),
            "command": sys.argv[5]})
print(json.dumps(run))
PY
}
common=(--seq "$seq" --heads 1 --head-dim 64 --causal --json)
for s in "${strategies[@]}"; do
  for w in 0 "$window"; do
    wargs=()
    [ "$w" -gt 0 ] && wargs=(--window "$w")
    # shellcheck disable=SC2086
    WALLFACER=$wf OMP_NUM_THREADS=1 record run "$mpirun" 8 attn --strategy $s "${common[@]}" \
      "${wargs[@]}" --check
    # shellcheck disable=SC2086
    record count "$wf" attn --count 8 --strategy $s "${common[@]}" "${wargs[@]}"
  done
done
