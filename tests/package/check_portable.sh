#!/usr/bin/env bash
# The library runs on any x86-64 CPU: in the static library, only the functions of the kernels'
# wider instruction-set levels (namespaces wallfacer::kernels::avx2 and ::avx512,
# src/wallfacer/kernels/isa.h) use instructions beyond x86-64 (VEX/EVEX-encoded: ymm, zmm, mask
# registers, any v-prefixed instruction). And those levels are really built: avx512 uses zmm
# registers, avx2 ymm registers and no AVX-512.
# Usage: check_portable.sh OBJDUMP LIBRARY.a
set -u
objdump=$1 lib=$2
"$objdump" -d --no-show-raw-insn "$lib" | awk '
  /^[^ ]+:[ ]+file format/ { obj = $1; next }
  /^[0-9a-f]+ <.*>:$/ { fn = substr($2, 2, length($2) - 3); next }
  {
    n = split($0, f, "\t"); if (n < 2) next
    ins = f[2]; sub(/^ +/, "", ins)
    wide = ins ~ /^v/ || ins ~ /%[yz]mm|%k[0-7]/
    if (!wide) next
    if (fn ~ /9wallfacer7kernels6avx512/) { if (ins ~ /%zmm/) zmm512++; next }
    if (fn ~ /9wallfacer7kernels4avx2/) { if (ins ~ /%ymm/) ymm2++; if (ins ~ /%zmm|%k[0-7]/) bad2[fn]++; next }
    outside[obj " " fn]++
  }
  END {
    fail = 0
    for (k in outside) { print "FAIL: instructions beyond x86-64 in " k " (" outside[k] ")"; fail = 1 }
    for (k in bad2) { print "FAIL: AVX-512 in the avx2 level: " k; fail = 1 }
    if (zmm512 == 0) { print "FAIL: the avx512 level uses no zmm register"; fail = 1 }
    if (ymm2 == 0) { print "FAIL: the avx2 level uses no ymm register"; fail = 1 }
    if (!fail) printf "portable code: ok (avx512 level: %d zmm instructions, avx2 level: %d ymm)\n", zmm512, ymm2
    exit fail
  }'
