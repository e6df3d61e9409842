#!/usr/bin/env bash
# The library's modules depend on each other one way (docs/library.md, "Modules"): every
# `#include "wallfacer/MODULE/..."` under src/wallfacer/M names M itself or a module M may use.
# With MODULES_FILE (build/wallfacer_modules.txt, "M: USES..." as the module libraries declare
# them, cmake/Layers.cmake): every module library links exactly the modules of this table.
# Usage: test_layering.sh SOURCE_DIR [MODULES_FILE]
set -u
src=$1/src/wallfacer
modules=${2:-}
fail=0
declare -A allowed=(
  [core]="core"
  [kernels]="core kernels"
  [comm]="core comm"
  [seqpar]="core kernels comm seqpar"
  [model]="core kernels comm seqpar model"
  [train]="core kernels comm seqpar model train"
  [plan]="core seqpar plan"
  [bench]="core kernels bench"
  [tune]="core kernels comm seqpar model train plan tune"
)
for m in "${!allowed[@]}"; do
  [ -d "$src/$m" ] || { echo "FAIL: no module $m under $src"; fail=1; continue; }
  while IFS=: read -r file used; do
    case " ${allowed[$m]} " in
      *" $used "*) ;;
      *) echo "FAIL: $file includes wallfacer/$used/, which $m may not use (it may use: ${allowed[$m]})"
         fail=1 ;;
    esac
  done < <(grep -rEo '#include "wallfacer/[a-z_]+/' "$src/$m" | sed -E 's|#include "wallfacer/([a-z_]+)/|\1|')
done
for d in "$src"/*/; do
  m=$(basename "$d")
  [ -n "${allowed[$m]+x}" ] || { echo "FAIL: module $m has no entry in $0"; fail=1; }
done
if [ -n "$modules" ] && [ ! -f "$modules" ]; then
  echo "FAIL: $modules missing: configure the build (cmake --preset release)"
  fail=1
elif [ -n "$modules" ]; then
  # The modules a list names besides M, sorted.
  others() { echo "$2" | tr ' ' '\n' | grep -vx -e "$1" -e '' | sort | tr '\n' ' '; }
  declare -A declared=()
  while IFS=: read -r m uses; do
    declared[$m]=$(others "$m" "$uses")
  done <"$modules"
  for m in "${!allowed[@]}"; do
    want=$(others "$m" "${allowed[$m]}")
    if [ -z "${declared[$m]+x}" ]; then
      echo "FAIL: module $m has no library in $modules (wallfacer_module, src/wallfacer/CMakeLists.txt)"
      fail=1
    elif [ "${declared[$m]}" != "$want" ]; then
      echo "FAIL: the library of $m links [ ${declared[$m]}] but $m may use [ $want]"
      fail=1
    fi
  done
  for m in "${!declared[@]}"; do
    [ -n "${allowed[$m]+x}" ] || { echo "FAIL: module library $m has no entry in $0"; fail=1; }
  done
fi
[ $fail -eq 0 ] && echo "layering: ok (${#allowed[@]} modules${modules:+, their libraries as declared})"
exit $fail
