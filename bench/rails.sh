#!/usr/bin/env bash
# Every strategy on emulated clusters with one shared card per node or a card per device
# (scripts/emulate-cluster --cards-per-node), measured beside the frozen planner's prediction.
#
#   bench/rails.sh [--clusters "4x2 4x4 2x4"] [--cards "R 1"] [--configs "CFG;CFG;..."]
#                  [--rate 50mbit] [--seq 8192] [--heads 4] [--head-dim 64] [--iters 2] [--check]
#                  [--calibrated DIR] [--out FILE.jsonl]
#
# For each cluster NxR (N nodes of R ranks) and each card count K of --cards ("R": a card per rank):
# the cluster file DIR/cluster-NxR-kK.toml is read when it exists, else written first by `tune
# --calibrate` on that emulated cluster (its output in DIR/cluster-NxR-kK.log) and not changed
# afterwards (the model is frozen before the runs it predicts); DIR/plan-NxR-kK.json is the
# planner's ranking for the same shape (a one-layer causal model). Then each configuration (default:
# ring, zigzag, Ulysses u x zigzag in both placements, WallFacer-C for C^2 | P in both placements
# with and without --keep-kv; --configs gives `attn --strategy` arguments instead, separated by ';')
# runs as `attn --strategy CFG --seq S --heads H --head-dim D --causal --iters K --json --cluster
# FILE` and appends one JSON line to --out (default docs/data/rails.jsonl): the run's JSON (times,
# predicted times, the schedule's bytes per card), the bytes each card sent and received (read from
# the veths) per iteration, the command, the commit, the machine's load average before and after,
# the CPU (model, cores, instruction-set flags: bench/record.py's cpu()).
# With --check each configuration also runs once with `--check --iters 1` (its verdict and errors
# go into the same line; its bytes and time are not used, since the check gathers every tensor).
# Progress goes to stderr. Needs root.
set -euo pipefail
cd "$(dirname "$0")/.."
clusters="4x2 4x4 2x4" cards_list="R 1" configs_arg="" rate=50mbit seq=8192 heads=4 head_dim=64
iters=2 check="" caldir=docs/data/rails out=docs/data/rails.jsonl
while [[ $# -gt 0 ]]; do
  case "$1" in
    --clusters) clusters=$2; shift 2 ;;
    --cards) cards_list=$2; shift 2 ;;
    --configs) configs_arg=$2; shift 2 ;;
    --rate) rate=$2; shift 2 ;;
    --seq) seq=$2; shift 2 ;;
    --heads) heads=$2; shift 2 ;;
    --head-dim) head_dim=$2; shift 2 ;;
    --iters) iters=$2; shift 2 ;;
    --check) check=1; shift ;;
    --calibrated) caldir=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "rails.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
done
[[ $(id -u) -eq 0 ]] || { echo "rails.sh: needs root for the emulated cluster" >&2; exit 2; }
wf=${WALLFACER:-build/wallfacer}
[[ -x "$wf" ]] || { echo "rails.sh: $wf is missing: build first (make build)" >&2; exit 2; }
mkdir -p "$caldir" "$(dirname "$out")"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
commit=$(git rev-parse --short HEAD)$(git diff --quiet HEAD -- src apps scripts || echo -dirty)
emu="scripts/emulate-cluster --priority"
printf '[model]\nname = "rails"\nlayers = 1\ndim = %d\nheads = %d\nkv_heads = %d\ncausal = true\n' \
  $((heads * head_dim)) "$heads" "$heads" >"$tmp/model.toml"

for nr in $clusters; do
  n=${nr%x*} r=${nr#*x} p=$((${nr%x*} * ${nr#*x}))
  for k in $cards_list; do
    [[ "$k" == R ]] && k=$r
    ((r % k == 0)) || continue
    cl=$caldir/cluster-$nr-k$k.toml
    if [[ ! -f "$cl" ]]; then
      echo "== $nr, $k card(s) per node, $rate: calibrating into $cl" >&2
      $emu --nodes "$n" --ranks-per-node "$r" --rate "$rate" --cards-per-node "$k" -- \
        tune --calibrate --out "$cl" >"${cl%.toml}.log"
      grep -E "between nodes|inside a node|card of|teams of" "${cl%.toml}.log" >&2
    fi
    "$wf" plan --cluster "$cl" --model "$tmp/model.toml" --seq "$seq" --gpus "$p" --json \
      >"$caldir/plan-$nr-k$k.json"
    configs=()
    if [[ -n "$configs_arg" ]]; then
      IFS=';' read -r -a configs <<<"$configs_arg"
    else
      configs=("zigzag")
      for c in 2 4; do
        ((c * c <= p && p % (c * c) == 0)) || continue
        for pl in team-intra ring-intra; do
          configs+=("wallfacer --teams $c --placement $pl --keep-kv" "wallfacer --teams $c --placement $pl")
        done
      done
      for u in 2 4; do
        ((u < p && p % u == 0 && heads % u == 0)) || continue
        configs+=("zigzag --ulysses $u --placement team-intra" "zigzag --ulysses $u --placement ring-intra")
      done
      configs+=("ring")
    fi
    for cfg in "${configs[@]}"; do
      echo "-- $(date -u +%T) $nr k=$k: $cfg" >&2
      load0=$(cut -d' ' -f1-3 /proc/loadavg)
      cmd="scripts/emulate-cluster --priority --nodes $n --ranks-per-node $r --rate $rate --cards-per-node $k -- attn --strategy $cfg --seq $seq --heads $heads --head-dim $head_dim --causal --iters $iters --json --cluster $cl"
      # shellcheck disable=SC2086
      if ! $emu --nodes "$n" --ranks-per-node "$r" --rate "$rate" --cards-per-node "$k" \
        --counters "$tmp/cards.json" -- attn --strategy $cfg --seq "$seq" --heads "$heads" \
        --head-dim "$head_dim" --causal --iters "$iters" --json --cluster "$cl" \
        >"$tmp/run.out" 2>"$tmp/run.err"; then
        echo "rails.sh: $nr k=$k $cfg failed: $(tail -3 "$tmp/run.err")" >&2
        continue
      fi
      echo '{}' >"$tmp/check.json"
      if [[ -n "$check" ]]; then
        # shellcheck disable=SC2086
        $emu --nodes "$n" --ranks-per-node "$r" --rate "$rate" --cards-per-node "$k" -- attn \
          --strategy $cfg --seq "$seq" --heads "$heads" --head-dim "$head_dim" --causal \
          --iters 1 --check --json 2>/dev/null | tail -1 >"$tmp/check.json" || true
      fi
      load1=$(cut -d' ' -f1-3 /proc/loadavg)
      python3 - "$(tail -1 "$tmp/run.out")" "$tmp/cards.json" "$tmp/check.json" "$nr" "$k" "$cfg" \
        "$cmd" "$commit" "$load0" "$load1" >>"$out" <<'PY'
import json, sys
sys.path.insert(0, "bench")
import record
run = json.loads(sys.argv[1])
cards = json.load(open(sys.argv[2]))
chk = json.loads(open(sys.argv[3]).read() or "{}")
it = run["iters"]
run.update({"cluster": sys.argv[4], "cards_per_node": int(sys.argv[5]), "config": sys.argv[6],
            "rate": cards["rate"], "command": sys.argv[7], "commit": sys.argv[8],
            "load_before": sys.argv[9], "load_after": sys.argv[10], "counters": cards,
            # Bytes per iteration each card sent and received (the job's total over the iterations:
            # start-up and barriers included).
            "measured_card_bytes": {"sent": [[b / it for b in node] for node in cards["card_sent_bytes"]],
                                    "received": [[b / it for b in node] for node in cards["card_received_bytes"]]}})
run.update(record.cpu())  # the CPU's model, cores and instruction-set flags
run.update(record.settings())  # the code-path settings in force, when any are set
if chk:
    run["check"] = chk.get("check")
    run["check_max_err"] = chk.get("max_err")
print(json.dumps(run))
PY
      tail -1 "$out" | python3 -c '
import json, sys
r = json.loads(sys.stdin.read())
t = r["time_ms"]["fwd"] + r["time_ms"]["bwd"]; p = r["predicted_ms"]["fwd"] + r["predicted_ms"]["bwd"]
c = r.get("check", "-")
print(f"   measured {t:.0f} ms, predicted {p:.0f} ms, check {c}")' >&2 || true
    done
  done
done
