#!/usr/bin/env bash
# `import wallfacer` under an interpreter whose `import numpy` fails: one ModuleNotFoundError that
# names the interpreter and what to install, not a bare "No module named 'numpy'" (and the same for
# PyTorch and `import wallfacer.torch`). NumPy is hidden
# by a package `numpy` on PYTHONPATH that raises ModuleNotFoundError. Twice: as the interpreter the
# build found (install python3-numpy), and as another one (a copy of the package whose recorded
# interpreter is elsewhere: run that one, or pip install numpy into this one).
#
#   test_import_numpy.sh PYTHON BUILD_PYTHON_DIR
set -u
python=$1
pkg=$2
fail=0
err() { echo "FAIL: $*"; fail=1; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/wallfacer-numpy.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
for m in numpy torch; do
  mkdir -p "$tmp/shim-$m/$m"
  echo "raise ModuleNotFoundError(\"No module named '$m'\", name=\"$m\")" >"$tmp/shim-$m/$m/__init__.py"
done
mkdir -p "$tmp/other"
exe=$("$python" -c 'import sys; print(sys.executable)')

# run LABEL PYTHONPATH [MODULE]: the last line of `import MODULE`'s error (default wallfacer, numpy
# hidden; wallfacer.torch: torch hidden); it must fail.
run() {
  local out module=${3:-wallfacer} hidden=numpy
  [ "$module" = wallfacer.torch ] && hidden=torch
  out=$(PYTHONPATH="$tmp/shim-$hidden:$2" "$python" -c "import $module" 2>&1) &&
    err "$1: import succeeded"
  echo "$out" | tail -n 1
}

# expect LABEL PYTHONPATH[:MODULE] WANT...: the error's last line holds every WANT.
expect() {
  local label=$1 path=${2%%:*} module= line want
  [[ $2 == *:* ]] && module=${2#*:}
  shift 2
  line=$(run "$label" "$path" "$module")
  echo "$line"
  for want in "$@"; do
    case $line in *"$want"*) ;; *) err "$label: no '$want' in: $line" ;; esac
  done
}

expect "the build's interpreter" "$pkg" "ModuleNotFoundError: wallfacer needs NumPy" \
  "this interpreter, $exe" "apt-get install python3-numpy"

cp -r "$pkg/wallfacer" "$tmp/other/"
printf 'PYTHON = "/opt/elsewhere/bin/python3"\nVERSION = "3.99"\n' >"$tmp/other/wallfacer/_build_info.py"
expect "another interpreter" "$tmp/other" "this interpreter, $exe" \
  "run the interpreter the build found, /opt/elsewhere/bin/python3 (Python 3.99" \
  "$exe -m pip install numpy"
# PyTorch for wallfacer.torch, the same way.
expect "wallfacer.torch without torch" "$pkg:wallfacer.torch" \
  "ModuleNotFoundError: wallfacer needs PyTorch" "apt-get install python3-torch"
[ $fail -eq 0 ] && echo "import without numpy: ok"
exit $fail
