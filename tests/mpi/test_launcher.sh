#!/usr/bin/env bash
# tests/mpirun.sh relaunches a job only when no rank reached the program: a stand-in mpirun that
# fails before starting anything is run twice (with one line saying so), one that started a rank
# and then failed, or that was stopped by a signal, once; with the real mpirun, ranks that fail
# after starting (on several ranks, on one rank without MPI) are not relaunched, a program that
# cannot be launched is, and a marker folder that cannot be written is an error.
# Usage: test_launcher.sh WALLFACER MPIRUN-SCRIPT REAL-MPIRUN
set -u
wf=$1
launch=$2
real_mpirun=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail=0
err() { echo "FAIL: $*"; fail=1; }
retry_line="launching it once more"

# A stand-in mpirun: counts its launches in $work/launches, then acts as $FAKE says.
cat >"$work/fake-mpirun" <<'SH'
#!/usr/bin/env bash
n=$(($(cat "$LAUNCHES" 2>/dev/null || echo 0) + 1))
echo "$n" >"$LAUNCHES"
[ "$1" == "-x" ] && [ "$2" == "WALLFACER_LAUNCH_MARKERS" ] || { echo "no -x WALLFACER_LAUNCH_MARKERS" >&2; exit 99; }
case $FAKE in
  ok) exit 0 ;;
  no-start-once) [ "$n" -eq 1 ] && exit 1; exit 0 ;;  # the first launch fails before any rank
  no-start) exit 1 ;;
  started) touch "$WALLFACER_LAUNCH_MARKERS/123"; exit 3 ;;  # a rank started, then failed
  slow) trap 'echo "mpirun got TERM" >&2; exit 143' TERM; touch "$WALLFACER_LAUNCH_MARKERS/1"
        for _ in $(seq 1 300); do sleep 0.1; done; exit 0 ;;
esac
SH
chmod +x "$work/fake-mpirun"

# fake MODE WANT_RC WANT_LAUNCHES WANT_RETRY_LINES
fake() {
  local mode=$1 want_rc=$2 want_n=$3 want_lines=$4 out rc
  rm -f "$work/launches"
  out=$(FAKE=$mode LAUNCHES=$work/launches WALLFACER_MPIRUN=$work/fake-mpirun "$launch" -np 2 x 2>&1)
  rc=$?
  [ $rc -eq "$want_rc" ] || err "$mode: exit $rc, expected $want_rc: $out"
  [ "$(cat "$work/launches")" -eq "$want_n" ] || err "$mode: $(cat "$work/launches") launches, expected $want_n"
  [ "$(echo "$out" | grep -c "$retry_line")" -eq "$want_lines" ] || err "$mode: retry lines: $out"
}
fake ok 0 1 0
fake no-start-once 0 2 1
fake no-start 1 2 1
fake started 3 1 0

# Stopped: SIGTERM reaches mpirun, whose exit is the script's; no relaunch.
rm -f "$work/launches"
FAKE=slow LAUNCHES=$work/launches WALLFACER_MPIRUN=$work/fake-mpirun "$launch" -np 2 x \
  >"$work/slow.log" 2>&1 &
job=$!
for _ in $(seq 1 100); do [ -s "$work/launches" ] && break; sleep 0.05; done
sleep 0.3
kill -TERM "$job"
wait "$job"
rc=$?
[ $rc -eq 143 ] || err "TERM: exit $rc, expected 143: $(cat "$work/slow.log")"
grep -q "mpirun got TERM" "$work/slow.log" || err "TERM was not passed on: $(cat "$work/slow.log")"
[ "$(cat "$work/launches")" -eq 1 ] || err "TERM: relaunched"

# The real mpirun. Ranks that start and fail (bad input on 2 ranks; on 1 rank, where the error is
# reported without starting MPI): one launch, one error line.
export WALLFACER_MPIRUN=$real_mpirun OMP_NUM_THREADS=1
for np in 2 1; do
  out=$("$launch" -q --oversubscribe -np $np "$wf" attn --strategy spiral --seq 64 --heads 2 \
    --head-dim 8 2>&1)
  rc=$?
  [ $rc -eq 2 ] || err "bad input on $np ranks: exit $rc, expected 2: $out"
  [ "$(echo "$out" | grep -c "error:")" -eq 1 ] || err "bad input on $np ranks: not one error: $out"
  echo "$out" | grep -q "$retry_line" && err "bad input on $np ranks was relaunched: $out"
done
# A program mpirun cannot start: relaunched once, then its failure stands.
out=$("$launch" -q --oversubscribe -np 2 "$work/no-such-program" 2>&1)
rc=$?
[ $rc -ne 0 ] || err "a missing program: exit 0"
[ "$(echo "$out" | grep -c "$retry_line")" -eq 1 ] || err "a missing program: not relaunched once: $out"
# A marker folder the ranks cannot write to: an error naming it, not a silent relaunch.
out=$(WALLFACER_LAUNCH_MARKERS=$work/none "$real_mpirun" -q --oversubscribe -np 2 \
  -x WALLFACER_LAUNCH_MARKERS "$wf" attn --strategy ring --seq 64 --heads 2 --head-dim 8 2>&1)
rc=$?
[ $rc -eq 1 ] || err "unwritable marker folder: exit $rc, expected 1: $out"
echo "$out" | grep -q "WALLFACER_LAUNCH_MARKERS must name a writable folder" ||
  err "unwritable marker folder: $out"
# A job that runs: one launch, nothing left behind.
mkdir "$work/tmp"
out=$(TMPDIR=$work/tmp "$launch" -q --oversubscribe -np 2 "$wf" attn --strategy ring --seq 64 \
  --heads 2 --head-dim 8 2>&1) || err "attn on 2 ranks failed: $out"
echo "$out" | grep -q "$retry_line" && err "a good run was relaunched: $out"
[ -z "$(ls -A "$work/tmp")" ] || err "the marker folder was left behind: $(ls "$work/tmp")"

[ $fail -eq 0 ] && echo "ok: only launches that never started are relaunched"
exit $fail
