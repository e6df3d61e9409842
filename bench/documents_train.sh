#!/usr/bin/env bash
# Packed-document GPT training, the balanced layout against the strategy's, per strategy.
#
#   bench/documents_train.sh [--ranks 8] [--seq 8192] [--steps 3] [--rounds 2]
#                            [--strategies "zigzag ring wallfacer2"] [--layers 2] [--dim 128]
#                            [--heads 2] [--dtype auto] [--cpu-per-rank F] [--emulate NxR:RATE]
#                            [--mix few-long|lognormal] [--out runs/documents-train]
#
# The corpus is long-tailed, 600 short files and a few as long as the sequence, shuffled with a
# fixed seed and tokenized by `wallfacer prepare` (one document per file, end-of-text after each):
#   --mix few-long (default): 6 files of seq + 1 bytes and 600 of 16..1024 bytes (log-uniform); a
#     quarter of the tokens are in documents of half the sequence or more;
#   --mix lognormal: 600 files of log-normal lengths, median seq / 32 bytes and sigma 2 (the
#     distribution of `wallfacer attn --docs-random`), cut to 16..seq + 1 bytes: about 4 % of them
#     as long as the sequence, three quarters under 1024 bytes, and half of the tokens in documents
#     of half the sequence or more, as in corpora where most documents are short and most tokens
#     are in long ones. Every configuration trains the same GPT on the
# same windows with train.packing = "documents" on --ranks ranks (sp = ranks, batch 1), once with
# parallel.layout = "balanced" and once with "strategy", the two alternating inside each round.
# Appends one JSON line per run to OUT/results.jsonl: the command, the commit, the load average
# before and after, the tokens/s of the steps after the first and every step's work_imbalance.
# bench/documents_train_table.py prints the table of docs/documents.md from it.
#
# --cpu-per-rank F: every rank runs capped at F of a core in a cgroup of its own
# (scripts/wallfacer-mpirun --cpu-per-rank; needs root), as on a cluster of dedicated devices: a
# rank that waits leaves its share unused. Recorded as "cpu_per_rank" in each line (0: no cap), with
# the scheduling period "cpu_period_us" ($WALLFACER_CPU_PERIOD_US, default 10000) and
# "wait_poll_us" ($WALLFACER_WAIT_POLL_US, default 50: how often a waiting rank tests its transfers,
# sleeping in between; scripts/cpu-per-rank).
#
# --emulate NxR:RATE (e.g. 2x4:1gbit): every run on N emulated nodes of R ranks joined by cards of
# RATE (scripts/emulate-cluster, with --cpu-per-rank when given; needs root; N x R = --ranks),
# recorded as "cluster" with the bytes the cards carried ("card_bytes": each node's sent bytes).
set -euo pipefail
cd "$(dirname "$0")/.."
ranks=8 seq=8192 steps=3 rounds=2 strategies="zigzag ring wallfacer2" layers=2 dim=128 heads=2
dtype=auto out=runs/documents-train cpu="" emulate="" mix=few-long
while [[ $# -gt 0 ]]; do
  case "$1" in
    --ranks) ranks=$2; shift 2 ;;
    --seq) seq=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --strategies) strategies=$2; shift 2 ;;
    --layers) layers=$2; shift 2 ;;
    --dim) dim=$2; shift 2 ;;
    --heads) heads=$2; shift 2 ;;
    --dtype) dtype=$2; shift 2 ;;
    --cpu-per-rank) cpu=$2; shift 2 ;;
    --emulate) emulate=$2; shift 2 ;;
    --mix) mix=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "documents_train.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
done
[[ $mix == few-long || $mix == lognormal ]] ||
  { echo "documents_train.sh: --mix '$mix' must be few-long or lognormal" >&2; exit 2; }
wf=${WALLFACER:-build/wallfacer}
[[ -x $wf ]] || { echo "documents_train.sh: $wf not found: run make build" >&2; exit 2; }
source bench/train_launch.sh
train_launcher documents_train.sh "$ranks" "$cpu" "$emulate" "$out/cards.json"
mkdir -p "$out/files"
results=$out/results.jsonl

# The corpus (--mix), in a seeded order.
rm -f "$out"/files/*.txt
python3 - "$out/files" "$seq" "$mix" <<'PY'
import math, os, random, sys
d, seq, mix = sys.argv[1], int(sys.argv[2]), sys.argv[3]
rng = random.Random(1)
if mix == "few-long":
    lengths = [seq + 1] * 6 + [int(16 * math.exp(rng.random() * math.log(1024 / 16)))
                               for _ in range(600)]
else:
    lengths = [max(16, min(seq + 1, int(seq / 32 * math.exp(rng.gauss(0, 2))))) for _ in range(600)]
rng.shuffle(lengths)
for i, n in enumerate(lengths):
    with open(os.path.join(d, f"{i:04d}.txt"), "w") as f:
        f.write("".join(rng.choice("abcdefghijklmnopqrstuvwxyz ") for _ in range(n - 1)))
PY
inputs=()
for f in "$out"/files/*.txt; do inputs+=(--input "$f"); done
"$wf" prepare "${inputs[@]}" --out "$out/data" --val-fraction 0.05 >/dev/null

source bench/gpt_toml.sh
gpt_toml "$out/bench.toml" "$out/data"
cat >>"$out/bench.toml" <<TOML
eval_every = 0
ckpt_every = 0
dtype = "$dtype"
packing = "documents"
[parallel]
sp = $ranks
TOML
commit=$(git rev-parse --short HEAD)$(git diff --quiet HEAD -- src apps || echo "+changes")
for round in $(seq 1 "$rounds"); do
  for s in $strategies; do
    case $s in
      wallfacer*) strategy=wallfacer teams=${s#wallfacer} ;;
      *) strategy=$s teams=1 ;;
    esac
    for layout in balanced strategy; do
      name=$s-$layout-$round
      args=(train --config "$out/bench.toml" --out "$out/$name" --overwrite --progress none
            --steps "$steps" --set parallel.strategy="$strategy" --set parallel.teams="$teams"
            --set parallel.layout="$layout")
      load0=$(cut -d' ' -f1-3 /proc/loadavg)
      rm -f "$out/cards.json"
      "${launch[@]}" "${nranks[@]}" "${args[@]}" >"$out/$name.log"
      load1=$(cut -d' ' -f1-3 /proc/loadavg)
      echo "== round $round $s $layout: $(tail -1 "$out/$name.log")" >&2
      python3 - "$out/$name/metrics.jsonl" "$results" "$round" "$s" "$strategy" "$teams" \
        "$layout" "$ranks" "$seq" "$commit" "$load0" "$load1" "${cpu:-0}" "$mix" \
        "$emulate" "$out/cards.json" \
        "${WALLFACER_CPU_PERIOD_US:+WALLFACER_CPU_PERIOD_US=$WALLFACER_CPU_PERIOD_US }${WALLFACER_WAIT_POLL_US:+WALLFACER_WAIT_POLL_US=$WALLFACER_WAIT_POLL_US }${launch[*]} ${nranks[*]} ${args[*]}" <<'PY'
import json, os, sys
sys.path.insert(0, "bench")
from record import train_run
(metrics, results, rnd, config, strategy, teams, layout, ranks, seq, commit, load0, load1, cpu,
 mix, emulate, cards, command) = sys.argv[1:]
run, lines = train_run(metrics, seq, cpu, emulate, cards)
row = {"command": command, "commit": commit, "round": int(rnd), "config": config,
       "strategy": strategy, "teams": int(teams), "layout": layout, "ranks": int(ranks),
       "seq": int(seq), "mix": mix, **run,
       "work_imbalance": [l["work_imbalance"] for l in lines],
       "load_before": load0, "load_after": load1, "cpus": os.cpu_count()}
with open(results, "a") as f:
    f.write(json.dumps(row) + "\n")
PY
    done
  done
done
python3 bench/documents_train_table.py "$results"
