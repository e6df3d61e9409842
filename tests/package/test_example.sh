#!/usr/bin/env bash
# examples/attention as a user builds it: the build installed into a temporary prefix, the
# example configured with find_package(wallfacer) in a temporary folder, built, and run on 2 and
# 4 ranks (every configuration it runs must match the single-process kernel); then built again
# with pkg-config's flags and run on 2 ranks.
# Usage: test_example.sh BUILD_DIR SOURCE_DIR MPIRUN (tests/mpirun.sh)
set -u
build=$1 src=$2 mpiexec=$3
source "$(dirname "$0")/common.sh"

cmake -S "$src/examples/attention" -B "$tmp/example" -DCMAKE_PREFIX_PATH="$prefix" \
  >"$tmp/configure.log" 2>&1 || { cat "$tmp/configure.log"; echo "FAIL: configure"; exit 1; }
cmake --build "$tmp/example" -j 2 >"$tmp/build.log" 2>&1 ||
  { cat "$tmp/build.log"; echo "FAIL: build"; exit 1; }
exe=$tmp/example/attention_example
ldd "$exe" | grep -q "$prefix/lib/libwallfacer.so" ||
  err "the example does not load the installed shared library: $(ldd "$exe" | grep wallfacer)"

# Runs `$@` on NP ranks; every configuration line must say ok.
run() {
  local np=$1
  shift
  local out rc
  out=$("$mpiexec" --oversubscribe --bind-to none -np "$np" "$@" 2>&1)
  rc=$?
  echo "$out"
  [ $rc -eq 0 ] || err "$* on $np ranks exited $rc"
  [ "$(echo "$out" | grep -c ' ok; ')" -eq 4 ] || err "$* on $np ranks: not 4 configurations ok"
}
run 2 "$exe"
run 4 "$exe"

export PKG_CONFIG_PATH=$prefix/lib/pkgconfig
if flags=$(pkg-config --cflags --libs wallfacer); then
  # shellcheck disable=SC2086
  c++ -std=c++17 "$src/examples/attention/main.cpp" $flags -Wl,-rpath,"$prefix/lib" \
    -o "$tmp/example_pc" || err "the example does not build with pkg-config's flags: $flags"
  [ -x "$tmp/example_pc" ] && run 2 "$tmp/example_pc"
else
  err "pkg-config wallfacer failed"
fi
[ $fail -eq 0 ] && echo "package example: ok"
exit $fail
