#!/usr/bin/env bash
# Packed documents in the schedule counter: each strategy's work imbalance and the busiest rank's
# bytes without documents, with documents in the strategy's layout and with documents in the
# balanced layout, causal and full (`wallfacer attn --count`: the schedules are summed, nothing
# runs, no MPI; seconds on any machine).
#
#   bench/documents_count.sh [--ranks 8] [--seq 65536] [--heads 8] [--head-dim 64] [--docs 16]
#                            [--seed 1] [--out docs/data/documents-count.jsonl]
#
# Strategies: ring, zigzag, WallFacer C=1 and C=2, Ulysses, Ulysses 2 x ring and Ulysses 2 x
# zigzag (C = 2 needs 4 | ranks, the hybrids and Ulysses heads divisible by their degree). The
# documents: --docs-random DOCS --seed SEED. Appends one JSON line per case to OUT through
# bench/record.py (run "documents_count"): the --json output of
#
#   build/wallfacer attn --count RANKS --strategy ... --seq SEQ --heads HEADS --head-dim HEAD_DIM
#     [--causal] [--docs-random DOCS --seed SEED] [--layout balanced] --json
#
# with the command, the commit and the load. bench/documents_count_table.py prints the table of
# docs/documents.md, "Imbalance and wire", from it.
set -euo pipefail
cd "$(dirname "$0")/.."
ranks=8 seq=65536 heads=8 head_dim=64 docs=16 seed=1 out=docs/data/documents-count.jsonl
while [[ $# -gt 0 ]]; do
  case "$1" in
    --ranks) ranks=$2; shift 2 ;;
    --seq) seq=$2; shift 2 ;;
    --heads) heads=$2; shift 2 ;;
    --head-dim) head_dim=$2; shift 2 ;;
    --docs) docs=$2; shift 2 ;;
    --seed) seed=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "documents_count.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
done
wf=${WALLFACER:-build/wallfacer}
[[ -x $wf ]] || { echo "documents_count.sh: $wf not found: run make build" >&2; exit 2; }

strategies=("ring" "zigzag" "wallfacer --teams 1" "wallfacer --teams 2" "ulysses"
            "ring --ulysses 2" "zigzag --ulysses 2")
cases=("" "--docs-random $docs --seed $seed" "--docs-random $docs --seed $seed --layout balanced")
for mask in --causal ""; do
  for s in "${strategies[@]}"; do
    for c in "${cases[@]}"; do
      # shellcheck disable=SC2086
      python3 bench/record.py "$out" --run documents_count -- "$wf" attn --count "$ranks" \
        --strategy $s --seq "$seq" --heads "$heads" --head-dim "$head_dim" $mask $c --json
    done
  done
done
