#!/usr/bin/env bash
# tune --calibrate on 2 emulated nodes of 2 ranks with 100 Mbit/s cards: the cluster file has 2
# nodes of 2 devices sharing one card, the card's rate within 20% of the shaped 12.5 MB/s, and
# inside a node at least 10x that; plan reads the file back. With a card per rank
# (--cards-per-node 2) the file says one device per card. On 3 nodes whose pairs are capped
# (--flow-rate), the cap is found. The ranks run at the highest priority (--priority): the rates
# hold while the machine does other work.
set -u
source "$(dirname "$0")/common.sh"
out=$(emu --priority --nodes 2 --ranks-per-node 2 --rate 100mbit -- \
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
# The same 2 nodes of 2 ranks with a card per rank (--cards-per-node 2): one rank alone gets one
# card's rate and both at once twice it, so each card serves one device (devices_per_nic = 1).
out=$(emu --priority --nodes 2 --ranks-per-node 2 --rate 100mbit --cards-per-node 2 -- \
  tune --calibrate --out "$tmp/rails.toml" 2>&1) || err "calibration with 2 cards exited $?: $out"
echo "$out" | grep -E "card"
python3 - "$tmp/rails.toml" <<'PY' || err "calibrated file with 2 cards: $(cat "$tmp/rails.toml")"
import sys, tomllib
c = tomllib.load(open(sys.argv[1], "rb"))
inter = c["links"]["inter"]
print(f"2 cards per node: card {inter['bandwidth'] / 1e6:.2f} MB/s, devices_per_nic {inter['devices_per_nic']}")
assert c["nodes"]["devices_per_node"] == 2, c["nodes"]
assert inter["devices_per_nic"] == 1, inter
assert abs(inter["bandwidth"] / (100e6 / 8) - 1) <= 0.20, inter
PY
# 3 nodes of 1 rank, 100 Mbit/s cards, 40 Mbit/s between any two nodes: the cap on a pair of
# nodes within 20% of 5 MB/s, the card above it.
out=$(emu --priority --nodes 3 --ranks-per-node 1 --rate 100mbit --flow-rate 40mbit \
  -- tune --calibrate --out "$tmp/capped.toml" 2>&1) || err "capped calibration exited $?: $out"
echo "$out" | grep -E "pairs of nodes"
python3 - "$tmp/capped.toml" <<'PY' || err "capped file: $(cat "$tmp/capped.toml")"
import sys, tomllib
inter = tomllib.load(open(sys.argv[1], "rb"))["links"]["inter"]
pair = 40e6 / 8
print(f"pair cap {inter.get('pair_bandwidth', 0) / 1e6:.2f} MB/s (shaped {pair / 1e6:.2f}), "
      f"card {inter['bandwidth'] / 1e6:.2f} MB/s")
assert abs(inter.get("pair_bandwidth", 0) / pair - 1) <= 0.20, inter
assert inter["bandwidth"] > 1.3 * inter["pair_bandwidth"], inter
PY
"$wf" plan --cluster "$tmp/cluster.toml" --model "$src/tests/plan/tiny-causal.toml" --seq 4096 \
  --gpus 4 >/dev/null || err "plan cannot read the calibrated two-node file"
check_namespaces_gone
[[ $fail -eq 0 ]] && echo "cluster_calibrate: all checks passed"
exit $fail
