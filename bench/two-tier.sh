#!/usr/bin/env bash
# Every strategy on emulated two-tier clusters (scripts/emulate-cluster), measured and predicted.
#
#   bench/two-tier.sh [--clusters "2x4 4x2 2x2"] [--rate 50mbit] [--seq 8192] [--heads 4]
#                     [--head-dim 64] [--iters 2] [--full] [--configs "CFG;CFG;..."]
#                     [--calibrated DIR] [--out DIR]
#
# For each cluster NxR (N nodes of R ranks): `tune --calibrate` on it writes DIR/cluster-NxR.toml
# (with --calibrated CALDIR: CALDIR/cluster-NxR.toml is used as it is, no calibration, so that
# runs added later are predicted by the same frozen cluster files); then ring, zigzag, Ulysses (where the heads allow), the Ulysses x zigzag hybrids and WallFacer-C
# for every C with C^2 | P (with and without --keep-kv), hybrids and WallFacer in both placements,
# each run as
# `attn --iters K --json --cluster DIR/cluster-NxR.toml` (causal unless --full). Each row: forward
# and backward time (median of K), exposed communication, the bytes the nodes' cards carried (read
# from the veths, per iteration) beside the schedule's count of inter-node bytes, and the
# planner's prediction; and the planner's best configuration (`wallfacer plan`, DIR/plan-NxR.json)
# beside the fastest measured. Writes DIR/results.jsonl (one JSON object per run, with its command,
# the commit and the load average before it) and DIR/table.md. --configs runs only these
# (`attn --strategy` arguments separated by ';', e.g. "ring;zigzag"): to measure again what a change
# of the code changed, appended to the full run's lines (bench/two_tier_table.py shows the last run
# of each configuration of a cluster).
# Needs root (network namespaces).
set -euo pipefail
cd "$(dirname "$0")/.."
clusters="2x4 4x2 2x2" rate=50mbit seq=8192 heads=4 head_dim=64 iters=2 mask=--causal
out=runs/two-tier configs_arg="" caldir=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --clusters) clusters=$2; shift 2 ;;
    --rate) rate=$2; shift 2 ;;
    --seq) seq=$2; shift 2 ;;
    --heads) heads=$2; shift 2 ;;
    --head-dim) head_dim=$2; shift 2 ;;
    --iters) iters=$2; shift 2 ;;
    --full) mask=""; shift ;;
    --configs) configs_arg=$2; shift 2 ;;
    --calibrated) caldir=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "two-tier.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
done
[[ $(id -u) -eq 0 ]] || { echo "two-tier.sh: needs root for the emulated cluster" >&2; exit 2; }
make -s build >/dev/null
mkdir -p "$out"
: >"$out/results.jsonl"
emu="scripts/emulate-cluster --priority"
ring=ring
[[ -n "$mask" ]] && ring=zigzag

for nr in $clusters; do
  n=${nr%x*} r=${nr#*x} p=$((${nr%x*} * ${nr#*x}))
  cl=$out/cluster-$nr.toml
  if [[ -n "$caldir" ]]; then
    cl=$caldir/cluster-$nr.toml
    [[ -f $cl ]] || { echo "two-tier.sh: --calibrated: $cl not found" >&2; exit 2; }
    echo "== $n nodes x $r ranks, cards $rate: cluster file $cl" >&2
  else
    echo "== $n nodes x $r ranks, cards $rate: calibrating" >&2
    $emu --nodes "$n" --ranks-per-node "$r" --rate "$rate" -- tune --calibrate --out "$cl" |
      grep -E "between nodes|inside a node|card of" >&2
  fi
  configs=("ring")
  [[ -n "$mask" ]] && configs+=("zigzag")
  ((heads % p == 0)) && configs+=("ulysses")
  for u in 2 4 8; do
    if ((u < p && p % u == 0 && heads % u == 0)); then
      configs+=("$ring --ulysses $u --placement team-intra" "$ring --ulysses $u --placement ring-intra")
    fi
  done
  for c in 2 3 4; do
    if ((c * c <= p && p % (c * c) == 0)); then
      configs+=("wallfacer --teams $c --placement team-intra" "wallfacer --teams $c --placement ring-intra"
                "wallfacer --teams $c --placement team-intra --keep-kv"
                "wallfacer --teams $c --placement ring-intra --keep-kv")
    fi
  done
  [[ -z "$configs_arg" ]] || IFS=';' read -r -a configs <<<"$configs_arg"
  # The planner's ranking for the same attention shape (a one-layer causal GPT of it).
  printf '[model]\nname = "two-tier"\nlayers = 1\ndim = %d\nheads = %d\nkv_heads = %d\ncausal = %s\n' \
    $((heads * head_dim)) "$heads" "$heads" "$([[ -n "$mask" ]] && echo true || echo false)" \
    >"$out/model.toml"
  build/wallfacer plan --cluster "$cl" --model "$out/model.toml" --seq "$seq" --gpus "$p" --json \
    >"$out/plan-$nr.json"
  for cfg in "${configs[@]}"; do
    echo "-- $nr: $cfg" >&2
    cmd="$emu --nodes $n --ranks-per-node $r --rate $rate --counters $out/cards.json -- attn --strategy $cfg --seq $seq --heads $heads --head-dim $head_dim${mask:+ $mask} --iters $iters --json --cluster $cl"
    load=$(cut -d' ' -f1 /proc/loadavg)
    # shellcheck disable=SC2086
    json=$($emu --nodes "$n" --ranks-per-node "$r" --rate "$rate" --counters "$out/cards.json" -- \
      attn --strategy $cfg --seq "$seq" --heads "$heads" --head-dim "$head_dim" $mask \
      --iters "$iters" --json --cluster "$cl" 2>/dev/null | tail -1)
    python3 - "$json" "$out/cards.json" "$nr" "$cfg" "$cmd" "$(git rev-parse --short HEAD)" "$load" \
      >>"$out/results.jsonl" <<'PY'
import json, sys
run = json.loads(sys.argv[1])
cards = json.load(open(sys.argv[2]))
run["cluster"] = sys.argv[3]
run["config"] = sys.argv[4]
run["command"], run["commit"], run["load"] = sys.argv[5], sys.argv[6], float(sys.argv[7])
run["rate"] = cards["rate"]
run["cards"] = cards
# Bytes per iteration the cards delivered into the nodes: the job's total over the iterations
# (start-up and barriers included; a packet dropped by a full queue and sent again counts once).
run["card_bytes_per_iter"] = sum(cards["received_bytes"]) / run["iters"]
print(json.dumps(run))
PY
  done
done
rm -f "$out/cards.json"

python3 bench/two_tier_table.py "$out/results.jsonl" "$out" >"$out/table.md"
cat "$out/table.md"
