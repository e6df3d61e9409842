# Sourced by the benchmarks that compare with transformers (bench/llama_train.sh): sets venv to a
# virtual environment with the pinned torch and transformers from PyPI (HF_VENV, default
# ~/.cache/wallfacer/hf-venv), creating it on first use with
# `tests/golden/gen_hf_fixtures.py --make-venv` (CPU-only: torch's wheel without its CUDA packages).
venv=${HF_VENV:-$HOME/.cache/wallfacer/hf-venv}
if ! "$venv/bin/python" -c 'import torch, transformers' 2>/dev/null; then
  echo "creating $venv with torch and transformers from PyPI (once)"
  python3 "$(dirname "${BASH_SOURCE[0]}")/../tests/golden/gen_hf_fixtures.py" --make-venv "$venv"
fi
