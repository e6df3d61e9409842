#!/usr/bin/env bash
# Attention with packed documents and with a sliding window on an emulated cluster, one run each:
#
#   sudo bench/documents_cluster_attn.sh [--nodes 2] [--ranks-per-node 4] [--rate 1gbit]
#        [--cpu-per-rank 0.2] [--seq 16384] [--heads 1] [--window 2048] [--docs-random 16]
#        [--strategies "ring zigzag"] [--out runs/documents-cluster-attn/results.jsonl]
#
# Per strategy, `wallfacer attn --seq N --heads H --head-dim 64 --causal --iters 1` on the
# emulated nodes (scripts/emulate-cluster with --counters, each rank capped at --cpu-per-rank of a
# core): without documents; with --docs-random D --seed 1 in the strategy's layout and in the
# balanced layout; with --window W. (A K,V block that no query of a rank needs is never sent: there
# is no switch to send it anyway, so "documents" against "none" is what skipping and the masked
# work save together.) Appends one JSON line per run: attn's --json output with the command, the
# commit, the load average before and after, the cluster and the bytes each node's card sent.
# bench/documents_cluster_table.py prints the table of docs/documents.md from it.
set -euo pipefail
cd "$(dirname "$0")/.."
nodes=2 rpn=4 rate=1gbit cpu=0.2 seq=16384 heads=1 window=2048 docs=16 strategies="ring zigzag"
out=runs/documents-cluster-attn/results.jsonl
while [[ $# -gt 0 ]]; do
  case "$1" in
    --nodes) nodes=$2; shift 2 ;;
    --ranks-per-node) rpn=$2; shift 2 ;;
    --rate) rate=$2; shift 2 ;;
    --cpu-per-rank) cpu=$2; shift 2 ;;
    --seq) seq=$2; shift 2 ;;
    --heads) heads=$2; shift 2 ;;
    --window) window=$2; shift 2 ;;
    --docs-random) docs=$2; shift 2 ;;
    --strategies) strategies=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "documents_cluster_attn.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
done
[[ -x ${WALLFACER:-build/wallfacer} ]] ||
  { echo "documents_cluster_attn.sh: ${WALLFACER:-build/wallfacer} not found: run make build" >&2; exit 2; }
mkdir -p "$(dirname "$out")"
cards=$(mktemp)
trap 'rm -f "$cards" "$cards.out"' EXIT
commit=$(git rev-parse --short HEAD)$(git diff --quiet HEAD -- src apps || echo "+changes")
for s in $strategies; do
  for case in none docs docs-balanced window; do
    args=(attn --strategy "$s" --seq "$seq" --heads "$heads" --head-dim 64 --causal --iters 1 --json)
    case $case in
      docs) args+=(--docs-random "$docs" --seed 1) ;;
      docs-balanced) args+=(--docs-random "$docs" --seed 1 --layout balanced) ;;
      window) args+=(--window "$window") ;;
    esac
    emu=(scripts/emulate-cluster --nodes "$nodes" --ranks-per-node "$rpn" --rate "$rate"
         --cpu-per-rank "$cpu" --counters "$cards" --)
    load0=$(cut -d' ' -f1-3 /proc/loadavg)
    "${emu[@]}" "${args[@]}" >"$cards.out"
    load1=$(cut -d' ' -f1-3 /proc/loadavg)
    python3 - "$cards.out" "$cards" "$out" "$s" "$case" "${nodes}x$rpn:$rate" "$cpu" "$commit" \
      "$load0" "$load1" "${emu[*]} ${args[*]}" <<'PY'
import json, os, sys
(run, cards, out, strategy, case, cluster, cpu, commit, load0, load1, command) = sys.argv[1:]
row = {"command": command, "commit": commit, "config": strategy, "case": case, "cluster": cluster,
       "cpu_per_rank": float(cpu), "load_before": load0, "load_after": load1,
       "cpus": os.cpu_count()}
row.update(json.loads([l for l in open(run) if l.startswith("{")][-1]))
row["card_sent_bytes"] = json.load(open(cards))["sent_bytes"]
with open(out, "a") as f:
    f.write(json.dumps(row) + "\n")
print(f"== {strategy} {case}: fwd+bwd {row['time_ms']['fwd'] + row['time_ms']['bwd']:.0f} ms, "
      f"cards sent {row['card_sent_bytes']}", file=sys.stderr)
PY
  done
done
python3 bench/documents_cluster_table.py "$out"
