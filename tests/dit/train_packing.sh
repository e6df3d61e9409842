#!/usr/bin/env bash
# The DiT with train.packing = "documents": sequences of 8 frames packed with clips of 1 to 4
# frames (each attending to itself, with its own time, noise, label and positions). The training
# and validation losses of P = 1 agree with P = 2 (ring) and P = 4 (Ulysses, WallFacer C = 2,
# zigzag), in the balanced layout (the default with packing) and in the strategy's, within 1e-7
# relative in fp32 (measured: at most 8.2e-9) and P = 1 with P = 4 (zigzag) within 3e-5 in bf16
# (measured 2.7e-6); every step's work_imbalance is >= 1 and at most the strategy layout's; an
# interrupted and resumed run (balanced layout) gives the same losses bit for bit; `sample` writes
# one clip of data.frames from its checkpoint; packing one whole clip per sequence in the
# strategy's layout gives the losses of train.packing = "none" bit for bit; packed clips are
# another batch than whole clips.
set -u
src=$3
source "$src/tests/gpt/common.sh" "$1" "$2" "$4"

# A tiny DiT: 4-frame clips of 16 x 16 pixels in 4 x 4 patches (16 tokens a frame).
tiny=(--set data.frames=4 --set data.size=16 --set model.patch=4 --set model.dim=32
      --set model.heads=4 --set model.layers=2 --set model.freq_dim=16 --set train.batch=2
      --set data.clips=16 --set train.warmup=2 --set train.lr=1e-2 --set train.eval_every=5
      --set train.eval_batches=1 --set train.ckpt_every=0 --set train.dtype=fp32)
# run NAME NP overrides... (RUN_FLAGS: more flags): tests/gpt/common.sh's, on the DiT config.
RUN_CONFIG=$src/configs/dit-video.toml
RUN_ARGS=("${tiny[@]}" --set parallel.sp=1)
val_losses() { grep -o '"val_loss":[^,}]*' "$1/metrics.jsonl" | cut -d: -f2; }
# val_within A B BOUND: the validation losses agree within BOUND (relative).
val_within() {
  paste <(val_losses "$work/$1") <(val_losses "$work/$2") | awk -v a="$1" -v b="$2" -v bound="$3" '
    { n++; d = ($2 - $1) / $1; if (d < 0) d = -d; if (d > worst) worst = d; if (d > bound) bad++ }
    END { if (n != 2 || bad) { printf "FAIL: %s vs %s: %d val losses, %d beyond %g\n", a, b, n, bad, bound; exit 1 }
          printf "ok: val losses of %s within %g of %s (largest %.2e)\n", b, bound, a, worst }' || fail=1
}

# 8 frames = 128 tokens a sequence.
d=(train.packing=documents train.seq=128 data.min_frames=1 train.steps=10)
run p1 1 "${d[@]}"
grep -q "seq 128, batch 2, packing documents" "$work/p1.log" || err "p1 did not say it packs: $(cat "$work/p1.log")"
run p2_ring 2 "${d[@]}" parallel.sp=2 parallel.strategy=ring
run p4_ulysses 4 "${d[@]}" parallel.sp=4 parallel.strategy=ulysses
run p4_wallfacer 4 "${d[@]}" parallel.sp=4 parallel.strategy=wallfacer parallel.teams=2
run p4_zigzag 4 "${d[@]}" parallel.sp=4 parallel.strategy=zigzag
run p2_ring_s 2 "${d[@]}" parallel.sp=2 parallel.strategy=ring parallel.layout=strategy
run p4_wallfacer_s 4 "${d[@]}" parallel.sp=4 parallel.strategy=wallfacer parallel.teams=2 parallel.layout=strategy
run p4_zigzag_s 4 "${d[@]}" parallel.sp=4 parallel.strategy=zigzag parallel.layout=strategy
grep -q "packing documents, balanced layout" "$work/p4_zigzag.log" || err "p4_zigzag: not the balanced layout"
for r in p2_ring p4_ulysses p4_wallfacer p4_zigzag p2_ring_s p4_wallfacer_s p4_zigzag_s; do
  within p1 $r 1e-7 10
  val_within p1 $r 1e-7
done
# work_imbalance: in the balanced layout >= 1 and at most the strategy layout's at every step.
for r in p2_ring p4_wallfacer p4_zigzag; do imbalance_below $r ${r}_s 10; done
run p1_bf16 1 "${d[@]}" train.dtype=bf16
run p4_bf16 4 "${d[@]}" train.dtype=bf16 parallel.sp=4 parallel.strategy=zigzag
within p1_bf16 p4_bf16 3e-5 10
val_within p1_bf16 p4_bf16 3e-5

# Interrupted after step 3 and resumed (balanced layout): the same losses bit for bit.
resume_same resume 2 "${d[@]}" parallel.sp=2
# sample is unchanged: one clip of data.frames from the packed run's checkpoint.
"$1" sample --ckpt "$work/resume" --out "$work/s.gif" --steps 1 >"$work/sample.log" 2>&1 ||
  err "sample of the packed run failed: $(cat "$work/sample.log")"
grep -q "4 frames of 16x16 pixels" "$work/sample.log" || err "sample: $(cat "$work/sample.log")"

# One whole clip per sequence (train.seq = data.frames frames, data.min_frames = data.frames):
# the clips, times, noise and losses of train.packing = "none".
run one_none 2 train.steps=10 parallel.sp=2
run one_docs 2 train.steps=10 parallel.sp=2 train.packing=documents parallel.layout=strategy
if [ "$(losses "$work/one_none"; val_losses "$work/one_none")" = "$(losses "$work/one_docs"; val_losses "$work/one_docs")" ]; then
  echo "ok: one clip per packed sequence bit-identical to packing none"
else
  err "one clip per packed sequence differs from packing none"
fi
# Packed clips are another batch: the first loss differs from whole clips of 8 frames.
run whole 1 train.steps=10 data.frames=8
[ "$(losses "$work/whole" | head -1)" != "$(losses "$work/p1" | head -1)" ] ||
  err "packed clips gave the loss of whole clips"
exit $fail
