#!/usr/bin/env bash
# Every strategy on emulated two-tier clusters (scripts/emulate-cluster), measured and predicted.
#
#   bench/two-tier.sh [--clusters "2x4 4x2 2x2"] [--rate 50mbit] [--seq 8192] [--heads 4]
#                     [--head-dim 64] [--iters 2] [--full] [--out DIR]
#
# For each cluster NxR (N nodes of R ranks): `tune --calibrate` on it writes DIR/cluster-NxR.toml;
# then ring, zigzag, Ulysses (where the heads allow), the Ulysses x zigzag hybrids and WallFacer-C
# for every C with C^2 | P, hybrids and WallFacer in both placements, each run as
# `attn --iters K --json --cluster DIR/cluster-NxR.toml` (causal unless --full). Each row: forward
# and backward time (median of K), exposed communication, the bytes the nodes' cards carried (read
# from the veths, per iteration) beside the schedule's count of inter-node bytes, and the
# planner's prediction. Writes DIR/results.jsonl (one JSON object per run) and DIR/table.md.
# Needs root (network namespaces).
set -euo pipefail
cd "$(dirname "$0")/.."
clusters="2x4 4x2 2x2" rate=50mbit seq=8192 heads=4 head_dim=64 iters=2 mask=--causal
out=runs/two-tier
while [[ $# -gt 0 ]]; do
  case "$1" in
    --clusters) clusters=$2; shift 2 ;;
    --rate) rate=$2; shift 2 ;;
    --seq) seq=$2; shift 2 ;;
    --heads) heads=$2; shift 2 ;;
    --head-dim) head_dim=$2; shift 2 ;;
    --iters) iters=$2; shift 2 ;;
    --full) mask=""; shift ;;
    --out) out=$2; shift 2 ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "two-tier.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
done
[[ $(id -u) -eq 0 ]] || { echo "two-tier.sh: needs root for the emulated cluster" >&2; exit 2; }
make -s build >/dev/null
mkdir -p "$out"
: >"$out/results.jsonl"
emu=scripts/emulate-cluster
ring=ring
[[ -n "$mask" ]] && ring=zigzag

for nr in $clusters; do
  n=${nr%x*} r=${nr#*x} p=$((${nr%x*} * ${nr#*x}))
  cl=$out/cluster-$nr.toml
  echo "== $n nodes x $r ranks, cards $rate: calibrating" >&2
  $emu --nodes "$n" --ranks-per-node "$r" --rate "$rate" -- tune --calibrate --out "$cl" |
    grep -E "between nodes|inside a node|card of" >&2
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
      configs+=("wallfacer --teams $c --placement team-intra" "wallfacer --teams $c --placement ring-intra")
    fi
  done
  for cfg in "${configs[@]}"; do
    echo "-- $nr: $cfg" >&2
    # shellcheck disable=SC2086
    json=$($emu --nodes "$n" --ranks-per-node "$r" --rate "$rate" --counters "$out/cards.json" -- \
      attn --strategy $cfg --seq "$seq" --heads "$heads" --head-dim "$head_dim" $mask \
      --iters "$iters" --json --cluster "$cl" 2>/dev/null | tail -1)
    python3 - "$json" "$out/cards.json" "$nr" "$cfg" >>"$out/results.jsonl" <<'PY'
import json, sys
run = json.loads(sys.argv[1])
cards = json.load(open(sys.argv[2]))
run["cluster"] = sys.argv[3]
run["config"] = sys.argv[4]
run["rate"] = cards["rate"]
run["cards"] = cards
# Bytes per iteration: the job's total over the iterations (start-up and barriers included).
run["card_bytes_per_iter"] = sum(cards["sent_bytes"]) / run["iters"]
print(json.dumps(run))
PY
  done
done
rm -f "$out/cards.json"

python3 - "$out/results.jsonl" >"$out/table.md" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
def label(r):
    s = r["strategy"]
    if r["ulysses"] > 1:
        s = f"ulysses{r['ulysses']} x {s} {r['placement']}"
    elif s == "wallfacer":
        s = f"wallfacer C={r['C']} {r['placement']}"
    return s
clusters = []
for r in rows:
    if r["cluster"] not in clusters:
        clusters.append(r["cluster"])
for c in clusters:
    rs = [r for r in rows if r["cluster"] == c]
    n, k = c.split("x")
    base = next((r for r in rs if r["strategy"] == "zigzag" and r["ulysses"] == 1), rs[0])
    btot = base["time_ms"]["fwd"] + base["time_ms"]["bwd"]
    print(f"\n**{n} nodes x {k} ranks** (P = {rs[0]['P']}, cards {rs[0]['rate']}; "
          f"seq {rs[0]['seq']}, {rs[0]['heads']} heads of {rs[0]['head_dim']}"
          f"{', causal' if rs[0]['causal'] else ''}):\n")
    print("| configuration | fwd ms | bwd ms | exposed fwd / bwd ms | vs " + base["strategy"] +
          " | MB across nodes: cards / schedule | predicted ms | measured ms | error |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rs:
        t = r["time_ms"]["fwd"] + r["time_ms"]["bwd"]
        p = r["predicted_ms"]["fwd"] + r["predicted_ms"]["bwd"]
        sched = r["inter_node_bytes"]["fwd"] + r["inter_node_bytes"]["bwd"]
        print(f"| {label(r)} | {r['time_ms']['fwd']:.0f} | {r['time_ms']['bwd']:.0f} | "
              f"{r['exposed_comm_ms']['fwd']:.0f} / {r['exposed_comm_ms']['bwd']:.0f} | "
              f"{btot / t:.2f}x | {r['card_bytes_per_iter'] / 1e6:.2f} / {sched / 1e6:.2f} | "
              f"{p:.0f} | {t:.0f} | {100 * (p / t - 1):+.0f}% |")
PY
cat "$out/table.md"
