#!/usr/bin/env bash
# The fp32 flash-attention kernels per instruction-set level (docs/library.md, "Instruction sets"):
# `wallfacer bench kernel` with the level the CPU's dispatch picks and with WALLFACER_CPU=baseline
# (plain x86-64), one OpenMP thread, 8 heads of 64, S = 1024, 2048 and 4096, full and causal,
# alternating in ROUNDS rounds. Every result is appended to OUT as a JSON line (bench/record.py);
# bench/kernels_table.py OUT --isa prints the table.
# Usage: bench/isa_levels.sh [ROUNDS [OUT]]   (defaults 4, docs/data/isa-levels.jsonl; after the
#   build). Run it at normal priority on a machine as quiet as can be had.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-4} out=${2:-docs/data/isa-levels.jsonl}
wf=${WALLFACER:-build/wallfacer}
for r in $(seq 1 "$rounds"); do
  echo "round $r of $rounds: load average $(cut -d' ' -f1-3 /proc/loadavg)"
  for level in auto baseline; do
    bench/record.py "$out" --run "$level" --round "$r" -- env OMP_NUM_THREADS=1 \
      $([[ $level == baseline ]] && echo WALLFACER_CPU=baseline) "$wf" bench kernel --dtype fp32 \
      --seq 1024 2048 4096 --heads 8 --head-dim 64 --iters 2 --json
  done
done
echo "appended to $out; load average $(cut -d' ' -f1-3 /proc/loadavg)"
