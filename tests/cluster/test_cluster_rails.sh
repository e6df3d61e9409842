#!/usr/bin/env bash
# Cards per node (scripts/emulate-cluster --cards-per-node): on 2 nodes x 2 ranks at 50 Mbit/s,
# ranks 0 and 1 of node 0 each stream to their peer on node 1 (ranks 2 and 3), one alone and then
# both at once (tests/cluster/cluster_stream). With 2 cards per node, both at once get more than
# 1.5x one alone and each card of node 0 sends about half of what the node sends (0.4-0.6), each
# card of node 1 receives about half; a stream across rails (rank 0 on card 0 to rank 3 on card 1)
# leaves by the sender's card and enters by the receiver's. With 1 card, both at once get less
# than 1.3x one alone (they share it). Bad input: one line, exit 2; nothing left behind.
set -u
source "$(dirname "$0")/common.sh"
stream=$3
bytes=12000000
run() {  # run K PAIRS...: one streaming job on 2 x 2 ranks with K cards; its JSON line, counters in $tmp/cards.json
  local k=$1
  shift
  emu --nodes 2 --ranks-per-node 2 --rate 50mbit --cards-per-node "$k" --counters "$tmp/cards.json" \
    -- "$stream" "$bytes" "$@" | tail -1
}
check() {  # check NAME PYTHON-ASSERTIONS: evaluated on the streams' JSON ($1 runs) and the counters
  python3 - "$@" <<'PY'
import json, sys
name, code = sys.argv[1], sys.argv[2]
alone, both, cards = json.loads(sys.argv[3]), json.loads(sys.argv[4]), json.load(open(sys.argv[5]))
sent, recv = cards["card_sent_bytes"], cards["card_received_bytes"]
ratio = both["total_mb_per_s"] / alone["total_mb_per_s"]
print(f"{name}: one alone {alone['total_mb_per_s']:.2f} MB/s, both at once "
      f"{both['mb_per_s']} = {both['total_mb_per_s']:.2f} MB/s ({ratio:.2f}x); "
      f"node 0 cards sent {sent[0]}, node 1 cards received {recv[1]}")
exec(code)
PY
}

# Two cards: rank 0 on eth0, rank 1 on eth1 of node 0; ranks 2 and 3 likewise on node 1.
alone=$(run 2 0:2) || err "K=2, one stream exited $?"
cp "$tmp/cards.json" "$tmp/alone.json"
both=$(run 2 0:2 1:3) || err "K=2, two streams exited $?"
check "2 cards" '
assert ratio > 1.5, f"two ranks on two cards should get about 2x one alone, got {ratio:.2f}x"
for node, cs in ((0, sent[0]), (1, recv[1])):
    for c in cs:
        share = c / sum(cs)
        assert 0.4 <= share <= 0.6, f"node {node}: a card carried {share:.2f} of the bytes, not about half: {cs}"
    assert sum(cs) >= 2 * alone["bytes"], f"node {node}: cards carried {sum(cs)} < 2 x {alone['bytes']}"
one = json.load(open(sys.argv[5].replace("cards.json", "alone.json")))
s0, r1 = one["card_sent_bytes"][0], one["card_received_bytes"][1]
assert s0[0] >= alone["bytes"] and s0[1] < 0.05 * alone["bytes"], f"one stream from card 0 went out by {s0}"
assert r1[0] >= alone["bytes"] and r1[1] < 0.05 * alone["bytes"], f"one stream to card 0 came in by {r1}"
' "$alone" "$both" "$tmp/cards.json" || err "2 cards per node: ranks not pinned to their cards"

# Across rails: rank 0 (node 0, card 0) to rank 3 (node 1, card 1), alone.
cross=$(run 2 0:3) || err "K=2, cross-rail stream exited $?"
check "cross-rail" '
assert sent[0][0] >= both["bytes"] and sent[0][1] < 0.05 * both["bytes"], f"left node 0 by {sent[0]}"
assert recv[1][1] >= both["bytes"] and recv[1][0] < 0.05 * both["bytes"], f"entered node 1 by {recv[1]}"
' "$cross" "$cross" "$tmp/cards.json" || err "cross-rail traffic does not leave by the sender's card and enter by the receiver's"

# One card: both ranks share it.
alone=$(run 1 0:2) || err "K=1, one stream exited $?"
both=$(run 1 0:2 1:3) || err "K=1, two streams exited $?"
check "1 card" '
assert ratio < 1.3, f"two ranks on one card should share it, got {ratio:.2f}x one alone"
assert len(sent[0]) == 1 and sent[0][0] >= 2 * both["bytes"], sent
' "$alone" "$both" "$tmp/cards.json" || err "1 card per node: the ranks do not share the card"

# Bad input: one line, exit 2.
out=$(emu --nodes 2 --ranks-per-node 2 --rate 50mbit --cards-per-node 3 -- true 2>&1)
rc=$?
[[ $rc -eq 2 && $(echo "$out" | wc -l) -eq 1 ]] ||
  err "--cards-per-node 3 on 2 ranks per node: want exit 2 and one line, got $rc: $out"
check_namespaces_gone
[[ $fail -eq 0 ]] && echo "cluster_rails: all checks passed"
exit $fail
