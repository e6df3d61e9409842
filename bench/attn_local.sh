#!/usr/bin/env bash
# The table of docs/results.md, "Measured on this machine": one attention layer forward and
# backward with each strategy on P = 2 and P = 4 ranks of this machine (one OpenMP thread per rank,
# OpenMPI over shared memory), S = SEQ tokens, 2 heads of 64, causal, batch 1, medians of 3
# iterations; the same runs in turn in each of ROUNDS rounds. Every run's `attn --json` is appended
# to OUT as a JSON line (bench/record.py); bench/attn_local_table.py OUT prints the table.
# Usage: bench/attn_local.sh [ROUNDS [OUT]]   (defaults 1, docs/data/attn-local.jsonl; SEQ=8192;
#   after the build). Run it at normal priority on a machine as quiet as can be had.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-1} out=${2:-docs/data/attn-local.jsonl}
shape=(--seq "${SEQ:-8192}" --heads 2 --head-dim 64 --iters 3 --json)
runs=(
  "2 ring|--strategy ring --causal"
  "2 zigzag|--strategy zigzag --causal"
  "2 ulysses|--strategy ulysses --causal"
  "2 wallfacer-1|--strategy wallfacer --teams 1 --causal"
  "2 zigzag-whole-blocks|--strategy zigzag --causal --progress-rows 0"
  "2 zigzag-full|--strategy zigzag"
  "4 ring|--strategy ring --causal"
  "4 zigzag|--strategy zigzag --causal"
  "4 wallfacer-1|--strategy wallfacer --teams 1 --causal"
  "4 wallfacer-2|--strategy wallfacer --teams 2 --causal"
)
for r in $(seq 1 "$rounds"); do
  for run in "${runs[@]}"; do
    read -r np label <<< "${run%%|*}"
    read -r -a args <<< "${run#*|}"
    echo "round $r: P = $np $label (load average $(cut -d' ' -f1-3 /proc/loadavg))"
    bench/record.py "$out" --run "$label" --round "$r" -- scripts/wallfacer-mpirun "$np" attn \
      "${args[@]}" "${shape[@]}"
  done
done
echo "appended to $out"
