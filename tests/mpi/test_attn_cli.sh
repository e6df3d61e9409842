#!/usr/bin/env bash
# wallfacer attn under mpirun: --check --json passes and prints every documented key; bad input
# exits 2 with one line from the program (mpirun -q keeps mpirun's own notes out); a singleton run
# (no mpirun) works.
set -u
wf=$1
mpirun=$2
fail=0
err() { echo "FAIL: $*"; fail=1; }
run() { OMP_NUM_THREADS=1 "$mpirun" -q --oversubscribe --bind-to none -np "$@"; }

out=$(run 4 "$wf" attn --strategy wallfacer --teams 2 --seq 256 --heads 4 --kv-heads 1 --head-dim 8 \
  --causal --check --json --iters 2 2>&1); rc=$?
[ $rc -eq 0 ] || err "wallfacer --check exited $rc: $out"
[ "$(echo "$out" | wc -l)" -eq 1 ] || err "--json printed more than one line: $out"
for key in '"strategy":"wallfacer"' '"P":4' '"C":2' '"seq":256' '"heads":4' '"kv_heads":1' \
  '"head_dim":8' '"causal":true' '"max_err":{' '"out":' '"lse":' '"dq":' '"dk":' '"dv":' \
  '"bytes":{' '"p2p_fwd":' '"p2p_bwd":' '"coll_fwd":' '"coll_bwd":' '"coll_fwd_formula":' '"coll_bwd_formula":' '"steps":{' '"time_ms":{' \
  '"fwd":' '"bwd":' '"exposed_comm_ms":{' '"iteration_ms":' '"work_imbalance":' '"check":"pass"'; do
  echo "$out" | grep -qF "$key" || err "json lacks $key: $out"
done

# iteration_ms: the slowest rank's forward + backward. With one iteration no rank's sum exceeds the
# slowest forward plus the slowest backward, and the slowest rank's sum is at least either alone.
out=$(run 4 "$wf" attn --strategy ring --seq 512 --heads 2 --head-dim 8 --causal --json --iters 1 2>&1)
echo "$out" | python3 -c '
import json, sys
j = json.loads(sys.stdin.read().strip().splitlines()[-1])
f, b, it = j["time_ms"]["fwd"], j["time_ms"]["bwd"], j["iteration_ms"]
assert 0 < it <= f + b + 1e-6 and it >= max(f, b) - 1e-6, (f, b, it)
' || err "iteration_ms not between the slowest phase and the sum of both: $out"

# --dtype bf16: passes its check, says so in the JSON and sends half of fp32's forward bytes.
p2p_fwd() { echo "$1" | grep -o '"p2p_fwd":[0-9]*' | head -1 | cut -d: -f2; }
args=(attn --strategy wallfacer --teams 2 --seq 256 --heads 4 --head-dim 8 --check --json)
out16=$(run 4 "$wf" "${args[@]}" --dtype bf16 2>&1); rc=$?
[ $rc -eq 0 ] || err "--dtype bf16 --check exited $rc: $out16"
for key in '"dtype":"bf16"' '"check":"pass"'; do
  echo "$out16" | grep -qF "$key" || err "bf16 json lacks $key: $out16"
done
out32=$(run 4 "$wf" "${args[@]}" 2>&1)
echo "$out32" | grep -qF '"dtype":"fp32"' || err "fp32 json lacks \"dtype\":\"fp32\": $out32"
b16=$(p2p_fwd "$out16"); b32=$(p2p_fwd "$out32")
[ -n "$b16" ] && [ -n "$b32" ] && [ $((2 * b16)) -eq "$b32" ] && [ "$b32" -gt 0 ] ||
  err "bf16 forward p2p bytes $b16 are not half of fp32's $b32"
out=$(run 1 "$wf" attn --strategy ring --seq 64 --heads 2 --head-dim 8 --dtype fp16 2>&1); rc=$?
[ $rc -eq 2 ] || err "--dtype fp16 exited $rc (want 2): $out"

for s in ring zigzag ulysses; do
  out=$(run 2 "$wf" attn --strategy $s --seq 128 --heads 4 --head-dim 8 --check 2>&1); rc=$?
  [ $rc -eq 0 ] || err "$s --check exited $rc: $out"
  echo "$out" | grep -q ": pass" || err "$s --check did not pass: $out"
done

# Ulysses x ring hybrids: 2 teams of 2 (ring and, causal, zigzag over the teams), GQA.
for s in ring zigzag; do
  out=$(run 4 "$wf" attn --strategy $s --ulysses 2 --seq 128 --heads 4 --kv-heads 2 --head-dim 8 \
    --causal --check 2>&1); rc=$?
  [ $rc -eq 0 ] || err "ulysses 2 x $s --check exited $rc: $out"
  echo "$out" | grep -q "attn ulysses2 x $s P=4" || err "ulysses 2 x $s: header: $out"
  echo "$out" | grep -q ": pass" || err "ulysses 2 x $s --check did not pass: $out"
done

bad() {  # np, expected message fragment, args...
  local np=$1 frag=$2; shift 2
  out=$(run "$np" "$wf" attn "$@" 2>&1); rc=$?
  [ $rc -eq 2 ] || err "attn $* on $np ranks exited $rc, expected 2: $out"
  [ "$(echo "$out" | wc -l)" -eq 1 ] || err "attn $* on $np ranks printed more than one line: $out"
  echo "$out" | grep -q -- "$frag" || err "attn $* on $np ranks: message lacks '$frag': $out"
}
bad 4 "C^2" --strategy wallfacer --teams 4 --seq 256 --heads 4 --head-dim 8
bad 3 "divisible" --strategy ulysses --seq 96 --heads 4 --head-dim 8
bad 4 "divisible" --strategy zigzag --seq 36 --heads 4 --head-dim 8
bad 3 "divisible" --strategy ring --seq 100 --heads 4 --head-dim 8
bad 2 "--kv-heads" --strategy ring --seq 64 --heads 4 --kv-heads 3 --head-dim 8
bad 1 "strategy" --strategy spiral --seq 64 --heads 4 --head-dim 8
bad 4 "must divide the 4 ranks" --strategy ring --ulysses 3 --seq 96 --heads 6 --head-dim 8
bad 4 "must divide --heads" --strategy ring --ulysses 2 --seq 64 --heads 3 --head-dim 8
bad 4 "ring, zigzag or wallfacer" --strategy ulysses --ulysses 2 --seq 64 --heads 4 --head-dim 8
bad 4 "C^2 = 4 to divide the 2 ranks of the ring over the Ulysses teams" --strategy wallfacer \
  --teams 2 --ulysses 2 --seq 64 --heads 4 --head-dim 8
bad 2 "sum to 500" --strategy ring --seq 512 --heads 2 --head-dim 8 --docs 100,400
bad 2 "positive" --strategy ring --seq 512 --heads 2 --head-dim 8 --docs 0,512
bad 2 "exceeds --seq" --strategy ring --seq 64 --heads 2 --head-dim 8 --docs-random 65
bad 2 "exclude" --strategy ring --seq 64 --heads 2 --head-dim 8 --docs 64 --docs-random 2
bad 4 "balanced layout" --strategy ring --seq 80 --heads 2 --head-dim 8 --layout balanced
bad 4 "dividing the 4 ranks" --strategy double-ring --inner 3 --seq 64 --heads 2 --head-dim 8
bad 4 "only to --strategy double-ring" --strategy ring --inner 2 --seq 64 --heads 2 --head-dim 8

# Double ring: --inner given, and by default the ranks per node (pretended nodes of 2 ranks), which
# the output names; both exact.
for inner in "--inner 2" ""; do
  out=$(WALLFACER_NODE_SIZE=2 run 4 -x WALLFACER_NODE_SIZE "$wf" attn --strategy double-ring $inner \
    --seq 256 --heads 4 --kv-heads 2 --head-dim 8 --causal --check --json 2>&1); rc=$?
  [ $rc -eq 0 ] || err "double-ring '$inner' exited $rc: $out"
  for key in '"strategy":"double-ring"' '"inner":2' '"check":"pass"'; do
    echo "$out" | grep -qF "$key" || err "double-ring '$inner' json lacks $key: $out"
  done
done

# Documents: a one-token document, boundaries on rank and tile borders, the balanced layout;
# --dump writes the lengths as docs.npy (int64).
dump=$(mktemp -d)
out=$(run 4 "$wf" attn --strategy wallfacer --teams 2 --seq 512 --heads 4 --head-dim 8 --causal \
  --docs 1,127,128,256 --layout balanced --check --json --dump "$dump" 2>&1); rc=$?
[ $rc -eq 0 ] || err "--docs --layout balanced --check exited $rc: $out"
for key in '"layout":"balanced"' '"count":4' '"longest":256' '"check":"pass"'; do
  echo "$out" | grep -qF "$key" || err "docs json lacks $key: $out"
done
[ -f "$dump/docs.npy" ] && grep -qaF "'descr': '<i8'" "$dump/docs.npy" &&
  [ "$(tail -c 32 "$dump/docs.npy" | od -An -tu8 | tr -s ' \n' ' ')" = " 1 127 128 256 " ] ||
  err "--dump docs.npy: not the int64 lengths 1 127 128 256"
rm -rf "$dump"
out=$(run 2 "$wf" attn --strategy zigzag --seq 256 --heads 2 --head-dim 8 --docs-random 7 --seed 3 \
  --check 2>&1); rc=$?
[ $rc -eq 0 ] || err "--docs-random --check exited $rc: $out"
echo "$out" | grep -q "docs=7" || err "--docs-random 7: header: $out"

# Documents in bf16, every kind of strategy: checked against one process.
for strat in "ring" "zigzag --causal" "ulysses" "wallfacer --teams 2 --causal" "ring --ulysses 2 --causal"; do
  # shellcheck disable=SC2086
  out=$(run 4 "$wf" attn --strategy $strat --seq 512 --heads 4 --head-dim 8 --dtype bf16 \
    --docs 1,127,128,256 --check --json 2>&1); rc=$?
  [ $rc -eq 0 ] || err "bf16 --docs ($strat) exited $rc: $out"
  echo "$out" | grep -qF '"check":"pass"' || err "bf16 --docs ($strat): $out"
done

# Documents each inside one rank's rows: no K,V block goes around the ring.
out=$("$wf" attn --count 4 --strategy ring --seq 512 --heads 2 --head-dim 8 --causal \
  --docs 128,128,128,128 --json 2>&1)
echo "$out" | grep -qF '"p2p_fwd":0' || err "--count documents inside ranks: $out"

# --count sums the schedules without running: ring on 8 ranks sends 7 hops of K,V forward
# (2 * 128 rows * 2 heads * 8 dims * 4 bytes each).
out=$("$wf" attn --count 8 --strategy ring --seq 1024 --heads 2 --head-dim 8 --json 2>&1)
echo "$out" | grep -qF '"p2p_fwd":114688' || err "--count: $out"
echo "$out" | grep -qF '"steps":{"p2p_bwd":8,"p2p_fwd":7}' || err "--count steps: $out"

# A hybrid of 2 teams of 2 on 1024 tokens, 2 heads of 8: the team all-to-alls move 1/2 of the
# rank's 256 rows of q (8), k, v (16), o (8) and lse (1) floats per row forward (33792 bytes);
# the ring of 2 sends one hop of the team's 512 rows of K,V of its 1 head (32768 bytes).
out=$("$wf" attn --count 4 --strategy ring --ulysses 2 --seq 1024 --heads 2 --head-dim 8 --json 2>&1)
echo "$out" | grep -qF '"coll_fwd":33792' || err "--count hybrid collective: $out"
echo "$out" | grep -qF '"p2p_fwd":32768' || err "--count hybrid p2p: $out"
echo "$out" | grep -qF '"ulysses":2' || err "--count hybrid: $out"
# Ulysses 2 x WallFacer-2 on 8 ranks, 1024 tokens, 2 heads of 8: the Ulysses all-to-alls move half
# of the rank's 128 rows of q, k, v, o, lse (66 floats per row: 16896 bytes), WallFacer's team
# gathers q and K,V and reduce-scatters O, LSE (33 floats per row) of the ring rank's 256 rows of
# 1 head (33792 bytes); the busiest rank places its team's 512 rows of K,V (32768 bytes).
out=$("$wf" attn --count 8 --strategy wallfacer --teams 2 --ulysses 2 --seq 1024 --heads 2 \
  --head-dim 8 --json 2>&1)
echo "$out" | grep -qF '"coll_fwd":50688' || err "--count ulysses x wallfacer collective: $out"
echo "$out" | grep -qF '"p2p_fwd":32768' || err "--count ulysses x wallfacer p2p: $out"
# The same hybrid run: its all-to-alls hand MPI the same 33792 bytes for the other rank of the team
# (the count), and the ring formula of an all-to-all is the same volume.
out=$(run 4 "$wf" attn --strategy ring --ulysses 2 --seq 1024 --heads 2 --head-dim 8 --iters 1 --json 2>&1)
echo "$out" | grep -qF '"coll_fwd":33792' || err "hybrid run: collective bytes handed to MPI: $out"
echo "$out" | grep -qF '"coll_fwd_formula":33792' || err "hybrid run: collective formula: $out"

# Sliding windows (--window): bf16 on every kind of strategy, checked against one process, with
# and without documents; the window in the JSON and in --dump's window.npy (int64).
for strat in "ring" "zigzag" "ulysses" "wallfacer --teams 2" "ring --ulysses 2"; do
  for docs in "" "--docs 1,127,128,256"; do
    # shellcheck disable=SC2086
    out=$(run 4 "$wf" attn --strategy $strat --seq 512 --heads 4 --head-dim 8 --causal \
      --window 100 --dtype bf16 $docs --check --json 2>&1); rc=$?
    [ $rc -eq 0 ] || err "bf16 --window ($strat $docs) exited $rc: $out"
    echo "$out" | grep -qF '"check":"pass"' || err "bf16 --window ($strat $docs): $out"
  done
done
dump=$(mktemp -d)
out=$(run 4 "$wf" attn --strategy ring --seq 512 --heads 2 --head-dim 8 --causal --window 64 \
  --check --json --dump "$dump" 2>&1); rc=$?
[ $rc -eq 0 ] || err "--window --dump exited $rc: $out"
echo "$out" | grep -qF '"window":{"kept":' || err "--window: json lacks window: $out"
echo "$out" | grep -qF '"size":64' || err "--window: json lacks the size: $out"
[ -f "$dump/window.npy" ] && grep -qaF "'descr': '<i8'" "$dump/window.npy" &&
  [ "$(tail -c 8 "$dump/window.npy" | od -An -tu8 | tr -d ' \n')" = "64" ] ||
  err "--dump window.npy: not the int64 window 64"
rm -rf "$dump"
# A window of the whole sequence or more is the causal mask: it says so and runs as --causal.
out=$(run 2 "$wf" attn --strategy ring --seq 256 --heads 2 --head-dim 8 --causal --window 256 \
  --check 2>&1); rc=$?
[ $rc -eq 0 ] || err "--window = --seq exited $rc: $out"
echo "$out" | grep -q "full causal mask" || err "--window = --seq: no note: $out"
echo "$out" | grep -q ": pass" || err "--window = --seq --check did not pass: $out"
out=$("$wf" attn --count 4 --strategy ring --seq 256 --heads 2 --head-dim 8 --causal --window 999 \
  --json 2>&1)
echo "$out" | grep -qF 'full causal mask' || err "--count --window 999: no note: $out"
bad 2 "needs --causal" --strategy ring --seq 64 --heads 2 --head-dim 8 --window 8
bad 2 ">= 0" --strategy ring --seq 64 --heads 2 --head-dim 8 --causal --window -3
# A contiguous ring with a window of at most a rank's rows sends one K,V hop (256 rows of 2 heads
# of 8 floats, k and v: 32768 bytes), where the causal mask alone sends 7.
out=$("$wf" attn --count 8 --strategy ring --seq 2048 --heads 2 --head-dim 8 --causal --window 256 \
  --json 2>&1)
echo "$out" | grep -qF '"p2p_fwd":32768' || err "--count ring --window 256: $out"
out=$("$wf" attn --count 8 --strategy ring --seq 2048 --heads 2 --head-dim 8 --causal --json 2>&1)
echo "$out" | grep -qF '"p2p_fwd":229376' || err "--count ring causal: $out"

# A singleton run, without mpirun.
out=$(OMP_NUM_THREADS=1 "$wf" attn --strategy zigzag --seq 64 --heads 2 --head-dim 8 --causal --check 2>&1)
rc=$?
[ $rc -eq 0 ] || err "singleton run exited $rc: $out"

[ $fail -eq 0 ] && echo "attn cli: all checks passed"
exit $fail
