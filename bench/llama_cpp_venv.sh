# Sourced by the benchmarks that compare with llama.cpp (bench/generate_vs_llama_cpp.sh): sets
# venv to a virtual environment with llama-cpp-python (which builds llama.cpp from source for this
# CPU, about 10 minutes on 2 cores) and the gguf package from PyPI (LLAMA_CPP_VENV, default
# ~/.cache/wallfacer/llama-cpp-venv), creating it on first use.
venv=${LLAMA_CPP_VENV:-$HOME/.cache/wallfacer/llama-cpp-venv}
if ! "$venv/bin/python" -c 'import llama_cpp, gguf, numpy' 2>/dev/null; then
  echo "creating $venv with llama-cpp-python and gguf from PyPI (builds llama.cpp, once)"
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet 'llama-cpp-python==0.3.36' 'gguf>=0.10' numpy safetensors
fi
