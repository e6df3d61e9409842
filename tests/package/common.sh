# Sourced by the package tests: failure counting and the build installed into a temporary prefix
# of the test's own, removed at exit. Sets $tmp and $prefix; needs $build.
fail=0
err() { echo "FAIL: $*"; fail=1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
prefix=$tmp/prefix
cmake --install "$build" --prefix "$prefix" >"$tmp/install.log" 2>&1 ||
  { cat "$tmp/install.log"; echo "FAIL: cmake --install $build --prefix $prefix"; exit 1; }
