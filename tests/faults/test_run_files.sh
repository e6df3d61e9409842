#!/usr/bin/env bash
# What a training run writes is never lost or mixed up: a fresh run refuses an --out that holds one
# (--overwrite starts over), --resume refuses another model shape and says what else changed, falls
# back past a damaged checkpoint, old checkpoints are pruned to train.keep_checkpoints, a diverged
# step stops training before anything is written, failed writes (metrics, loss plot, sample) stop
# with an error.
set -u
source "$(dirname "$0")/../gpt/common.sh"
t=(--config "$work/tiny.toml" --progress plain --set parallel.sp=2)
sum() { md5sum "$@" | cut -d' ' -f1; }

mpi 2 train "${t[@]}" --out "$work/run" --set train.ckpt_every=1 --set train.steps=6 \
  >"$work/first.log" 2>&1 || err "first run failed: $(cat "$work/first.log")"
# keep_checkpoints (default 3): steps 4, 5, 6 remain.
[ "$(ls "$work/run/ckpt" | tr '\n' ' ')" == "step-4 step-5 step-6 " ] ||
  err "keep_checkpoints: $(ls "$work/run/ckpt")"
# The state every rank holds is written once: one shard per checkpoint.
for d in "$work"/run/ckpt/step-*; do
  [ "$(ls "$d" | tr '\n' ' ')" == "manifest.json state.bin " ] || err "$d holds: $(ls "$d")"
done
before=$(sum "$work/run/metrics.jsonl")

# A fresh run into it: refused, nothing touched.
out=$(mpi 2 train "${t[@]}" --out "$work/run" 2>&1); rc=$?
[ $rc -eq 2 ] || err "fresh run into a run's --out: exit $rc, expected 2: $out"
echo "$out" | grep -q "already holds a training run.*--resume.*--overwrite" || err "message: $out"
[ "$(sum "$work/run/metrics.jsonl")" == "$before" ] || err "metrics changed by a refused run"
[ -d "$work/run/ckpt/step-6" ] || err "checkpoints changed by a refused run"

# --resume with another model shape: refused; other changes are allowed and named.
out=$(mpi 2 train "${t[@]}" --out "$work/run" --resume --set model.kv_heads=2 --steps 8 2>&1); rc=$?
[ $rc -eq 2 ] || err "resume with another shape: exit $rc, expected 2: $out"
echo "$out" | grep -q "another model shape (model.kv_heads 4 -> 2)" || err "shape message: $out"
mkdir "$work/run/ckpt/step-3.tmp"  # the leftover of an interrupted save
# One bit of the newest shard's RNG state (header offset 64), which its checksum covers.
shard="$work/run/ckpt/step-6/state.bin"
python3 -c 'import sys; b = bytearray(open(sys.argv[1], "rb").read()); b[64] ^= 4
open(sys.argv[1], "wb").write(b)' "$shard"
out=$(mpi 2 train "${t[@]}" --out "$work/run" --resume --steps 8 --set train.ckpt_every=1 \
  --set parallel.strategy=zigzag 2>&1); rc=$?
[ $rc -eq 0 ] || err "resume past a damaged checkpoint: exit $rc: $out"
echo "$out" | grep -q "skipping checkpoint .*step-6: .*step-6/state.bin' is corrupt" ||
  err "no warning about the damaged checkpoint: $out"
echo "$out" | grep -q "resumed from .*step-5 (step 5)" || err "did not fall back to step 5: $out"
echo "$out" | grep -q "resuming with changed settings: .*parallel.strategy 'ring' -> 'zigzag'" ||
  err "changed settings not named: $out"
[ "$(ls "$work/run/ckpt" | tr '\n' ' ')" == "step-6 step-7 step-8 " ] ||
  err "pruning after resume (step-3.tmp and old steps go): $(ls "$work/run/ckpt")"
[ "$(losses "$work/run" | wc -l)" -eq 8 ] || err "metrics after resume should hold 8 steps"

# --overwrite starts over: the old metrics and checkpoints are gone.
mpi 2 train "${t[@]}" --out "$work/run" --overwrite --steps 2 >"$work/ow.log" 2>&1 ||
  err "--overwrite failed: $(cat "$work/ow.log")"
[ "$(losses "$work/run" | wc -l)" -eq 2 ] || err "--overwrite: metrics hold $(losses "$work/run" | wc -l) lines"
[ -z "$(ls "$work/run/ckpt")" ] || err "--overwrite left checkpoints: $(ls "$work/run/ckpt")"

# A non-finite loss: stops with exit 1 before the step is kept; earlier checkpoints are untouched.
mpi 2 train "${t[@]}" --out "$work/nan" --steps 1 --set train.ckpt_every=1 >/dev/null 2>&1 ||
  err "nan: first step failed"
ck=$(sum "$work/nan/ckpt/step-1/"*)
out=$(mpi 2 train "${t[@]}" --out "$work/nan" --resume --steps 6 --set train.ckpt_every=1 \
  --set train.lr=1e30 --set train.warmup=0 --set train.grad_clip=0 2>&1); rc=$?
[ $rc -eq 1 ] || err "lr=1e30: exit $rc, expected 1: $out"
[ "$(echo "$out" | grep -c "error:")" -eq 1 ] || err "lr=1e30: not one error line: $out"
bad=$(echo "$out" | sed -nE 's/.*error: step ([0-9]+): the (loss|parameters) .*diverged.*/\1/p')
[ -n "$bad" ] || err "lr=1e30 message: $out"
grep -qE 'null|nan|inf' "$work/nan/metrics.jsonl" && err "lr=1e30: a non-finite value was written"
[ "$(losses "$work/nan" | wc -l)" -eq $((bad - 1)) ] || err "lr=1e30: metrics of the bad step kept"
[ -e "$work/nan/ckpt/step-$bad" ] && err "lr=1e30: a checkpoint of the diverged step $bad"
[ "$(sum "$work/nan/ckpt/step-1/"*)" == "$ck" ] || err "lr=1e30: the step-1 checkpoint changed"
out=$("$wf" train "${t[@]}" --set parallel.sp=1 --out "$work/inf" --set train.lr=inf 2>&1); rc=$?
[ $rc -eq 2 ] && echo "$out" | grep -q "train.lr is inf; it must be a finite number" ||
  err "lr=inf accepted: $out"

# Writes that fail: a file-size limit put on the running process stands in for a full disk
# (SIGXFSZ ignored, so write() fails with EFBIG). Exit 1 with the file named; what was written
# before stays.
limited() {  # limited BYTES OUT ARGS...: a one-rank run limited to BYTES per file after its first step
  local bytes=$1 out=$2
  shift 2
  # Only the error goes to the log (which the limit applies to as well).
  (trap '' XFSZ; exec "$wf" train "${t[@]}" --set parallel.sp=1 --out "$out" "$@") \
    >/dev/null 2>"$out.log" &
  local pid=$!
  for _ in $(seq 1 300); do [ -s "$out/metrics.jsonl" ] && break; sleep 0.05; done
  prlimit --pid "$pid" --fsize="$bytes" || err "prlimit failed"
  wait "$pid"
}
limited 1500 "$work/full" --steps 1000000; rc=$?
out=$(cat "$work/full.log")
[ $rc -eq 1 ] || err "metrics on a full disk: exit $rc, expected 1: $out"
echo "$out" | grep -q "cannot write step [0-9]* to '.*metrics.jsonl'" || err "metrics message: $out"
n=$(losses "$work/full" | wc -l)
[ "$n" -ge 1 ] || err "metrics on a full disk: $n lines"
python3 -c 'import json, sys; [json.loads(l) for l in open(sys.argv[1])]' \
  "$work/full/metrics.jsonl" || err "metrics on a full disk: a damaged line"
if command -v gnuplot >/dev/null; then
  # Slower steps (a wider model) so that the limit is in place long before the plot.
  limited 5000 "$work/plot" --steps 12 --set model.dim=128 --set train.seq=256 --set model.layers=4
  rc=$?
  out=$(cat "$work/plot.log")
  [ $rc -eq 1 ] || err "loss plot on a full disk: exit $rc, expected 1: $out"
  echo "$out" | grep -q "could not write the loss plot" || err "plot message: $out"
  [ "$(losses "$work/plot" | wc -l)" -eq 12 ] || err "plot failure: metrics lost"
fi
if command -v gnuplot >/dev/null; then
  # trace-plot's PNG cut short by a file-size limit: exit 1, nothing left behind.
  "$wf" attn --strategy ring --seq 64 --heads 2 --head-dim 8 --iters 1 \
    --trace "$work/trace.json" >/dev/null || err "attn --trace failed"
  out=$( (trap '' XFSZ; ulimit -f 2; exec "$wf" trace-plot "$work/trace.json" \
    --out "$work/cut.png") 2>&1); rc=$?
  [ $rc -eq 1 ] || err "trace-plot on a full disk: exit $rc, expected 1: $out"
  echo "$out" | grep -q "gnuplot could not write '$work/cut.png' completely" ||
    err "trace-plot message: $out"
  [ ! -e "$work/cut.png" ] && [ ! -e "$work/cut.png.tmp" ] || err "trace-plot left a file behind"
  "$wf" trace-plot "$work/trace.json" --out "$work/whole.png" >/dev/null ||
    err "trace-plot without a limit failed"
fi
"$wf" sample --ckpt "$work/nan" --tokens 5 >/dev/full 2>"$work/full.err"; rc=$?
[ $rc -eq 1 ] || err "sample to a full device: exit $rc, expected 1: $(cat "$work/full.err")"
grep -q "cannot write the sample" "$work/full.err" || err "sample message: $(cat "$work/full.err")"

[ $fail -eq 0 ] && echo "ok: nothing written is lost or mixed"
exit $fail
