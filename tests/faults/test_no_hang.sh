#!/usr/bin/env bash
# One rank fails or stops, the others wait for it in a collective: the job must end with the
# failing rank's message and the right exit code (2 bad input, 1 otherwise). Usage errors every rank
# sees are printed once. Prints how long each case took from launch (or from the fault) to exit.
set -u
source "$(dirname "$0")/../gpt/common.sh"
mpiq() { local np=$1; shift; "$mpirun_bin" -q --oversubscribe --bind-to none -np "$np" "$wf" "$@"; }
now() { date +%s.%N; }
t=(train --config "$work/tiny.toml" --progress none)

expect() { local what=$1 rc=$2; shift 2; expect_error "$rc" "$what" "$@"; }

touch "$work/afile"
# Only rank 0 creates --out: the others would wait for it at the next collective.
expect "train --out unwritable" 2 "rank 0: cannot create the folder .*give --out a writable" \
  mpiq 2 "${t[@]}" --set parallel.sp=2 --out "$work/afile/out"
# Only rank 0 writes --dump.
expect "attn --dump unwritable" 2 "rank 0: .*give --dump a writable" \
  mpiq 4 attn --strategy ring --seq 64 --heads 2 --head-dim 8 --check --dump "$work/afile/dump"
# Rank 1 alone cannot read its data (agreed on before the first step).
expect "one rank's data missing" 2 "rank 1: cannot open token shard" \
  "$mpirun_bin" -q --oversubscribe --bind-to none \
  -np 1 "$wf" "${t[@]}" --set parallel.sp=2 --out "$work/o1" : \
  -np 1 "$wf" "${t[@]}" --set parallel.sp=2 --out "$work/o1" --set data.dir="$work/none"
# Rank 1 alone fails before MPI's first collective while rank 0 goes on into it.
expect "one rank's bad override" 2 "rank 1: train.timeout expects a number" \
  "$mpirun_bin" -q --oversubscribe --bind-to none \
  -np 1 "$wf" "${t[@]}" --set parallel.sp=2 --out "$work/o2" : \
  -np 1 "$wf" "${t[@]}" --set parallel.sp=2 --out "$work/o2" --set train.timeout=abc

# Ranks started with different configs stop before the first collective that depends on it.
expect "ranks with different configs" 2 \
  "rank 1: ranks were started with different configs: this rank differs from rank 0 in model.dim (64 here, 32 on rank 0)" \
  "$mpirun_bin" -q --oversubscribe --bind-to none \
  -np 1 "$wf" "${t[@]}" --set parallel.sp=2 --out "$work/o5" : \
  -np 1 "$wf" "${t[@]}" --set parallel.sp=2 --out "$work/o5" --set model.dim=64

# A usage error every rank sees: printed exactly once, every time (rank 0 must not be killed
# before it prints).
for i in 1 2 3 4 5 6; do
  expect "bad seq on 4 ranks ($i)" 2 "train.seq = 63 must be divisible" \
    mpiq 4 "${t[@]}" --set parallel.sp=4 --set train.seq=63 --out "$work/o3"
done
expect "unknown flag on 4 ranks" 2 "not expected: --chek" mpiq 4 attn --chek
expect "attn bad teams on 4 ranks" 2 "C^2" \
  mpiq 4 attn --strategy wallfacer --teams 4 --seq 256 --heads 4 --head-dim 8

# The watchdog: rank 1 is stopped (SIGSTOP) mid-run; rank 0's wait for it ends the job after
# --timeout seconds, naming the operation, the peer and the step.
rm -rf "$work/o4"
mpiq 2 "${t[@]}" --set parallel.sp=2 --set train.steps=1000000 --out "$work/o4" --timeout 3 \
  >"$work/stall.log" 2>&1 &
job=$!
for _ in $(seq 1 300); do [ -s "$work/o4/metrics.jsonl" ] && break; sleep 0.1; done
victim=""
for p in $(pgrep -f "$wf train"); do
  grep -qz '^OMPI_COMM_WORLD_RANK=1$' "/proc/$p/environ" 2>/dev/null && victim=$p
done
if [ -z "$victim" ]; then
  err "watchdog: rank 1 not found"
  kill "$job"
else
  t0=$(now)
  kill -STOP "$victim"
  wait "$job"; rc=$?
  echo "watchdog: exit $rc $(echo "$(now) - $t0" | bc) s after rank 1 stopped (--timeout 3)"
  kill -CONT "$victim" 2>/dev/null
  [ "$rc" -eq 1 ] || err "watchdog: exit $rc, expected 1: $(cat "$work/stall.log")"
  # Rank 0 waits either for rank 1's message or in a collective of ranks 0 and 1.
  grep -qE "rank 0: MPI_.* (with rank 1|among ranks 0..1) made no progress for 3 s during step [0-9]+: (rank 1|one of them) is stuck" \
    "$work/stall.log" || err "watchdog: message: $(cat "$work/stall.log")"
fi

[ $fail -eq 0 ] && echo "ok: no fault hangs the job"
exit $fail
