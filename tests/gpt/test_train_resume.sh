#!/usr/bin/env bash
# Save then resume gives bit-identical losses; a truncated or corrupt checkpoint is reported and
# nothing is loaded.
set -u
source "$(dirname "$0")/common.sh"
cfg=(--config "$work/tiny.toml" --progress none --set train.steps=6 --set train.ckpt_every=3
     --set parallel.sp=2 --set parallel.strategy=zigzag)

mpi 2 train "${cfg[@]}" --out "$work/run" >"$work/full.log" 2>&1 || { err "training failed"; cat "$work/full.log"; }
[ -f "$work/run/ckpt/step-3/manifest.json" ] || err "no checkpoint at step 3"
# The replicated state is written once: one shard per checkpoint.
[ "$(ls "$work/run/ckpt/step-3" | tr '\n' ' ')" == "manifest.json state.bin " ] ||
  err "step 3 holds: $(ls "$work/run/ckpt/step-3")"
ls "$work/run/ckpt" | grep -q tmp && err "a temporary checkpoint directory was left behind"
cp "$work/run/metrics.jsonl" "$work/full.jsonl"

# Interrupted after step 3: drop the later checkpoint and resume.
rm -rf "$work/run/ckpt/step-6"
mpi 2 train "${cfg[@]}" --out "$work/run" --resume >"$work/resume.log" 2>&1 || { err "resume failed"; cat "$work/resume.log"; }
grep -q "resumed from .*step-3" "$work/resume.log" || err "resume did not start from step 3"
a=$(sed -E 's/.*"loss":([^,}]*).*/\1/' "$work/full.jsonl" | tail -3 | tr '\n' ' ')
b=$(losses "$work/run" | tail -3 | tr '\n' ' ')
[ "$(losses "$work/run" | wc -l)" -eq 6 ] || err "metrics after resume should hold 6 steps"
if [ "$a" == "$b" ]; then echo "ok: resumed losses identical: $b"; else err "resumed losses differ: '$a' vs '$b'"; fi

# Sampling from the checkpoint (one process, KV cache) continues the prompt.
out=$("$wf" sample --ckpt "$work/run" --prompt "Verse" --tokens 30 --temperature 0.5) || err "sample exited $?"
[[ "$out" == Verse* ]] && [ ${#out} -gt 10 ] || err "sample printed '$out'"
echo "ok: sample: $(echo "$out" | head -1)"

# A truncated shard: clear error, non-zero exit.
rm -rf "$work/run/ckpt/step-6"
shard="$work/run/ckpt/step-3/state.bin"
truncate -s $(( $(stat -c %s "$shard") - 100 )) "$shard"
out=$(mpi 2 train "${cfg[@]}" --out "$work/run" --resume 2>&1); rc=$?
[ $rc -ne 0 ] || err "resume from a truncated checkpoint exited 0"
echo "$out" | grep -q "state.bin' is truncated" || err "no clear truncation error: $out"
echo "$out" | grep -q "^step 4" && err "training continued from a truncated checkpoint"
echo "ok: truncated checkpoint refused: $(echo "$out" | grep -m1 truncated)"

# model.arch = "llama": the checkpoint records the architecture and its settings; resume is
# bit-identical and sample decodes with the llama blocks.
llama=("${cfg[@]}" --set model.arch=llama --set model.intermediate=40 --set model.norm_eps=1e-6
       --set model.tie_embeddings=false --set model.qkv_bias=true --set model.kv_heads=2
       --set model.rope_scaling.type=linear --set model.rope_scaling.factor=2)
mpi 2 train "${llama[@]}" --out "$work/llama" >"$work/llama.log" 2>&1 ||
  { err "llama training failed"; cat "$work/llama.log"; }
grep -q 'arch = .*llama' "$work/llama/ckpt/step-3/manifest.json" ||
  err "the llama checkpoint does not record model.arch"
cp "$work/llama/metrics.jsonl" "$work/llama_full.jsonl"
rm -rf "$work/llama/ckpt/step-6"
mpi 2 train "${llama[@]}" --out "$work/llama" --resume >"$work/llama_resume.log" 2>&1 ||
  { err "llama resume failed"; cat "$work/llama_resume.log"; }
a=$(sed -E 's/.*"loss":([^,}]*).*/\1/' "$work/llama_full.jsonl" | tail -3 | tr '\n' ' ')
b=$(losses "$work/llama" | tail -3 | tr '\n' ' ')
if [ "$a" == "$b" ]; then echo "ok: llama resumed losses identical: $b"; else err "llama resumed losses differ: '$a' vs '$b'"; fi
out=$("$wf" sample --ckpt "$work/llama" --prompt "Verse" --tokens 30 --temperature 0.5) ||
  err "llama sample exited $?"
[[ "$out" == Verse* ]] && [ ${#out} -gt 10 ] || err "llama sample printed '$out'"
echo "ok: llama sample: $(echo "$out" | head -1)"
exit $fail
