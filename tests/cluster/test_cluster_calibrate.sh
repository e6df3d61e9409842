#!/usr/bin/env bash
# tune --calibrate on 2 emulated nodes of 2 ranks with 100 Mbit/s cards: the cluster file has 2
# nodes of 2 devices sharing one card, the card's rate within 20% of the shaped 12.5 MB/s, and
# inside a node at least 10x that; plan reads the file back.
set -u
wf=$1
src=$2
fail=0
err() { echo "FAIL: $*"; fail=1; }
if [[ $(id -u) -ne 0 ]]; then
  echo "SKIP: the emulated cluster needs root"
  exit 77
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export WALLFACER=$wf
before=$(ip netns list | awk '{print $1}' | grep -c '^wfc' || true)
out=$("$src/scripts/emulate-cluster" --nodes 2 --ranks-per-node 2 --rate 100mbit -- \
  tune --calibrate --out "$tmp/cluster.toml" 2>&1) || err "calibration exited $?: $out"
echo "$out" | grep -E "node|card|bandwidth"
python3 - "$tmp/cluster.toml" <<'PY' || err "calibrated file: $(cat "$tmp/cluster.toml")"
import sys, tomllib
c = tomllib.load(open(sys.argv[1], "rb"))
card = 100e6 / 8
inter = c["links"]["inter"]["bandwidth"]
intra = c["links"]["intra"]["bandwidth"]
print(f"card {inter / 1e6:.2f} MB/s (shaped {card / 1e6:.2f}), inside a node {intra / 1e9:.3f} GB/s "
      f"= {intra / inter:.0f}x")
assert c["nodes"]["count"] == 2 and c["nodes"]["devices_per_node"] == 2, c["nodes"]
assert c["links"]["inter"]["devices_per_nic"] == 2, c["links"]["inter"]
assert abs(inter / card - 1) <= 0.20, f"card rate {inter} not within 20% of {card}"
assert intra >= 10 * inter, f"inside a node {intra} is not 10x the card's {inter}"
PY
"$wf" plan --cluster "$tmp/cluster.toml" --model "$src/tests/plan/tiny-causal.toml" --seq 4096 \
  --gpus 4 >/dev/null || err "plan cannot read the calibrated two-node file"
after=$(ip netns list | awk '{print $1}' | grep -c '^wfc' || true)
[[ $after -le $before ]] || err "namespaces left behind: $(ip netns list)"
[[ $fail -eq 0 ]] && echo "cluster_calibrate: all checks passed"
exit $fail
