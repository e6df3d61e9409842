#!/usr/bin/env bash
# Time to first token and memory of `wallfacer generate` with the prompt prefilled in one piece and
# in chunks (--prefill-chunk; docs/generate.md, "Memory").
#
#   bench/generate_chunks.sh [--ranks 4] [--tokens 16384] [--chunks "0 8192 4096 2048 1024"]
#                            [--strategy zigzag] [--max-new 8] [--rounds 3] [--cpu-per-rank F]
#                            [--out runs/generate-chunks]
#
# --chunks: the --prefill-chunk values, 0 for the prompt in one piece; every round runs each, in
# that order. The model and the prompt are bench/generate.sh's (a Llama of 1 layer of width 128, 2
# heads of 64 with 1 K,V head, SwiGLU of 344, byte-level vocabulary, random weights; a seeded
# random prompt of --tokens ids), built the same way (OUT/model, OUT/prompt-N.npy); greedy,
# --max-new tokens. Appends one JSON line per run to OUT/results.jsonl (bench/record.py: the
# command, commit, CPU, load at the start): the round, ranks, chunk asked, the model, the load after
# the run, cpu_per_rank and generate's --json object (ttft_ms, prefill_chunks,
# prefill_chunk_tokens, prefill_pass_kv_chunks, prefill_pass_q_chunks, memory_estimate_bytes,
# peak_rss_bytes_per_rank, cache_bytes_per_rank, ...). bench/generate_chunks_table.py prints the
# table of docs/generate.md.
set -euo pipefail
cd "$(dirname "$0")/.."
P=4 tokens=16384 chunks="0 8192 4096 2048 1024" strategy=zigzag max_new=8 rounds=3 cpu=""
out=runs/generate-chunks
while [[ $# -gt 0 ]]; do
  case "$1" in
    --ranks) P=$2; shift 2 ;;
    --tokens) tokens=$2; shift 2 ;;
    --chunks) chunks=$2; shift 2 ;;
    --strategy) strategy=$2; shift 2 ;;
    --max-new) max_new=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --cpu-per-rank) cpu=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "generate_chunks.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
done
for n in $P $tokens $max_new $rounds $chunks; do
  [[ $n =~ ^[0-9]+$ ]] ||
    { echo "generate_chunks.sh: '$n' must be a whole number (see --help)" >&2; exit 2; }
done
wf=${WALLFACER:-build/wallfacer}
[[ -x $wf ]] || { echo "generate_chunks.sh: $wf not found: run make build" >&2; exit 2; }
source bench/train_launch.sh
train_launcher generate_chunks.sh "$P" "$cpu" "" ""
mkdir -p "$out"
results=$out/results.jsonl
layers=1 dim=128 heads=2 kv=1 inter=344 vocab=257
if [[ ! -d $out/model/ckpt ]]; then
  source bench/llama_toml.sh
  llama_one_step "$out" 256 1e-4
fi
source bench/generate_prompt.sh
prompt=$(prompt "$tokens")
for round in $(seq 1 "$rounds"); do
  for c in $chunks; do
    args=(generate --ckpt "$out/model" --prompt-tokens "$prompt" --max-new "$max_new"
          --temperature 0 --json --strategy "$strategy" --prefill-chunk "$c")
    load0=$(cut -d' ' -f1-3 /proc/loadavg)
    log=$out/chunk-$c-$round.log
    "${launch[@]}" "${nranks[@]}" "${args[@]}" >"$log" 2>"$log.err" ||
      { echo "generate_chunks.sh: --prefill-chunk $c failed; the end of $log.err:" >&2
        tail -15 "$log.err" >&2; exit 1; }
    load1=$(cut -d' ' -f1-3 /proc/loadavg)
    row=$(python3 - "$log" "$round" "$c" "$P" "$layers" "$dim" "$heads" "$kv" "$inter" "$load1" \
            "${cpu:-0}" <<'PY'
import json, sys
(log, rnd, chunk, P, layers, dim, heads, kv, inter, load1, cpu) = sys.argv[1:]
gen = json.loads(open(log).read().strip().splitlines()[-1])
row = {"round": int(rnd), "chunk_asked": int(chunk), "ranks": int(P),
       "model": {"arch": "llama", "layers": int(layers), "dim": int(dim), "heads": int(heads),
                 "kv_heads": int(kv), "intermediate": int(inter), "vocab": 257},
       "load_after": load1, "cpu_per_rank": float(cpu)}
gen.pop("tokens", None)
row.update(gen)
print(json.dumps(row))
PY
)
    echo "== round $round --prefill-chunk $c: $(python3 -c "import json,sys; d=json.loads(sys.argv[1]); print('%d chunks, ttft %.2f s' % (d['prefill_chunks'], d['ttft_ms']/1e3))" "$row")" >&2
    bench/record.py "$results" --run generate-chunks --round "$round" --load "$load0" \
      --command "${launch[*]} ${nranks[*]} ${args[*]}" --json "$row"
  done
done
python3 bench/generate_chunks_table.py "$results"
