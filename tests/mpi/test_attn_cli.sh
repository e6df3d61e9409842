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
  '"bytes":{' '"p2p_fwd":' '"p2p_bwd":' '"coll_fwd":' '"coll_bwd":' '"steps":{' '"time_ms":{' \
  '"fwd":' '"bwd":' '"exposed_comm_ms":{' '"work_imbalance":' '"check":"pass"'; do
  echo "$out" | grep -qF "$key" || err "json lacks $key: $out"
done

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
bad 4 "ring or zigzag" --strategy ulysses --ulysses 2 --seq 64 --heads 4 --head-dim 8

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

# A singleton run, without mpirun.
out=$(OMP_NUM_THREADS=1 "$wf" attn --strategy zigzag --seq 64 --heads 2 --head-dim 8 --causal --check 2>&1)
rc=$?
[ $rc -eq 0 ] || err "singleton run exited $rc: $out"

[ $fail -eq 0 ] && echo "attn cli: all checks passed"
exit $fail
