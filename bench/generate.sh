#!/usr/bin/env bash
# Time to first token and decode speed of `wallfacer generate` against the number of ranks, the
# prompt's length and the prefill's strategy (docs/generate.md, "Measured").
#
#   bench/generate.sh [--runs "1:16384,65536 8:16384,65536,262144"] [--configs "zigzag wallfacer2"]
#                     [--max-new 64] [--rounds 1] [--first-round 1] [--layers 1] [--dim 128]
#                     [--heads 2] [--kv-heads 1] [--intermediate 344] [--cpu-per-rank F]
#                     [--emulate NxR:RATE] [--out runs/generate]
#
# --runs: for each rank count P, the prompt lengths (tokens) to run on P ranks. Each configuration
# of --configs runs every (P, length) with P > 1; one rank runs one (zigzag: on one rank every
# strategy is the same attention). The configurations:
#   ring, zigzag     --strategy ring | zigzag
#   wallfacer2       --strategy wallfacer --teams 2 (needs 4 | P)
#   ulysses2-zigzag  --strategy zigzag --ulysses 2 (needs 2 | kv heads)
# The model (model.arch = "llama"; bench/llama_toml.sh): by default 1 layer of width 128, 2 heads of
# 64 with 1 K,V head (grouped-query attention), SwiGLU of 344, the byte-level vocabulary of 257,
# rope_theta 500000, random weights (one training step of seed 1, saved). The prompts are seeded
# random ids of each length; the generation is greedy, --max-new tokens (the first one ends the
# time to first token, the others are the decode). Appends one JSON line per run to
# OUT/results.jsonl (bench/record.py: the command, commit, CPU, load at the start): the round,
# configuration, ranks, the model, the load after the run, the launcher's settings (cpu_per_rank,
# the scheduling period WALLFACER_CPU_PERIOD_US and wait poll when set, emulate) and generate's
# --json object (ttft_ms, decode_tokens_per_s, merge_bytes_per_token, merge_ms_per_token,
# cache_bytes_per_rank, ...). bench/generate_table.py prints the tables of docs/generate.md.
#
# --cpu-per-rank F caps each rank at F of a core (scripts/cpu-per-rank: needs root), so that ranks
# compute side by side as on separate machines; --emulate NxR:RATE runs the job on N emulated nodes
# of R ranks joined by cards of RATE (scripts/emulate-cluster; every P of --runs must be N x R).
set -euo pipefail
cd "$(dirname "$0")/.."
runs="1:16384,65536 2:16384,65536 4:16384,65536 8:16384,65536" configs="zigzag" max_new=64
rounds=1 first=1 layers=1 dim=128 heads=2 kv=1 inter=344 out=runs/generate cpu="" emulate=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --runs) runs=$2; shift 2 ;;
    --configs) configs=$2; shift 2 ;;
    --max-new) max_new=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --first-round) first=$2; shift 2 ;;
    --layers) layers=$2; shift 2 ;;
    --dim) dim=$2; shift 2 ;;
    --heads) heads=$2; shift 2 ;;
    --kv-heads) kv=$2; shift 2 ;;
    --intermediate) inter=$2; shift 2 ;;
    --cpu-per-rank) cpu=$2; shift 2 ;;
    --emulate) emulate=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "generate.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
done
for c in $configs; do
  [[ $c == ring || $c == zigzag || $c == wallfacer2 || $c == ulysses2-zigzag ]] ||
    { echo "generate.sh: configuration '$c' must be ring, zigzag, wallfacer2 or ulysses2-zigzag" >&2
      exit 2; }
done
for r in $runs; do
  [[ $r =~ ^[0-9]+:[0-9]+(,[0-9]+)*$ ]] ||
    { echo "generate.sh: --runs entry '$r' must be P:LENGTH[,LENGTH...], e.g. 8:16384,65536" >&2
      exit 2; }
done
[[ $max_new =~ ^[0-9]+$ && $max_new -ge 2 ]] ||
  { echo "generate.sh: --max-new '$max_new' must be at least 2 (the decode is the tokens after the first)" >&2
    exit 2; }
wf=${WALLFACER:-build/wallfacer}
[[ -x $wf ]] || { echo "generate.sh: $wf not found: run make build" >&2; exit 2; }
source bench/train_launch.sh
mkdir -p "$out"
results=$out/results.jsonl

# The model: one training step from seed 1 at seq 256 on a small generated text, saved.
if [[ ! -d $out/model/ckpt ]]; then
  vocab=257
  source bench/llama_toml.sh
  llama_one_step "$out" 256 1e-4
fi
source bench/generate_prompt.sh
env_prefix="${WALLFACER_CPU_PERIOD_US:+WALLFACER_CPU_PERIOD_US=$WALLFACER_CPU_PERIOD_US }${WALLFACER_WAIT_POLL_US:+WALLFACER_WAIT_POLL_US=$WALLFACER_WAIT_POLL_US }"
for round in $(seq "$first" $((first + rounds - 1))); do
  for r in $runs; do
    P=${r%%:*}
    train_launcher generate.sh "$P" "$cpu" "$emulate" "$out/cards.json"
    for seq in ${r#*:}; do
      seq=${seq//,/ }
      for s in $seq; do
        cs=$configs
        [[ $P -gt 1 ]] || cs=zigzag
        for c in $cs; do
          case $c in
            ring) strategy=ring teams=1 ulysses=1 ;;
            zigzag) strategy=zigzag teams=1 ulysses=1 ;;
            wallfacer2) strategy=wallfacer teams=2 ulysses=1 ;;
            ulysses2-zigzag) strategy=zigzag teams=1 ulysses=2 ;;
          esac
          if [[ $c == wallfacer2 && $((P % 4)) -ne 0 ]] || [[ $c == ulysses2-zigzag && $P -lt 2 ]]; then
            continue
          fi
          args=(generate --ckpt "$out/model" --prompt-tokens "$(prompt "$s")" --max-new "$max_new"
                --temperature 0 --json --strategy "$strategy" --teams "$teams" --ulysses "$ulysses")
          load0=$(cut -d' ' -f1-3 /proc/loadavg)
          rm -f "$out/cards.json"
          log=$out/$c-$P-$s-$round.log
          "${launch[@]}" "${nranks[@]}" "${args[@]}" >"$log" 2>"$log.err" ||
            { echo "generate.sh: $c on $P ranks at $s failed; the end of $log.err:" >&2
              tail -15 "$log.err" >&2; exit 1; }
          load1=$(cut -d' ' -f1-3 /proc/loadavg)
          row=$(python3 - "$log" "$round" "$c" "$P" "$layers" "$dim" "$heads" "$kv" "$inter" \
                  "$load1" "${cpu:-0}" "$emulate" "$out/cards.json" <<'PY'
import json, os, sys
(log, rnd, config, P, layers, dim, heads, kv, inter, load1, cpu, emulate, cards) = sys.argv[1:]
gen = json.loads(open(log).read().strip().splitlines()[-1])
row = {"round": int(rnd), "config": config, "ranks": int(P),
       "model": {"arch": "llama", "layers": int(layers), "dim": int(dim), "heads": int(heads),
                 "kv_heads": int(kv), "intermediate": int(inter), "vocab": 257},
       "load_after": load1, "cpu_per_rank": float(cpu), "emulate": emulate}
for k in ("WALLFACER_CPU_PERIOD_US", "WALLFACER_WAIT_POLL_US"):
    if os.environ.get(k):
        row[k.lower()] = int(os.environ[k])
if emulate and os.path.exists(cards):
    row["card_bytes"] = json.load(open(cards))
gen.pop("tokens", None)
row.update(gen)
print(json.dumps(row))
PY
)
          echo "== round $round $c P=$P seq=$s: ttft $(python3 -c "import json,sys; d=json.loads(sys.argv[1]); print('%.1f s, decode %.1f tokens/s, merge %.2f ms/token' % (d['ttft_ms']/1e3, d['decode_tokens_per_s'], d['merge_ms_per_token']))" "$row")" >&2
          bench/record.py "$results" --run generate --round "$round" --load "$load0" \
            --command "${env_prefix}${launch[*]} ${nranks[*]} ${args[*]}" --json "$row"
        done
      done
    done
  done
done
python3 bench/generate_table.py "$results"
