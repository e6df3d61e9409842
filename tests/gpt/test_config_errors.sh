#!/usr/bin/env bash
# Bad configs stop before any work with a one-line error and exit code 2.
set -u
source "$(dirname "$0")/common.sh"

expect2() {  # expect2 WHAT PATTERN command...
  expect_error 2 "$@"
  [ -e "$work/out/metrics.jsonl" ] && err "$1: work started (metrics written)"
}
t=(train --config "$work/tiny.toml" --out "$work/out" --progress none)
expect2 "unknown key" "unknown config key 'train.sequence'" "$wf" "${t[@]}" --set train.sequence=5
printf '[model]\nlayerz = 2\n' > "$work/bad.toml"
expect2 "unknown key in file" "model.layerz" "$wf" train --config "$work/bad.toml" --out "$work/out"
expect2 "wrong type" "train.seq expects an integer" "$wf" "${t[@]}" --set train.seq=abc
expect2 "bad strategy" "parallel.strategy" "$wf" "${t[@]}" --set parallel.strategy=spiral
expect2 "bad checkpointing" "parallel.checkpointing" "$wf" "${t[@]}" --set parallel.checkpointing=full
expect2 "bad dtype" "train.dtype must be 'auto', 'fp32' or 'bf16' (got 'fp16')" "$wf" "${t[@]}" --set train.dtype=fp16
expect2 "bad packing" "train.packing must be 'none' or 'documents' (got 'docs')" "$wf" "${t[@]}" --set train.packing=docs
dit=(--set model.kind=dit --set data.size=16 --set model.patch=4 --set data.frames=4 --set train.packing=documents)
expect2 "dit packed seq" "train.seq = 100 must be a whole number of frames of 16 tokens.*use 96 or 112" "$wf" "${t[@]}" "${dit[@]}" --set train.seq=100
expect2 "dit min_frames" "data.min_frames = 5 must be in 1..data.frames (4)" "$wf" "${t[@]}" "${dit[@]}" --set data.min_frames=5
expect2 "packing keep_kv eval" "parallel.keep_kv = true cannot evaluate" mpi 2 "${t[@]}" --set parallel.sp=2 --set parallel.strategy=wallfacer --set parallel.teams=2 --set parallel.keep_kv=true --set train.packing=documents
expect2 "bad layout" "parallel.layout must be 'balanced' or 'strategy' (got 'diagonal')" "$wf" "${t[@]}" --set train.packing=documents --set parallel.layout=diagonal
expect2 "balanced without packing" "parallel.layout = 'balanced' .*needs train.packing = 'documents'" "$wf" "${t[@]}" --set parallel.layout=balanced
expect2 "balanced seq" "train.seq 72 must be divisible by 16 for the balanced layout on 2 ranks.*parallel.layout = 'strategy'" mpi 2 "${t[@]}" --set parallel.sp=2 --set train.seq=72 --set train.packing=documents
expect2 "negative window" "model.window is -3; it must be >= 0" "$wf" "${t[@]}" --set model.window=-3
expect2 "window layer" "model.window_layers names layer 2, but the model has layers 0..1" "$wf" "${t[@]}" --set model.window=8 --set "model.window_layers=[0, 2]"
expect2 "window layers without window" "model.window_layers needs model.window > 0" "$wf" "${t[@]}" --set "model.window_layers=[0]"
expect2 "window layers type" "model.window_layers expects an integer, got 'x'" "$wf" "${t[@]}" --set model.window=8 --set "model.window_layers=[x]"
expect2 "dit window" "model.window is for the GPT" "$wf" "${t[@]}" "${dit[@]}" --set model.window=8
expect2 "bad arch" "model.arch must be 'gpt', 'llama' or 'dit' (got 'mamba')" "$wf" "${t[@]}" --set model.arch=mamba
expect2 "rope scaling type" "model.rope_scaling.type 'yarn' is not supported" "$wf" "${t[@]}" --set model.arch=llama --set model.rope_scaling.type=yarn
printf '[model]\narch = "llama"\nrope_scaling = { type = "dynamic", factor = 2.0 }\n[data]\ndir = "x"\n' > "$work/rope.toml"
expect2 "rope scaling type in file" "model.rope_scaling.type 'dynamic' is not supported" "$wf" train --config "$work/rope.toml" --out "$work/out"
expect2 "llama3 factors" "model.rope_scaling.low_freq_factor (4) must be > 0 and below" "$wf" "${t[@]}" --set model.arch=llama --set model.rope_scaling.type=llama3 --set model.rope_scaling.low_freq_factor=4
expect2 "norm_eps of the GPT" "model.norm_eps = 1e-06 applies to model.arch = 'llama'" "$wf" "${t[@]}" --set model.norm_eps=1e-6
expect2 "llama dit" "model.kind = 'dit' contradicts model.arch = 'llama'" "$wf" "${t[@]}" --set model.arch=llama --set model.kind=dit
expect2 "heads" "model.kv_heads" "$wf" "${t[@]}" --set model.kv_heads=3
expect2 "sp does not divide P" "parallel.sp = 3" mpi 2 "${t[@]}" --set parallel.sp=3
expect2 "seq not divisible" "train.seq = 63" mpi 2 "${t[@]}" --set parallel.sp=2 --set train.seq=63
expect2 "teams" "team" mpi 2 "${t[@]}" --set parallel.sp=2 --set parallel.strategy=wallfacer --set parallel.teams=3
expect2 "inner" "parallel.inner 3" mpi 2 "${t[@]}" --set parallel.sp=2 --set parallel.strategy=double-ring --set parallel.inner=3
expect2 "inner ring" "parallel.inner = 2 applies only" mpi 2 "${t[@]}" --set parallel.sp=2 --set parallel.inner=2
expect2 "ulysses" "parallel.ulysses = 3" mpi 2 "${t[@]}" --set parallel.sp=2 --set parallel.ulysses=3
expect2 "ulysses strategy" "parallel.strategy = 'ring', 'zigzag' or 'wallfacer'" mpi 2 "${t[@]}" --set parallel.sp=2 --set parallel.strategy=ulysses --set parallel.ulysses=2
expect2 "missing data" "run \`wallfacer prepare\` first" "$wf" "${t[@]}" --set data.dir="$work/nothing"
[ $fail -eq 0 ] && echo "ok: config errors exit 2 with one line"
exit $fail
