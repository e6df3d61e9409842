# Sourced by the benchmarks that compare with PyTorch (bench/gpt_vs_torch.sh, bench/kernels.sh):
# sets venv to a virtual environment with PyTorch 2.x from PyPI (TORCH_VENV, default
# ~/.cache/wallfacer/torch-venv), creating it on first use. The PyPI wheel also pulls CUDA libraries
# that a CPU run does not use: about 4 GB of downloads, 5 GB on disk.
venv=${TORCH_VENV:-$HOME/.cache/wallfacer/torch-venv}
if ! "$venv/bin/python" -c 'import torch, sys; sys.exit(int(torch.__version__.split(".")[0]) < 2)' 2>/dev/null; then
  echo "creating $venv with PyTorch 2.x from PyPI (about 4 GB to download, once)"
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet 'torch>=2' numpy
fi
