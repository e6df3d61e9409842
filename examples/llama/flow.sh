#!/usr/bin/env bash
# The whole Hugging Face flow on a model made here (nothing is downloaded): transformers writes a
# tiny random-weight Llama trained for a context of 256 tokens; `wallfacer import-hf` turns it into
# a run folder; training continues across 4 ranks (zigzag) at 4x that context with llama3 rope
# scaling (configs/llama-finetune.toml holds the same settings for a larger run); `export-hf`
# writes it back; transformers loads the export and its loss on two held-out sequences at the new
# length is compared with `wallfacer score` on 4 ranks (tests/golden/gen_hf_fixtures.py --check).
# For a downloaded model, replace the first step by its folder (README.md, "Llama-family models").
# Usage: examples/llama/flow.sh [WORKDIR]   (default a temporary folder, removed at the end; after
#   the build; the venv of bench/hf_venv.sh, made once from PyPI)
set -euo pipefail
cd "$(dirname "$0")/../.."
wf=${WALLFACER:-build/wallfacer}
source bench/hf_venv.sh
work=${1:-}
if [[ -z $work ]]; then work=$(mktemp -d); trap 'rm -rf "$work"' EXIT; fi
mkdir -p "$work"
seq=1024  # 4x the model's 256
for i in $(seq 1 6000); do echo "line $i: and the lamps were lit and the doors were opened"; done > "$work/text.txt"

echo "== 1. a tiny random Llama from transformers"
"$venv/bin/python" examples/llama/make_tiny_llama.py --out "$work/hf-in" --text "$work/text.txt" \
  --seq $seq --tokens "$work/heldout.npy"
"$wf" prepare --input "$work/text.txt" --out "$work/data" >/dev/null

echo "== 2. import-hf"
"$wf" import-hf "$work/hf-in" --out "$work/run"

echo "== 3. train across 4 ranks at seq $seq with llama3 rope scaling (factor 4)"
scripts/wallfacer-mpirun 4 train --config "$work/run/config.toml" --out "$work/run" --resume \
  --progress none --set data.dir="$work/data" --set train.seq=$seq --set train.batch=1 \
  --set train.steps=4 --set train.warmup=0 --set train.eval_every=0 --set train.ckpt_every=4 \
  --set parallel.sp=4 --set parallel.strategy=zigzag \
  --set model.rope_scaling.type=llama3 --set model.rope_scaling.factor=4.0 \
  --set model.rope_scaling.low_freq_factor=1.0 --set model.rope_scaling.high_freq_factor=4.0 \
  --set model.rope_scaling.original_max_position_embeddings=256
tail -1 "$work/run/metrics.jsonl"

echo "== 4. export-hf"
"$wf" export-hf "$work/run" --out "$work/hf-out"
grep -A6 '"rope_scaling"' "$work/hf-out/config.json"

echo "== 5. the export in transformers against wallfacer score on 4 ranks"
ours=$(scripts/wallfacer-mpirun 4 score --ckpt "$work/run" --tokens "$work/heldout.npy" \
  --strategy zigzag --json | grep '^{' | tail -1)
echo "wallfacer score: $ours"
check=$("$venv/bin/python" tests/golden/gen_hf_fixtures.py --check "$work/hf-out" \
  --tokens "$work/heldout.npy")
echo "$check"
theirs=$(sed -nE 's/.*loss ([0-9.eE+-]+)$/\1/p' <<< "$check" | tail -1)
python3 - "$ours" "$theirs" <<'PY'
import json, sys
ours, theirs = json.loads(sys.argv[1])["loss"], float(sys.argv[2])
rel = abs(ours - theirs) / abs(theirs)
print(f"loss: wallfacer {ours:.7f}, transformers {theirs:.7f}, relative difference {rel:.1e}")
sys.exit(0 if rel <= 1e-5 else 1)
PY
