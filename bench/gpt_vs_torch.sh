#!/usr/bin/env bash
# Trains the same small GPT for a few steps with wallfacer (one rank, train.dtype fp32 and bf16)
# and with PyTorch 2.x (CPU, scaled_dot_product_attention, bf16 autocast), all with THREADS
# threads, ROUNDS times in alternation (a change of machine load hits all three), and prints the
# tokens/s side by side with the ratios of the means.
# Usage: bench/gpt_vs_torch.sh [LAYERS DIM HEADS SEQ STEPS THREADS ROUNDS]
#        (defaults 4 256 4 4096 3 2 1)
# PyTorch comes from PyPI into a virtual environment this script creates once (TORCH_VENV, default
# ~/.cache/wallfacer/torch-venv). The PyPI wheel also pulls CUDA libraries that a CPU run does not
# use: about 4 GB of downloads, 5 GB on disk.
set -euo pipefail
layers=${1:-4} dim=${2:-256} heads=${3:-4} seq=${4:-4096} steps=${5:-3} threads=${6:-2}
rounds=${7:-1}
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
echo "model: $layers layers, dim $dim, $heads heads, seq $seq, batch 1, $threads threads," \
  "$steps timed steps, $rounds rounds; load average $(cut -d' ' -f1-3 /proc/loadavg)"
for r in $(seq 1 "$rounds"); do
  for dtype in fp32 bf16; do
    tps=$(wf_run "$dtype-$r" "$dtype")
    echo "round $r wallfacer $dtype tokens/s $tps"
    echo "wallfacer_$dtype $tps" >> "$work/tps"
  done
  tps=$("$venv/bin/python" "$(dirname "$0")/gpt_torch.py" --layers "$layers" --dim "$dim" \
    --heads "$heads" --seq "$seq" --steps "$steps" --threads "$threads" --dtype bf16 |
    awk '/^torch tokens\/s/ { print $3 }')
  echo "round $r torch bf16 tokens/s $tps"
  echo "torch_bf16 $tps" >> "$work/tps"
done
awk '{ s[$1] += $2; n[$1]++ }
     END { f = s["wallfacer_fp32"] / n["wallfacer_fp32"]; b = s["wallfacer_bf16"] / n["wallfacer_bf16"]
           t = s["torch_bf16"] / n["torch_bf16"]
           printf "| wallfacer fp32 | wallfacer bf16 | torch bf16 | bf16 / fp32 | bf16 / torch bf16 |\n"
           printf "| %.0f | %.0f | %.0f | %.2fx | %.2fx |\n", f, b, t, b / f, b / t }' "$work/tps"
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
