#!/usr/bin/env bash
# Training tokens/s of one Llama-family model (model.arch = "llama": RMSNorm, SwiGLU, rotary
# embeddings, grouped-query attention, an untied LM head) on one process: wallfacer train against
# transformers' LlamaForCausalLM (bench/llama_torch.py: forward, backward, AdamW, PyTorch's
# scaled_dot_product_attention), the same shape, THREADS threads each, in ROUNDS alternating rounds
# (a change of machine load hits all of them). Each round runs
#   wallfacer_bf16  train.dtype = "bf16" at the level the CPU's dispatch picks (AVX512-BF16 here)
#   torch_bf16      PyTorch under bf16 autocast, fp32 master weights
#   wallfacer_fp32_avx2  train.dtype = "fp32" with WALLFACER_CPU=avx2 WALLFACER_BF16_PATH=portable
#                   OPENBLAS_CORETYPE=Haswell ONEDNN_MAX_CPU_ISA=AVX2: the code a CPU without
#                   AVX-512 runs
#   torch_fp32_avx2 PyTorch fp32 with ATEN_CPU_CAPABILITY=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2
#                   ONEDNN_MAX_CPU_ISA=AVX2: the same for PyTorch
# and prints the tokens/s with the ratios. With OUT, every run is appended to OUT as a JSON line
# (bench/record.py: command, commit, load, CPU flags); bench/llama_train_table.py OUT prints the
# table of docs/models.md.
# Usage: bench/llama_train.sh [LAYERS DIM HEADS KV_HEADS INTERMEDIATE VOCAB SEQ STEPS THREADS
#          ROUNDS [OUT]]   (defaults 8 512 8 4 1536 32000 4096 2 2 1: 58M parameters; no OUT)
# FIRST_ROUND=K numbers the rounds from K (default 1): a later invocation appending to the same OUT
# continues the numbering, since the table pairs the runs of a round by its number.
# transformers and torch come from PyPI into a virtual environment created once (bench/hf_venv.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
layers=${1:-8} dim=${2:-512} heads=${3:-8} kv=${4:-4} inter=${5:-1536} vocab=${6:-32000}
seq=${7:-4096} steps=${8:-2} threads=${9:-2} rounds=${10:-1} out=${11:-}
wf=${WALLFACER:-build/wallfacer}
source bench/hf_venv.sh
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cmdline="bench/llama_train.sh $layers $dim $heads $kv $inter $vocab $seq $steps $threads $rounds"
# Any text will do for timing: the model's vocabulary is larger than the bytes it reads.
for i in $(seq 1 8000); do echo "line $i: and the lamps were lit and the doors were opened"; done > "$work/text.txt"
"$wf" prepare --input "$work/text.txt" --out "$work/data" >/dev/null
source bench/llama_toml.sh
llama_model_toml "$work/bench.toml"
cat >> "$work/bench.toml" <<TOML
[data]
dir = "$work/data"
[train]
seq = $seq
batch = 1
steps = $((steps + 1))
lr = 1e-4
weight_decay = 0.1
eval_every = 0
ckpt_every = 0
TOML
shape="\"layers\": $layers, \"dim\": $dim, \"heads\": $heads, \"kv_heads\": $kv, \"intermediate\": $inter, \"vocab\": $vocab, \"seq\": $seq, \"batch\": 1, \"steps\": $steps, \"threads\": $threads"
torch_args="--layers $layers --dim $dim --heads $heads --kv-heads $kv --intermediate $inter --vocab $vocab --seq $seq --steps $steps --threads $threads"
avx2_wf="WALLFACER_CPU=avx2 WALLFACER_BF16_PATH=portable OPENBLAS_CORETYPE=Haswell ONEDNN_MAX_CPU_ISA=AVX2"
avx2_torch="ATEN_CPU_CAPABILITY=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2 ONEDNN_MAX_CPU_ISA=AVX2"
record() {  # record RUN ROUND LOAD COMMAND JSON: appends a run to OUT when OUT is given
  [[ -z $out ]] || python3 bench/record.py "$out" --run "$1" --round "$2" --load "$3" \
    --command "$4" --json "$5"
}
echo "model: $layers layers, dim $dim, $heads heads ($kv K,V), intermediate $inter, vocab $vocab," \
  "seq $seq, batch 1, $threads threads, $steps timed steps, $rounds rounds;" \
  "load average $(cut -d' ' -f1-3 /proc/loadavg)"
first=${FIRST_ROUND:-1}
for r in $(seq "$first" $((first + rounds - 1))); do
  for run in wallfacer_bf16 torch_bf16 wallfacer_fp32_avx2 torch_fp32_avx2; do
    dtype=bf16 envs=""
    [[ $run == *fp32* ]] && dtype=fp32
    [[ $run == *avx2* && $run == wallfacer* ]] && envs=$avx2_wf
    [[ $run == *avx2* && $run == torch* ]] && envs=$avx2_torch
    load=$(cut -d' ' -f1-3 /proc/loadavg)
    if [[ $run == wallfacer* ]]; then
      # shellcheck disable=SC2086
      env $envs OMP_NUM_THREADS=$threads "$wf" train --config "$work/bench.toml" \
        --out "$work/$run-$r" --progress none --set train.dtype=$dtype >/dev/null
      # tokens/s of the steps after the first (the first warms up)
      tps=$(sed -E 's/.*"tokens_per_s":([^,}]*).*/\1/' "$work/$run-$r/metrics.jsonl" | tail -n +2 |
        awk '{ s += 1 / $1; n++ } END { printf "%.1f", n / s }')
      json="{\"tool\": \"wallfacer\", $shape, \"dtype\": \"$dtype\", \"env\": \"$envs\", \"tokens_per_s\": $tps}"
      cmd="$cmdline: $envs $wf train --set train.dtype=$dtype"
    else
      # shellcheck disable=SC2086
      env $envs OMP_NUM_THREADS=$threads "$venv/bin/python" bench/llama_torch.py $torch_args \
        --dtype $dtype --json > "$work/torch.txt"
      tps=$(awk '/^torch tokens\/s/ { print $3 }' "$work/torch.txt")
      json=$(grep '^{' "$work/torch.txt" | tail -1 | sed "s/}\$/, \"env\": \"$envs\"}/")
      cmd="$cmdline: $envs python bench/llama_torch.py $torch_args --dtype $dtype --json"
    fi
    echo "round $r $run tokens/s $tps"
    echo "$r $run $tps" >> "$work/tps"
    record "$run" "$r" "$load" "$cmd" "$json"
  done
done
awk '{ t[$1, $2] = $3; rounds[$1] = 1 }
     END { for (r in rounds) { b += t[r, "wallfacer_bf16"] / t[r, "torch_bf16"]
                               f += t[r, "wallfacer_fp32_avx2"] / t[r, "torch_fp32_avx2"]; n++ }
           printf "mean of the rounds: wallfacer bf16 / torch bf16 %.2fx, wallfacer fp32 / torch fp32 (AVX2) %.2fx\n", b / n, f / n }' "$work/tps"
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
