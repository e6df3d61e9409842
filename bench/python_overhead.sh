#!/usr/bin/env bash
# The Python module's overhead: `wallfacer attn` (C++) and the same attention through
# wallfacer.Attention (NumPy) and wallfacer.torch.attention, in turn, on 4 ranks; one JSON line per
# run appended to OUT (default docs/data/python-overhead.jsonl) with the command, the commit and
# the machine's load. bench/python_overhead_table.py OUT prints the table of docs/python.md.
# Usage: bench/python_overhead.sh [OUT]   (after the build; PYTHON=/usr/bin/python3, SEQ=16384,
# ITERS=2 by default)
set -euo pipefail
out=${1:-docs/data/python-overhead.jsonl}
python=${PYTHON:-/usr/bin/python3}
cfg=(--strategy wallfacer --teams 2 --seq "${SEQ:-16384}" --heads 2 --head-dim 32 --causal)
iters=${ITERS:-2}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
export OMPI_MCA_btl_vader_single_copy_mechanism=none PYTHONPATH=build/python
commit=$(git rev-parse --short HEAD)
record() {  # record KIND COMMAND... : runs COMMAND, appends its JSON line with the context
  local kind=$1
  shift
  local load json
  load=$(cut -d' ' -f1-3 /proc/loadavg)
  json=$("$@" | grep '^{' | tail -1)
  "$python" -c 'import json, sys
r = json.loads(sys.argv[1])
r.update(run=sys.argv[2], command=sys.argv[3], commit=sys.argv[4], loadavg=sys.argv[5],
         cpus=int(sys.argv[6]))
print(json.dumps(r))' "$json" "$kind" "$*" "$commit" "$load" "$(nproc)" >> "$out"
}
for api in cli numpy torch; do
  case $api in
    cli) record cli scripts/wallfacer-mpirun 4 attn "${cfg[@]}" --iters $iters --json ;;
    *) record "$api" mpirun --oversubscribe --bind-to none -np 4 -x OMP_NUM_THREADS -x PYTHONPATH \
         -x OMPI_MCA_btl_vader_single_copy_mechanism "$python" bench/python_overhead.py \
         "${cfg[@]}" --iters $iters --api "$api" ;;
  esac
done
