#!/usr/bin/env bash
# The kernel figures of docs/results.md, in ROUNDS rounds so that a change of machine load hits
# every run of a round: the flash-attention kernels in fp32 and bf16 against the kernels' sgemm
# (`wallfacer bench kernel --dtype both`, 8 heads of 64, S = SEQS tokens, full and causal), then
# PyTorch's scaled_dot_product_attention on the same shapes in fp32 and bf16 (bench/attn_torch.py),
# then a dense layer's three products in bf16 against fp32 (`wallfacer bench gemm`). Every result
# is appended to OUT as a JSON line (bench/record.py: the command, the commit, the load, the CPU and
# its flags, OpenBLAS's core, the sgemm); bench/kernels_table.py OUT --attention | --gemm prints the tables.
# Usage: bench/kernels.sh [ROUNDS [OUT]]   (defaults 3, docs/data/kernels.jsonl; after the build;
#   THREADS=2, SEQS="1024" by default (several: "1024 4096"); PyTorch from bench/torch_venv.sh)
# Run it at normal priority on a machine as quiet as can be had.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3} out=${2:-docs/data/kernels.jsonl}
threads=${THREADS:-2}
read -r -a seqs <<< "${SEQS:-1024}"
wf=${WALLFACER:-build/wallfacer}
source bench/torch_venv.sh
shape=(--heads 8 --head-dim 64)
for r in $(seq 1 "$rounds"); do
  echo "round $r of $rounds: load average $(cut -d' ' -f1-3 /proc/loadavg)"
  bench/record.py "$out" --run wallfacer_attn --round "$r" -- env OMP_NUM_THREADS="$threads" \
    "$wf" bench kernel --dtype both --seq "${seqs[@]}" "${shape[@]}" --iters 3 --json
  for s in "${seqs[@]}"; do
    for mask in full causal; do
      for dtype in fp32 bf16; do
        # PyTorch runs as it chooses: ONEDNN_MAX_CPU_ISA, which caps wallfacer's sgemm to time an
        # AVX2 machine, would also cap PyTorch's oneDNN.
        bench/record.py "$out" --run torch_attn --round "$r" -- env -u ONEDNN_MAX_CPU_ISA "$venv/bin/python" \
          bench/attn_torch.py --dtype "$dtype" --seq "$s" "${shape[@]}" --threads "$threads" \
          --iters 3 --json $([[ $mask == causal ]] && echo --causal)
      done
    done
  done
  bench/record.py "$out" --run wallfacer_gemm --round "$r" -- env OMP_NUM_THREADS="$threads" \
    "$wf" bench gemm --out 768 256 1024 8192 --iters 2 --json
done
echo "appended to $out; load average $(cut -d' ' -f1-3 /proc/loadavg)"
