#!/usr/bin/env bash
# The DiT with train.dtype = "bf16": the losses of a 40-step run track the fp32 run's (every loss
# within 1e-3 relative; measured 8.3e-5), P = 1 and P = 2 (ring) agree within 1e-4 over 10 steps
# (measured 1.3e-6), and an interrupted and resumed bf16 run gives the uninterrupted run's losses
# bit for bit. (adaLN-Zero starts every block at zero: the learning rate 1e-2 makes the blocks,
# where the bf16 products are, matter within a few steps.)
set -u
src=$3
source "$src/tests/gpt/common.sh" "$1" "$2" "$4"

# A tiny DiT: 4 frames of 16 x 16 pixels, 4 x 4 patches (64 tokens).
tiny=(--set data.frames=4 --set data.size=16 --set model.patch=4 --set model.dim=32
      --set model.heads=2 --set model.layers=2 --set model.freq_dim=16 --set train.batch=2
      --set train.eval_every=0 --set data.clips=16 --set train.warmup=2 --set train.lr=1e-2)
# run NAME NP overrides... (RUN_FLAGS: more flags): tests/gpt/common.sh's, on the DiT config.
RUN_CONFIG=$src/configs/dit-video.toml
RUN_ARGS=("${tiny[@]}" --set parallel.sp=1)

run fp32 1 train.steps=40 train.dtype=fp32 train.ckpt_every=0
run bf16 1 train.steps=40 train.dtype=bf16 train.ckpt_every=0
portable=""  # without AVX512-BF16 the line also says the bf16 path is the portable one
grep -qw avx512_bf16 /proc/cpuinfo || portable="; portable bf16 path: products in fp32 by sgemm"
grep -qF "dtype bf16 (train.dtype$portable)" "$work/bf16.log" || err "bf16 run did not say its dtype: $(cat "$work/bf16.log")"
within fp32 bf16 1e-3 40
[ "$(losses "$work/fp32" | tail -1)" != "$(losses "$work/bf16" | tail -1)" ] ||
  err "bf16 losses equal the fp32 ones: the bf16 path did not run"

run bf16_p2 2 train.steps=10 train.dtype=bf16 train.ckpt_every=0 parallel.sp=2 parallel.strategy=ring
run bf16_p1 1 train.steps=10 train.dtype=bf16 train.ckpt_every=0
within bf16_p1 bf16_p2 1e-4 10

# Interrupted after step 3 and resumed: the same losses bit for bit.
ckpt=(train.steps=6 train.ckpt_every=3 train.dtype=bf16 parallel.sp=2)
run resume 2 "${ckpt[@]}"
cp "$work/resume/metrics.jsonl" "$work/full.jsonl"
rm -rf "$work/resume/ckpt/step-6"
RUN_FLAGS=--resume run resume 2 "${ckpt[@]}"
mv "$work/resume.log" "$work/resumed.log"
grep -q "resumed from .*step-3" "$work/resumed.log" || err "resume did not start from step 3"
a=$(sed -E 's/.*"loss":([^,}]*).*/\1/' "$work/full.jsonl" | tail -3 | tr '\n' ' ')
b=$(losses "$work/resume" | tail -3 | tr '\n' ' ')
if [ "$a" == "$b" ]; then echo "ok: resumed bf16 losses identical: $b"; else err "resumed bf16 losses differ: '$a' vs '$b'"; fi
exit $fail
