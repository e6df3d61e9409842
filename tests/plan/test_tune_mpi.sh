#!/usr/bin/env bash
# wallfacer tune under mpirun: node topology (real and pretended), --calibrate writes a cluster file
# that plan reads, tuning prints predicted against measured and writes the winner's snippet, bad
# input exits 2 with one line.
set -u
wf=$1
mpirun=$2
src=$3
fail=0
err() { echo "FAIL: $*"; fail=1; }
run() { OMP_NUM_THREADS=1 "$mpirun" -q --oversubscribe --bind-to none -x WALLFACER_NODE_SIZE -np "$@"; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

unset WALLFACER_NODE_SIZE
export WALLFACER_NODE_SIZE=
out=$(run 4 "$wf" tune --topology 2>&1) || err "tune --topology exited $?: $out"
echo "$out" | grep -qF '"node_of":[0,0,0,0]' || err "one machine should be one node: $out"
export WALLFACER_NODE_SIZE=2
out=$(run 4 "$wf" tune --topology 2>&1) || err "tune --topology exited $?: $out"
echo "$out" | grep -qF '"node_of":[0,0,1,1]' || err "WALLFACER_NODE_SIZE=2 should pretend 2 nodes: $out"
echo "$out" | grep -qF '"pretended":true' || err "pretended topology not flagged: $out"
export WALLFACER_NODE_SIZE=

out=$(run 2 "$wf" tune --calibrate --out "$tmp/local.toml" 2>&1) || err "calibrate exited $?: $out"
for key in "sgemm" "flash attention" "ping-pong" "wrote"; do
  echo "$out" | grep -qF "$key" || err "calibration output lacks '$key': $out"
done
"$wf" plan --cluster "$tmp/local.toml" --model "$src/tests/plan/tiny.toml" --seq 1024 --gpus 2 \
  >/dev/null || err "plan cannot read the calibrated cluster file"

# Two pretended nodes: the links between nodes, the cards' streaming rate and the duplex share
# fitted to team collectives across the nodes (teams of 2 here) are measured and written.
export WALLFACER_NODE_SIZE=2
out=$(run 4 "$wf" tune --calibrate --out "$tmp/two-nodes.toml" 2>&1) || err "calibrate on 2 nodes exited $?: $out"
export WALLFACER_NODE_SIZE=
for key in "between nodes, ping-pong" "a card streams" "teams of 2 ranks on 2 nodes" "wrote"; do
  echo "$out" | grep -qF "$key" || err "calibration on 2 nodes lacks '$key': $out"
done
grep -q '^count = 2$' "$tmp/two-nodes.toml" || err "the cluster file should have 2 nodes: $(cat "$tmp/two-nodes.toml")"
"$wf" plan --cluster "$tmp/two-nodes.toml" --model "$src/tests/plan/tiny.toml" --seq 1024 --gpus 4 \
  >/dev/null || err "plan cannot read the cluster file calibrated on 2 nodes"

export WALLFACER_NODE_SIZE=2
out=$(run 4 "$wf" tune --cluster "$tmp/local.toml" --model "$src/tests/plan/tiny.toml" --seq 512 \
  --top 10 --iters 1 --json --out "$tmp/tuned.toml" 2>&1) || err "tune exited $?: $out"
export WALLFACER_NODE_SIZE=
python3 - "$out" <<'PY' || err "tune --json: $out"
import json, sys
j = json.loads(sys.argv[1])
assert j["P"] == 4 and j["nodes"] == 2, (j["P"], j["nodes"])
labels = [c["label"] for c in j["configs"]]
for want in ["ring", "ulysses", "wallfacer C=2 team-intra", "ulysses2 x ring team-intra",
             "ulysses2 x ring ring-intra"]:
    assert want in labels, labels
for c in j["configs"]:
    for k in ["predicted_ms", "measured_ms", "error", "tokens_per_s", "placement"]:
        assert k in c, k
    assert c["measured_ms"]["fwd"] > 0 and c["predicted_ms"]["bwd"] > 0
    # The error is against the iteration: the slowest rank's forward + backward.
    it = c["measured_iteration_ms"]
    assert 0 < it <= c["measured_ms"]["fwd"] + c["measured_ms"]["bwd"] + 1e-6, c
    pred = c["predicted_ms"]["fwd"] + c["predicted_ms"]["bwd"]
    assert abs(c["error"] - (pred / it - 1)) < 1e-9, c
assert j["winner"] in labels
PY
grep -q '^strategy = "' "$tmp/tuned.toml" || err "no snippet: $(cat "$tmp/tuned.toml")"
grep -q '^sp = 4' "$tmp/tuned.toml" || err "snippet lacks sp = 4"
grep -q '^ulysses = [12]$' "$tmp/tuned.toml" || err "snippet lacks ulysses = U"

# Training steps of a causal GPT per configuration: predicted and measured step times, the winner
# by the measured step.
mkdir -p "$tmp/scratch"
out=$(TMPDIR="$tmp/scratch" run 2 "$wf" tune --cluster "$tmp/local.toml" --model "$src/tests/plan/tiny-gpt.toml" --seq 512 \
  --top 2 --iters 1 --steps 2 --json --out "$tmp/tuned-gpt.toml" 2>&1) || err "tune --steps exited $?: $out"
python3 - "$out" <<'PY' || err "tune --steps --json: $out"
import json, sys
j = json.loads(sys.argv[1])
assert j["training_steps"] == 2, j["training_steps"]
assert len(j["configs"]) == 2
for c in j["configs"]:
    assert c["measured_step_ms"] > 0 and c["predicted_step_ms"] > 0, c
    assert abs(c["step_error"] - (c["predicted_step_ms"] / c["measured_step_ms"] - 1)) < 1e-9
best = min(j["configs"], key=lambda c: c["measured_step_ms"])
assert j["winner"] == best["label"], (j["winner"], best["label"])
PY
grep -q "training step" "$tmp/tuned-gpt.toml" || err "snippet does not say what was measured"
[ -z "$(ls -A "$tmp/scratch")" ] || err "tune --steps left its temporary files: $(ls "$tmp/scratch")"
out=$(run 2 "$wf" tune --model "$src/tests/plan/tiny-gpt.toml" --seq 512 --steps -1 2>&1); rc=$?
[ $rc -eq 2 ] || err "tune --steps -1 exited $rc, expected 2: $out"

out=$(run 2 "$wf" tune --seq 512 2>&1); rc=$?
[ $rc -eq 2 ] || err "tune without --model exited $rc, expected 2: $out"
[ "$(echo "$out" | wc -l)" -eq 1 ] || err "tune without --model: more than one line: $out"
out=$(run 1 "$wf" tune --calibrate 2>&1); rc=$?
[ $rc -eq 2 ] || err "calibrate on 1 rank exited $rc, expected 2: $out"

[ $fail -eq 0 ] && echo "tune mpi: ok"
exit $fail
