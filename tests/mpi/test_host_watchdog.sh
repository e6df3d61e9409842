#!/usr/bin/env bash
# The watchdog of a program that runs MPI itself (comm::from_mpi_comm starts it): rank 1 stalls
# for 30 s, rank 0 waits for it with a 1 s timeout; the job must end within a few seconds, with a
# non-zero exit code and the watchdog's message naming the wait and the peer.
# Usage: test_host_watchdog.sh MPIRUN TEST_HOST_MPI (MPIRUN: tests/mpirun.sh)
set -u
mpiexec=$1 prog=$2
start=$(date +%s)
out=$(OMP_NUM_THREADS=1 "$mpiexec" --oversubscribe -np 2 "$prog" watchdog 2>&1)
rc=$?
took=$(($(date +%s) - start))
echo "$out"
fail=0
[ $rc -ne 0 ] || { echo "FAIL: exit code 0"; fail=1; }
[ $took -lt 20 ] || { echo "FAIL: took $took s (the stalled rank sleeps 30 s)"; fail=1; }
echo "$out" | grep -q "rank 0: MPI_Waitall on a receive with rank 1 made no progress" ||
  { echo "FAIL: no watchdog message"; fail=1; }
[ $fail -eq 0 ] && echo "host watchdog: ok (${took} s)"
exit $fail
