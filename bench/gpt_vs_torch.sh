#!/usr/bin/env bash
# Trains the same small GPT for a few steps with wallfacer (one rank) and with PyTorch 2.x (CPU, its
# fused scaled_dot_product_attention, fp32 and bf16 autocast), all with THREADS threads, and prints
# every tokens/s and the ratios.
# Usage: bench/gpt_vs_torch.sh [LAYERS DIM HEADS SEQ STEPS THREADS]   (defaults 4 256 4 4096 3 2)
# PyTorch comes from PyPI into a virtual environment this script creates once (TORCH_VENV, default
# ~/.cache/wallfacer/torch-venv). The PyPI wheel also pulls CUDA libraries that a CPU run does not
# use: about 4 GB of downloads, 5 GB on disk.
set -euo pipefail
layers=${1:-4} dim=${2:-256} heads=${3:-4} seq=${4:-4096} steps=${5:-3} threads=${6:-2}
wf=${WALLFACER:-build/wallfacer}
venv=${TORCH_VENV:-$HOME/.cache/wallfacer/torch-venv}
if ! "$venv/bin/python" -c 'import torch, sys; sys.exit(int(torch.__version__.split(".")[0]) < 2)' 2>/dev/null; then
  echo "creating $venv with PyTorch 2.x from PyPI (about 4 GB to download, once)"
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet 'torch>=2' numpy
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
source "$(dirname "$0")/gpt_common.sh"
echo "model: $layers layers, dim $dim, $heads heads, seq $seq, batch 1, $threads threads"
OMP_NUM_THREADS=$threads "$wf" train --config "$work/bench.toml" --out "$work/run" --progress plain | grep -E "^step|done"
# tokens/s of the steps after the first (the first warms up)
wf_tps=$(sed -E 's/.*"tokens_per_s":([^,}]*).*/\1/' "$work/run/metrics.jsonl" | tail -n +2 |
  awk '{ s += 1 / $1; n++ } END { printf "%.1f", n / s }')
echo "wallfacer tokens/s $wf_tps"
for dtype in fp32 bf16; do
  tps=$("$venv/bin/python" "$(dirname "$0")/gpt_torch.py" --layers "$layers" --dim "$dim" \
    --heads "$heads" --seq "$seq" --steps "$steps" --threads "$threads" --dtype "$dtype" |
    tee /dev/stderr | awk '/^torch tokens\/s/ { print $3 }')
  echo "torch $dtype tokens/s $tps"
  awk -v a="$wf_tps" -v b="$tps" -v d="$dtype" \
    'BEGIN { printf "ratio wallfacer fp32 / torch %s %.2fx\n", d, a / b }'
done
