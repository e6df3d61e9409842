#!/usr/bin/env bash
# scripts/wallfacer-elastic without a cluster (the emulated one: tests/cluster/test_cluster_elastic.sh):
# `train --check-ranks P` gives the verdict that train itself gives on P ranks (run for real: refused
# with exit 2 and the same message, or trained); the launcher picks the largest world the config
# allows on its hosts, and when the configured layout fits none, the nearest valid one, named in
# one line; bad launcher input: one line, exit 2.
set -u
source "$(dirname "$0")/../gpt/common.sh"
src=$4
elastic=$src/scripts/wallfacer-elastic
export WALLFACER=$wf
t=(train --config "$work/tiny.toml" --progress none --set train.eval_every=0 --set train.ckpt_every=0)

# 1. --check-ranks against train on 1..4 ranks: sp 4 with WallFacer's 2 teams and a batch of 2; ring
# sp 2 with a batch of 3.
for layout in "parallel.sp=4 parallel.strategy=wallfacer parallel.teams=2 train.batch=2" \
              "parallel.sp=2 train.batch=3"; do
  sets=()
  for s in $layout; do sets+=(--set "$s"); done
  for p in 1 2 3 4; do
    v=$("$wf" "${t[@]}" "${sets[@]}" --out "$work/chk" --check-ranks $p) || err "--check-ranks $p exited $?"
    out=$(mpi $p "${t[@]}" "${sets[@]}" --steps 1 --out "$work/chk-$p" --overwrite 2>&1)
    rc=$?
    got=$(python3 -c 'import json,sys; v=json.loads(sys.argv[1]); print("valid" if v["valid"] else v["error"])' "$v")
    if [ $rc -eq 0 ]; then real=valid; else real=$(echo "$out" | grep -o "error: .*" | head -1 | sed 's/^error: //'); fi
    echo "$layout on $p: check-ranks '$got', train exit $rc"
    [ "$got" == "$real" ] || err "$layout on $p ranks: --check-ranks says '$got', train says '$real' (exit $rc)"
  done
done

# 2. The first launch on a hostfile of 3 slots (mpirun on this machine).
echo "localhost slots=3" >"$work/hosts"
run_elastic() {  # run_elastic NAME SETS...: the launcher trains 4 steps into $work/NAME
  local name=$1 sets=()
  shift
  for s in "$@"; do sets+=(--set "$s"); done
  OMPI_MCA_rmaps_base_oversubscribe=1 "$elastic" --hostfile "$work/hosts" -- "${t[@]}" --steps 4 \
    "${sets[@]}" --out "$work/$name" >"$work/$name.log" 2>&1
}
# sp 1 (dp x 1), batch 2: the largest world is 2 ranks, the configured layout.
run_elastic e1 train.batch=2 || err "e1 exited $?: $(cat "$work/e1.log")"
grep -q "dp 2 x sp 1" "$work/e1.log" || err "e1 did not train on 2 ranks (dp 2 x sp 1): $(cat "$work/e1.log")"
grep -q "nearest valid" "$work/e1.log" && err "e1: the configured layout fits but was changed"
# sp 4 with WallFacer's 2 teams fits no world of at most 3 ranks: the nearest valid layout is
# sp 2 (teams 1: C^2 must divide sp) on 2 ranks (seq 64 is not a multiple of 3), named in one line.
run_elastic e2 parallel.sp=4 parallel.strategy=wallfacer parallel.teams=2 ||
  err "e2 exited $?: $(cat "$work/e2.log")"
note=$(grep "nearest valid" "$work/e2.log")
echo "e2: $note"
[ "$(echo "$note" | grep -c .)" -eq 1 ] || err "e2: want one line naming the nearest layout: $(cat "$work/e2.log")"
echo "$note" | grep -q -- "--set parallel.sp=2 --set parallel.teams=1 on 2 ranks" ||
  err "e2: not the nearest layout: $note"
grep -q "dp 1 x sp 2, wallfacer C=1" "$work/e2.log" || err "e2 did not train dp 1 x sp 2: $(cat "$work/e2.log")"
[ "$(wc -l <"$work/e2/metrics.jsonl")" -eq 4 ] || err "e2: not 4 steps"
[ ! -e "$work/e2/restarts.jsonl" ] || err "e2: a restart was logged without a fault"
# Bad input to the job (exit 2) is passed on, not restarted.
run_elastic e3 train.lr=-1
rc=$?
[ $rc -eq 2 ] && ! grep -q "restart" "$work/e3.log" || err "e3: bad input: exit $rc, expected 2, no restart: $(cat "$work/e3.log")"

# 3. Bad launcher input: one line, exit 2.
bad() {  # bad WHAT PATTERN ARGS...
  local what=$1 pat=$2
  shift 2
  expect_error 2 "$what" "$pat" "$elastic" "$@"
}
bad "no hostfile" "--hostfile FILE is required" -- "${t[@]}"
bad "missing hostfile" "is not a readable file" --hostfile "$work/none" -- "${t[@]}"
echo "localhost slots=x" >"$work/badhosts"
bad "bad slots" "line 1: 'slots=x' is not slots=N" --hostfile "$work/badhosts" -- "${t[@]}"
bad "min nodes" "--min-nodes 'two' must be a whole number" --hostfile "$work/hosts" --min-nodes two -- "${t[@]}"
bad "probe timeout" "--probe-timeout 'nan' must be a positive" --hostfile "$work/hosts" --probe-timeout nan -- "${t[@]}"
bad "not train" "must be 'train" --hostfile "$work/hosts" -- attn --seq 64
bad "no command" "no command" --hostfile "$work/hosts"
bad "unknown option" "unknown option '--nodes'" --nodes 3 --hostfile "$work/hosts" -- "${t[@]}"
bad "bad config" "unknown config key 'x.y'" --hostfile "$work/hosts" -- "${t[@]}" --set x.y=1

[ $fail -eq 0 ] && echo "ok: the elastic launcher's layouts and input"
exit $fail
