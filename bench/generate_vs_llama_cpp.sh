#!/usr/bin/env bash
# Prefill and decode on one process: `wallfacer generate` against llama.cpp (llama-cpp-python
# from PyPI, built here) on the same Llama weights, the same prompt and the same threads
# (docs/generate.md, "Against llama.cpp").
#
#   bench/generate_vs_llama_cpp.sh [--seq "4096 32768"] [--max-new 32] [--threads 2] [--rounds 1]
#                                  [--configs "wallfacer wallfacer-bf16 llama.cpp llama.cpp-fa"]
#                                  [--layers 8]
#                                  [--dim 512] [--heads 8] [--kv-heads 4] [--intermediate 1408]
#                                  [--vocab 32000] [--out runs/generate-llama-cpp]
#
# The model (model.arch = "llama", bench/llama_toml.sh; by default 8 layers of width 512, 8 heads
# of 64 with 4 K,V heads, SwiGLU of 1408, a vocabulary of 32000, untied: 56M parameters, rope_theta
# 500000, no rope scaling): random weights after one training step of seed 1, exported with
# `wallfacer export-hf` and written as fp32 GGUF by bench/gguf_from_hf.py. First a check that both
# engines run the same model: the logits of the first token after a 64-token prompt, from both,
# compared (largest difference against the largest logit; recorded as "check"). Then, per round
# and prompt length (seeded random ids), each configuration in turn, greedy, --max-new tokens:
#   wallfacer       OMP_NUM_THREADS=T wallfacer generate --json (fp32; the prefill on one process)
#   wallfacer-bf16  the same with --dtype bf16 (the prefill in bf16, the decode fp32)
#   llama.cpp       bench/llama_cpp_run.py --threads T (fp32 weights, n_batch = n_ubatch = 512)
#   llama.cpp-fa    the same with llama.cpp's flash attention
#   transformers    bench/hf_generate_run.py on the exported folder: PyTorch with
#                   scaled_dot_product_attention, fp32 (the transformers venv, bench/hf_venv.sh)
#   transformers-bf16  the same under CPU bf16 autocast
# Appends one JSON line per run to OUT/results.jsonl (bench/record.py): the round, configuration,
# model, threads, and the run's ttft_ms, prefill_tokens_per_s, decode_tokens_per_s. Last, the
# attention kernel's fp32 forward and its sgemm at the longest prompt (`wallfacer bench kernel`,
# run "attn_kernel"), for the table of where the fp32 prefill's time goes.
# bench/generate_vs_llama_cpp_table.py prints the table. llama.cpp's virtual environment is
# LLAMA_CPP_VENV (bench/llama_cpp_venv.sh creates it on first use: about 10 minutes).
set -euo pipefail
cd "$(dirname "$0")/.."
seqs="4096 32768" max_new=32 threads=2 rounds=1 configs="wallfacer wallfacer-bf16 llama.cpp llama.cpp-fa"
layers=8 dim=512 heads=8 kv=4 inter=1408 vocab=32000 out=runs/generate-llama-cpp
while [[ $# -gt 0 ]]; do
  case "$1" in
    --seq) seqs=$2; shift 2 ;;
    --max-new) max_new=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --configs) configs=$2; shift 2 ;;
    --layers) layers=$2; shift 2 ;;
    --dim) dim=$2; shift 2 ;;
    --heads) heads=$2; shift 2 ;;
    --kv-heads) kv=$2; shift 2 ;;
    --intermediate) inter=$2; shift 2 ;;
    --vocab) vocab=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "generate_vs_llama_cpp.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
done
for c in $configs; do
  [[ $c =~ ^(wallfacer|wallfacer-bf16|llama\.cpp|llama\.cpp-fa|transformers|transformers-bf16)$ ]] ||
    { echo "generate_vs_llama_cpp.sh: configuration '$c' must be wallfacer, wallfacer-bf16, llama.cpp, llama.cpp-fa, transformers or transformers-bf16" >&2
      exit 2; }
done
wf=${WALLFACER:-build/wallfacer}
[[ -x $wf ]] || { echo "generate_vs_llama_cpp.sh: $wf not found: run make build" >&2; exit 2; }
if [[ " $configs " == *" transformers"* ]]; then
  source bench/hf_venv.sh
  hf_venv=$venv
fi
source bench/llama_cpp_venv.sh
mkdir -p "$out"
results=$out/results.jsonl

# The model: one training step, exported, written as GGUF.
if [[ ! -f $out/model.gguf ]]; then
  source bench/llama_toml.sh
  OMP_NUM_THREADS=$threads llama_one_step "$out" 128 1e-3
  rm -rf "$out/hf"
  "$wf" export-hf "$out/model" --out "$out/hf" >/dev/null
  "$venv/bin/python" bench/gguf_from_hf.py "$out/hf" "$out/model.gguf"
fi
# prompt LENGTH: seeded random ids below the vocabulary as a 1-D int32 .npy (its path).
prompt() {
  local f=$out/prompt-$1.npy
  [[ -f $f ]] || "$venv/bin/python" -c "import numpy as np, sys; np.save(sys.argv[1], np.random.RandomState(int(sys.argv[2])).randint(0, int(sys.argv[3]), int(sys.argv[2])).astype(np.int32))" "$f" "$1" "$vocab"
  echo "$f"
}
# The check: the first token's logits from both engines on a 64-token prompt.
OMP_NUM_THREADS=$threads "$wf" generate --ckpt "$out/model" --prompt-tokens "$(prompt 64)" \
  --max-new 1 --temperature 0 --logits "$out/check-wallfacer.npy" >/dev/null 2>&1
"$venv/bin/python" bench/llama_cpp_run.py "$out/model.gguf" "$(prompt 64)" --max-new 1 \
  --threads "$threads" --logits "$out/check-llama-cpp.npy" >/dev/null
check=$("$venv/bin/python" -c "
import json, sys, numpy as np
a, b = np.load(sys.argv[1])[0].astype(np.float64), np.load(sys.argv[2])[0].astype(np.float64)
print(json.dumps({'prompt_tokens': 64, 'max_abs_diff': float(abs(a - b).max()),
                  'max_abs_logit': float(abs(a).max()), 'same_greedy': int(a.argmax()) == int(b.argmax())}))
" "$out/check-wallfacer.npy" "$out/check-llama-cpp.npy")
echo "== check (first token's logits, wallfacer against llama.cpp): $check" >&2

for round in $(seq 1 "$rounds"); do
  for s in $seqs; do
    for c in $configs; do
      p=$(prompt "$s")
      case $c in
        wallfacer | wallfacer-bf16)
          cmd=(env OMP_NUM_THREADS="$threads" "$wf" generate --ckpt "$out/model" --prompt-tokens "$p"
               --max-new "$max_new" --temperature 0 --json)
          [[ $c == wallfacer ]] || cmd+=(--dtype bf16) ;;
        llama.cpp | llama.cpp-fa)
          cmd=("$venv/bin/python" bench/llama_cpp_run.py "$out/model.gguf" "$p" --max-new "$max_new"
               --threads "$threads")
          [[ $c == llama.cpp ]] || cmd+=(--flash-attn) ;;
        transformers | transformers-bf16)
          cmd=("$hf_venv/bin/python" bench/hf_generate_run.py "$out/hf" "$p" --max-new "$max_new"
               --threads "$threads")
          [[ $c == transformers ]] || cmd+=(--bf16) ;;
      esac
      load0=$(cut -d' ' -f1-3 /proc/loadavg)
      res=$("${cmd[@]}" 2>"$out/$c-$s-$round.err" | tail -1) ||
        { echo "generate_vs_llama_cpp.sh: $c at $s failed:" >&2; tail -5 "$out/$c-$s-$round.err" >&2; exit 1; }
      load1=$(cut -d' ' -f1-3 /proc/loadavg)
      row=$(python3 - "$res" "$round" "$c" "$threads" "$layers" "$dim" "$heads" "$kv" "$inter" \
              "$vocab" "$load1" "$check" <<'PY'
import json, sys
res, rnd, config, threads, layers, dim, heads, kv, inter, vocab, load1, check = sys.argv[1:]
r = json.loads(res)
r.pop("tokens", None)
if "prefill_tokens_per_s" not in r:
    r["prefill_tokens_per_s"] = r["prompt_tokens"] / (r["ttft_ms"] / 1e3)
row = {"round": int(rnd), "config": config, "threads": int(threads),
       "model": {"arch": "llama", "layers": int(layers), "dim": int(dim), "heads": int(heads),
                 "kv_heads": int(kv), "intermediate": int(inter), "vocab": int(vocab)},
       "dtype": "bf16" if config.endswith("bf16") else "fp32", "load_after": load1, "check": json.loads(check), **r}
print(json.dumps(row))
PY
)
      echo "== round $round $c at $s: $(python3 -c "import json,sys; d=json.loads(sys.argv[1]); print('prefill %.0f tokens/s, decode %.1f tokens/s' % (d['prefill_tokens_per_s'], d['decode_tokens_per_s']))" "$row")" >&2
      bench/record.py "$results" --run generate_vs_llama_cpp --round "$round" --load "$load0" \
        --command "${cmd[*]}" --json "$row"
    done
  done
done
# Where the fp32 prefill's time goes (docs/generate.md): the attention kernel's fp32 forward and
# the sgemm of the dense layers, timed by `wallfacer bench kernel` at the longest prompt with the
# model's heads, same threads, the better of 2 rounds (the first also touches fresh memory).
s_max=$(printf '%s\n' $seqs | sort -n | tail -1)
cmd=(env OMP_NUM_THREADS="$threads" "$wf" bench kernel --seq "$s_max" --heads "$heads" --kv-heads "$kv"
     --head-dim $((dim / heads)) --causal --dtype fp32 --iters 2 --json)
echo "== the attention kernel at $s_max (fp32, causal)" >&2
bench/record.py "$results" --run attn_kernel -- "${cmd[@]}"
python3 bench/generate_vs_llama_cpp_table.py "$results"
