#!/usr/bin/env bash
# The library's modules depend on each other one way (docs/library.md, "Modules"): every
# `#include "wallfacer/MODULE/..."` under src/wallfacer/M names M itself or a module M may use.
set -u
src=$1/src/wallfacer
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
[ $fail -eq 0 ] && echo "layering: ok (${#allowed[@]} modules)"
exit $fail
