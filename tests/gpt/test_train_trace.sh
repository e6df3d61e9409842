#!/usr/bin/env bash
# wallfacer train --trace / train.trace_steps (docs/trace.md): a trace of the chosen steps with
# every layer and phase (tests/cli/check_trace.py); an unwritable trace path fails with one line and
# a non-zero exit on every rank, leaving nothing; a bad range is refused before any work.
set -u
source "$(dirname "$0")/common.sh"
check="python3 $(dirname "$0")/../cli/check_trace.py"

# Zigzag over 4 ranks with the attention recomputed in the backward; steps 2..3 of 5.
out=$(mpi 4 train --config "$work/tiny.toml" --set parallel.sp=4 --set parallel.strategy=zigzag \
  --set parallel.checkpointing=attention --set "train.trace_steps=[2, 3]" --out "$work/zz" \
  --progress none 2>&1) || err "traced training failed: $out"
[ -f "$work/zz/trace.json" ] || err "train.trace_steps wrote no $work/zz/trace.json"
$check "$work/zz/trace.json" --steps 2 3 --layers 2 || err "zigzag trace"
grep -q '"recompute"' "$work/zz/trace.json" || err "no recompute spans with checkpointing"

# --trace FILE, every step, dp 2 x sp 2 ring.
out=$(mpi 4 train --config "$work/tiny.toml" --set parallel.sp=2 --set train.batch=2 --steps 2 \
  --trace "$work/ring.json" --out "$work/ring" --progress none 2>&1) ||
  err "train --trace failed: $out"
$check "$work/ring.json" --steps 1 2 --layers 2 || err "ring trace"

# An unwritable path: one line, non-zero, no file, no hang (the test's timeout catches one).
out=$(mpi 2 train --config "$work/tiny.toml" --set parallel.sp=2 --steps 1 \
  --trace "$work/missing/dir/t.json" --out "$work/bad" --progress none 2>&1); rc=$?
[ $rc -ne 0 ] || err "an unwritable --trace path exited 0"
echo "$out" | grep -q "cannot write the trace file" || err "unwritable --trace: message: $out"
[ "$(echo "$out" | grep -c "error")" -eq 1 ] || err "unwritable --trace: not one error line: $out"
[ ! -e "$work/missing" ] || err "unwritable --trace left something behind"

out=$(mpi 1 train --config "$work/tiny.toml" --set "train.trace_steps=[3, 2]" --out "$work/x" \
  --progress none 2>&1); rc=$?
[ $rc -eq 2 ] || err "train.trace_steps = [3, 2] exited $rc, expected 2: $out"
echo "$out" | grep -q "train.trace_steps" || err "bad trace_steps: message: $out"
exit $fail
