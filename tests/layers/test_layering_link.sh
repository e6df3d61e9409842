#!/usr/bin/env bash
# The linker keeps the layers (cmake/Layers.cmake, docs/architecture.md): every module of
# MODULES_FILE has its layer check built (build/layers/libwallfacer_MODULE_layer.so, linked against
# exactly the modules it may use); objects calling seqpar and kernels (tests/layers/CMakeLists.txt)
# fail to link as modules that may not use them, with the function named, and link as modules
# that may. (Builds the probe targets in BUILD_DIR.)
# Usage: test_layering_link.sh BUILD_DIR MODULES_FILE
set -u
build=$1 modules=$2
fail=0
err() { echo "FAIL: $*"; fail=1; }

n=0
while IFS=: read -r m _; do
  lib=$build/layers/libwallfacer_${m}_layer.so
  [ -f "$lib" ] || err "$lib missing: the layer check of $m is not built (cmake --build $build)"
  n=$((n + 1))
done <"$modules"
[ "$n" -gt 0 ] || err "no module in $modules"

# probe PROBE FUNCTION: layering_PROBE_allowed links, layering_PROBE_forbidden fails on FUNCTION.
probe() {
  local probe=$1 function=$2 out
  out=$(cmake --build "$build" --target "layering_${probe}_allowed" 2>&1) ||
    err "the $probe probe does not link as a module that may use $probe:
$out"
  [ -f "$build/layers/liblayering_${probe}_allowed.so" ] || err "liblayering_${probe}_allowed.so not built"
  if out=$(cmake --build "$build" --target "layering_${probe}_forbidden" 2>&1); then
    err "the $probe probe calls $function but links as a module that may not use $probe"
  elif ! echo "$out" | grep -E 'undefined reference|DSO missing' | grep -qF "$function"; then
    err "the forbidden $probe link failed, but not on $function:
$out"
  else
    echo "$probe: $(echo "$out" | grep -m1 -E 'undefined reference|DSO missing' | sed 's/^.*: //')"
  fi
}
probe seqpar wallfacer::seqpar::local_positions
probe kernels wallfacer::kernels::attn_fwd
[ $fail -eq 0 ] && echo "layering_link: ok ($n module layer checks built; calls outside the layers fail to link)"
exit $fail
