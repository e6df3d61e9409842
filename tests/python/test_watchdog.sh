#!/usr/bin/env bash
# An error on one rank only: rank 1 passes float64 arrays (TypeError there, before any
# communication) while rank 0 calls into the attention; rank 0's watchdog (2 s) ends the job with
# its message, a non-zero exit code, well before the test's timeout.
# Usage: test_watchdog.sh PYTHON MPIRUN WALLFACER_CLI (MPIRUN: tests/mpirun.sh)
set -u
python=$1 mpirun=$2 cli=$3
start=$(date +%s)
out=$("$mpirun" --oversubscribe --bind-to none -np 2 "$python" "$(dirname "$0")/test_errors.py" \
  "$cli" one-rank 2>&1)
rc=$?
took=$(($(date +%s) - start))
echo "$out"
fail=0
[ $rc -ne 0 ] || { echo "FAIL: exit code 0"; fail=1; }
[ $took -lt 120 ] || { echo "FAIL: took $took s"; fail=1; }
echo "$out" | grep -q "rank 1: TypeError: q is float64" || { echo "FAIL: no TypeError on rank 1"; fail=1; }
echo "$out" | grep -q "rank 0: .* made no progress" || { echo "FAIL: no watchdog message"; fail=1; }
[ $fail -eq 0 ] && echo "python watchdog: ok (${took} s)"
exit $fail
