#!/usr/bin/env bash
# train.dtype = "bf16": the losses of a 30-step run track the fp32 run's (every loss within 0.5%
# relative), on the chosen bf16 path and on the portable one; P = 1 and P = 4 agree within 2e-4
# relative; an interrupted and resumed bf16 run gives the uninterrupted run's losses bit for bit;
# train.dtype = "auto" takes bf16 where the CPU has AVX512-BF16 and the checkpoint records the
# dtype chosen; resuming an fp32 checkpoint in bf16 is allowed and said.
set -u
source "$(dirname "$0")/common.sh"

run() {  # run NAME NP overrides...
  local name=$1 np=$2
  shift 2
  local sets=()
  for s in "$@"; do sets+=(--set "$s"); done
  mpi "$np" train --config "$work/tiny.toml" --out "$work/$name" --progress none \
    --set train.eval_every=0 "${sets[@]}" >"$work/$name.log" 2>&1 ||
    { err "$name exited $?"; cat "$work/$name.log"; }
}

run fp32 1 train.steps=30
run bf16 1 train.steps=30 train.dtype=bf16
# Without AVX512-BF16 the line also says that the bf16 path is the portable one.
portable=""
grep -qw avx512_bf16 /proc/cpuinfo || portable="; portable bf16 path: products in fp32 by sgemm"
grep -qF "dtype bf16 (train.dtype$portable): matrix products and attention in bf16 with fp32 accumulation" \
  "$work/bf16.log" || err "bf16 run did not say its dtype: $(cat "$work/bf16.log")"
grep -q "dtype fp32 (train.dtype): every layer in fp32" "$work/fp32.log" || err "fp32 run did not say its dtype"
within fp32 bf16 0.005 30
[ "$(losses "$work/fp32" | tail -1)" != "$(losses "$work/bf16" | tail -1)" ] ||
  err "bf16 losses equal the fp32 ones: the bf16 path did not run"
losses "$work/bf16" | awk 'NR==1{a=$1} END{exit !($1 < a)}' || err "bf16 loss did not drop"

WALLFACER_BF16_PATH=portable run bf16_portable 1 train.steps=30 train.dtype=bf16
within fp32 bf16_portable 0.005 30

run bf16_p4 4 train.dtype=bf16 parallel.sp=4 parallel.strategy=zigzag parallel.checkpointing=attention
run bf16_p1 1 train.dtype=bf16
within bf16_p1 bf16_p4 2e-4 5

# model.arch = "llama" in bf16: within the bf16 bound of its fp32 run, and P = 1 against P = 4
# (WallFacer C = 2) within 2e-4.
llama=(model.arch=llama model.intermediate=48 model.tie_embeddings=false model.qkv_bias=true
  model.kv_heads=2 model.rope_scaling.type=linear model.rope_scaling.factor=2)
run llama_fp32 1 "${llama[@]}" train.steps=30
run llama_bf16 1 "${llama[@]}" train.steps=30 train.dtype=bf16
within llama_fp32 llama_bf16 0.005 30
run llama_bf16_p1 1 "${llama[@]}" train.dtype=bf16
run llama_bf16_p4 4 "${llama[@]}" train.dtype=bf16 parallel.sp=4 parallel.strategy=wallfacer \
  parallel.teams=2 parallel.checkpointing=attention
within llama_bf16_p1 llama_bf16_p4 2e-4 5

# Interrupted after step 3 and resumed: the same losses bit for bit.
ckpt=(train.steps=6 train.ckpt_every=3 train.dtype=bf16 parallel.sp=2 parallel.strategy=zigzag)
run resume 2 "${ckpt[@]}"
cp "$work/resume/metrics.jsonl" "$work/full.jsonl"
rm -rf "$work/resume/ckpt/step-6"
mpi 2 train --config "$work/tiny.toml" --out "$work/resume" --progress none --resume \
  --set train.eval_every=0 $(printf -- '--set %s ' "${ckpt[@]}") >"$work/resumed.log" 2>&1 ||
  { err "resume exited $?"; cat "$work/resumed.log"; }
grep -q "resumed from .*step-3" "$work/resumed.log" || err "resume did not start from step 3"
a=$(sed -E 's/.*"loss":([^,}]*).*/\1/' "$work/full.jsonl" | tail -3 | tr '\n' ' ')
b=$(losses "$work/resume" | tail -3 | tr '\n' ' ')
if [ "$a" == "$b" ]; then echo "ok: resumed bf16 losses identical: $b"; else err "resumed bf16 losses differ: '$a' vs '$b'"; fi

# train.dtype = "auto": bf16 where the CPU has AVX512-BF16, else fp32; said at the start and
# recorded in the checkpoint as the dtype it chose.
if grep -qw avx512_bf16 /proc/cpuinfo; then want=bf16 has=has; else want=fp32 has=lacks; fi
run auto 1 train.steps=2 train.ckpt_every=2 train.dtype=auto
grep -q "^dtype $want (train.dtype = 'auto': this CPU $has AVX512-BF16)" "$work/auto.log" ||
  err "auto run did not say dtype $want: $(cat "$work/auto.log")"
grep -qF "dtype = '$want'" "$work/auto/ckpt/step-2/manifest.json" ||
  err "the checkpoint does not record dtype $want: $(cat "$work/auto/ckpt/step-2/manifest.json")"

# An fp32 checkpoint resumed in bf16: allowed, and the change is printed.
run switch 1 train.steps=6 train.ckpt_every=3
rm -rf "$work/switch/ckpt/step-6"
mpi 1 train --config "$work/tiny.toml" --out "$work/switch" --progress none --resume \
  --set train.steps=6 --set train.ckpt_every=3 --set train.eval_every=0 --set train.dtype=bf16 \
  >"$work/switched.log" 2>&1 || { err "resume in bf16 exited $?"; cat "$work/switched.log"; }
grep -q "resuming with changed settings: .*train.dtype 'fp32' -> 'bf16'" "$work/switched.log" ||
  err "the dtype change was not printed: $(cat "$work/switched.log")"
[ "$(losses "$work/switch" | wc -l)" -eq 6 ] || err "resumed bf16 run should hold 6 steps"
grep -q "dtype bf16" "$work/switched.log" && echo "ok: fp32 checkpoint resumed in bf16, change printed"
exit $fail
