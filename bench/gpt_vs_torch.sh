#!/usr/bin/env bash
# Trains the same small GPT for a few steps with wallfacer (one rank, train.dtype fp32 and bf16)
# and with PyTorch 2.x (CPU, scaled_dot_product_attention, bf16 autocast), all with THREADS
# threads, ROUNDS times in alternation (a change of machine load hits all three), and prints the
# tokens/s side by side with the ratios of the means. With OUT, every run is also appended to OUT
# as a JSON line (bench/record.py: the command, the commit, the load, the CPU, OpenBLAS's core);
# bench/gpt_vs_torch_table.py OUT prints the table of docs/training.md from them.
# Usage: bench/gpt_vs_torch.sh [LAYERS DIM HEADS SEQ STEPS THREADS ROUNDS [OUT]]
#        (defaults 4 256 4 4096 3 2 1, no OUT)
# PyTorch comes from PyPI into a virtual environment created once (bench/torch_venv.sh:
# TORCH_VENV, default ~/.cache/wallfacer/torch-venv; about 4 GB of downloads, 5 GB on disk).
set -euo pipefail
layers=${1:-4} dim=${2:-256} heads=${3:-4} seq=${4:-4096} steps=${5:-3} threads=${6:-2}
rounds=${7:-1} out=${8:-}
wf=${WALLFACER:-build/wallfacer}
here=$(dirname "$0")
source "$here/torch_venv.sh"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
source "$here/gpt_common.sh"
cmdline="bench/gpt_vs_torch.sh $layers $dim $heads $seq $steps $threads $rounds"
model="--layers $layers --dim $dim --heads $heads --seq $seq --steps $steps --threads $threads"
# record RUN ROUND LOAD COMMAND JSON: appends a run to OUT when OUT is given
record() {
  [[ -z $out ]] || python3 "$here/record.py" "$out" --run "$1" --round "$2" --load "$3" \
    --command "$4" --json "$5"
}
echo "model: $layers layers, dim $dim, $heads heads, seq $seq, batch 1, $threads threads," \
  "$steps timed steps, $rounds rounds; load average $(cut -d' ' -f1-3 /proc/loadavg)"
for r in $(seq 1 "$rounds"); do
  for dtype in fp32 bf16; do
    load=$(cut -d' ' -f1-3 /proc/loadavg)
    tps=$(wf_run "$dtype-$r" "$dtype")
    echo "round $r wallfacer $dtype tokens/s $tps"
    echo "wallfacer_$dtype $tps" >> "$work/tps"
    record "wallfacer_$dtype" "$r" "$load" "$cmdline: $wf train --set train.dtype=$dtype" \
      "{\"tool\": \"wallfacer\", \"layers\": $layers, \"dim\": $dim, \"heads\": $heads, \"seq\": $seq, \"batch\": 1, \"steps\": $steps, \"threads\": $threads, \"dtype\": \"$dtype\", \"tokens_per_s\": $tps}"
  done
  load=$(cut -d' ' -f1-3 /proc/loadavg)
  # shellcheck disable=SC2086
  "$venv/bin/python" "$here/gpt_torch.py" $model --dtype bf16 --json > "$work/torch.txt"
  tps=$(awk '/^torch tokens\/s/ { print $3 }' "$work/torch.txt")
  echo "round $r torch bf16 tokens/s $tps"
  echo "torch_bf16 $tps" >> "$work/tps"
  record torch_bf16 "$r" "$load" "$cmdline: python bench/gpt_torch.py $model --dtype bf16 --json" \
    "$(grep '^{' "$work/torch.txt" | tail -1)"
done
awk '{ s[$1] += $2; n[$1]++ }
     END { f = s["wallfacer_fp32"] / n["wallfacer_fp32"]; b = s["wallfacer_bf16"] / n["wallfacer_bf16"]
           t = s["torch_bf16"] / n["torch_bf16"]
           printf "| wallfacer fp32 | wallfacer bf16 | torch bf16 | bf16 / fp32 | bf16 / torch bf16 |\n"
           printf "| %.0f | %.0f | %.0f | %.2fx | %.2fx |\n", f, b, t, b / f, b / t }' "$work/tps"
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
