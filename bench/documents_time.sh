#!/usr/bin/env bash
# Packed documents in time: each strategy's attention forward + backward without documents, with
# documents in the strategy's layout and with documents in the balanced layout, all cases of a
# round one after the other, in rounds.
#
#   bench/documents_time.sh [--ranks 4] [--seq 4096] [--heads 4] [--head-dim 64] [--docs 16]
#                           [--seed 1] [--iters 3] [--rounds 2]
#                           [--out docs/data/documents-time.jsonl]
#
# Strategies: ring, zigzag, WallFacer C=2 (4 | ranks) and Ulysses (ranks | heads). The documents:
# --docs-random DOCS --seed SEED. Each run is
#
#   scripts/wallfacer-mpirun RANKS attn --strategy ... --seq SEQ --heads HEADS --head-dim HEAD_DIM
#     --causal --iters ITERS [--docs-random DOCS --seed SEED] [--layout balanced] --json
#
# (one OpenMP thread per rank, the ranks oversubscribed on this machine's cores), appended to OUT
# through bench/record.py (run "documents_time", with the round, the command, the commit and the
# load). bench/documents_time_table.py prints the table of docs/documents.md, "Time", from it.
set -euo pipefail
cd "$(dirname "$0")/.."
ranks=4 seq=4096 heads=4 head_dim=64 docs=16 seed=1 iters=3 rounds=2
out=docs/data/documents-time.jsonl
while [[ $# -gt 0 ]]; do
  case "$1" in
    --ranks) ranks=$2; shift 2 ;;
    --seq) seq=$2; shift 2 ;;
    --heads) heads=$2; shift 2 ;;
    --head-dim) head_dim=$2; shift 2 ;;
    --docs) docs=$2; shift 2 ;;
    --seed) seed=$2; shift 2 ;;
    --iters) iters=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "documents_time.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
done
wf=${WALLFACER:-build/wallfacer}
[[ -x $wf ]] || { echo "documents_time.sh: $wf not found: run make build" >&2; exit 2; }

strategies=("ring" "zigzag")
((ranks % 4 == 0)) && strategies+=("wallfacer --teams 2")
((heads % ranks == 0)) && strategies+=("ulysses")
cases=("" "--docs-random $docs --seed $seed" "--docs-random $docs --seed $seed --layout balanced")
for round in $(seq 1 "$rounds"); do
  for s in "${strategies[@]}"; do
    for c in "${cases[@]}"; do
      echo "-- round $round: $s ${c:-(no documents)}" >&2
      # shellcheck disable=SC2086
      python3 bench/record.py "$out" --run documents_time --round "$round" -- \
        scripts/wallfacer-mpirun "$ranks" attn --strategy $s --seq "$seq" --heads "$heads" \
        --head-dim "$head_dim" --causal --iters "$iters" $c --json
    done
  done
done
python3 bench/documents_time_table.py "$out"
