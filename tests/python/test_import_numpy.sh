#!/usr/bin/env bash
# `import wallfacer` under an interpreter whose `import numpy` fails: one ModuleNotFoundError that
# names the interpreter and what to install, not a bare "No module named 'numpy'". NumPy is hidden
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
mkdir -p "$tmp/shim/numpy" "$tmp/other"
echo 'raise ModuleNotFoundError("No module named '"'numpy'"'", name="numpy")' \
  >"$tmp/shim/numpy/__init__.py"
exe=$("$python" -c 'import sys; print(sys.executable)')

# run LABEL PYTHONPATH: the last line of `import wallfacer`'s error; it must fail.
run() {
  local out
  out=$(PYTHONPATH="$tmp/shim:$2" "$python" -c 'import wallfacer' 2>&1) && err "$1: import succeeded"
  echo "$out" | tail -n 1
}

# expect LABEL PYTHONPATH WANT...: the error's last line holds every WANT.
expect() {
  local label=$1 path=$2 line want
  shift 2
  line=$(run "$label" "$path")
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
[ $fail -eq 0 ] && echo "import without numpy: ok"
exit $fail
