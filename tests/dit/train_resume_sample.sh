#!/bin/bash
# DiT end to end through the CLI on a tiny config: train 4 steps with checkpoints, resume from
# step 2 and get the same losses, sample a GIF whose header has the configured size, and reject a
# bad model kind with exit code 2.
set -euo pipefail
W=$1
SRC=$2
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
ARGS=(--config "$SRC/configs/dit-video.toml" --out "$OUT/run" --steps 4 --progress plain
      --set data.frames=3 --set data.size=8 --set model.patch=2 --set model.dim=24
      --set model.heads=2 --set model.layers=1 --set model.freq_dim=8 --set parallel.sp=1
      --set train.batch=2 --set train.eval_every=2 --set train.ckpt_every=2 --set data.clips=8)
losses() { sed -n 's/.*"loss":\([^,}]*\).*/\1/p' "$1"; }

"$W" train "${ARGS[@]}" > "$OUT/full.log"
losses "$OUT/run/metrics.jsonl" > "$OUT/full.txt"
[ "$(wc -l < "$OUT/full.txt")" = 4 ] || { echo "expected 4 losses"; cat "$OUT/full.log"; exit 1; }
rm -rf "$OUT/run/ckpt/step-4"
"$W" train "${ARGS[@]}" --resume > "$OUT/resumed.log"
grep -q "resumed from .*step-2" "$OUT/resumed.log" || { echo "did not resume"; exit 1; }
losses "$OUT/run/metrics.jsonl" > "$OUT/resumed.txt"
diff "$OUT/full.txt" "$OUT/resumed.txt" || { echo "resumed losses differ"; exit 1; }

"$W" sample --ckpt "$OUT/run" --out "$OUT/s.gif" --steps 2 --class 1 --scale 2
# GIF89a header: width and height (little-endian u16) at bytes 6..9: 8 pixels x scale 2 = 16.
[ "$(head -c 6 "$OUT/s.gif")" = GIF89a ] || { echo "not a GIF"; exit 1; }
[ "$(od -An -tu2 -j6 -N4 "$OUT/s.gif" | tr -s ' ')" = " 16 16" ] || { echo "wrong size"; exit 1; }

set +e
"$W" train "${ARGS[@]}" --set model.kind=vit > "$OUT/bad.log" 2>&1
rc=$?
set -e
[ "$rc" = 2 ] || { echo "bad model.kind: exit $rc, expected 2"; cat "$OUT/bad.log"; exit 1; }
grep -q "model.kind" "$OUT/bad.log" || { echo "message does not name model.kind"; exit 1; }
echo OK
