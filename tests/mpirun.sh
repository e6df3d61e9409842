#!/usr/bin/env bash
# mpirun for the tests: `tests/mpirun.sh MPIRUN-ARGS...` runs $WALLFACER_MPIRUN (default: mpirun)
# with the same arguments, and runs it a second time only when the first launch failed before any
# rank reached the program.
#
# On a loaded machine with more ranks than cores, mpirun can fail to start a job (its daemons or
# the ranks' MPI_Init time out). That is the launcher's failure, not the program's, and the only one
# retried. The proof that no rank got going: every rank of a wallfacer program touches a file in the
# folder named by WALLFACER_LAUNCH_MARKERS right after MPI_Init (and when it reports an error
# without MPI), comm::MpiSession; this script points that variable at an empty folder of its own.
# mpirun exited non-zero and left the folder empty: nothing ran, so the job is launched once more,
# with a line on stderr saying so. A rank that started and then crashed, hung or computed a wrong
# result left its marker: never retried. Nor is a job this script was asked to stop (SIGINT,
# SIGTERM, SIGHUP are passed on to mpirun).
set -u
mpirun=${WALLFACER_MPIRUN:-mpirun}
markers=$(mktemp -d "${TMPDIR:-/tmp}/wallfacer-launch.XXXXXX") || exit 1
trap 'rm -rf "$markers"' EXIT

child=0
stopped=0
pass_on() {
  stopped=1
  [ "$child" -ne 0 ] && kill -"$1" "$child" 2>/dev/null
}
trap 'pass_on INT' INT
trap 'pass_on TERM' TERM
trap 'pass_on HUP' HUP

for attempt in 1 2; do
  # In the background so that a signal reaches this script (and is passed on) while mpirun runs;
  # stdin stays the script's.
  WALLFACER_LAUNCH_MARKERS=$markers "$mpirun" -x WALLFACER_LAUNCH_MARKERS "$@" <&0 &
  child=$!
  wait "$child"
  rc=$?
  # A trapped signal ends `wait` early: wait for mpirun itself.
  while kill -0 "$child" 2>/dev/null; do
    wait "$child"
    rc=$?
  done
  child=0
  if [ "$rc" -eq 0 ] || [ "$stopped" -eq 1 ] || [ -n "$(ls -A "$markers")" ] || [ "$attempt" -eq 2 ]; then
    exit "$rc"
  fi
  echo "tests/mpirun.sh: mpirun exited $rc before any rank started; launching it once more" >&2
done
