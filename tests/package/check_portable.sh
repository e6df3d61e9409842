#!/usr/bin/env bash
# The library runs on any x86-64 CPU: in the static library, only the functions of the kernels'
# wider instruction-set levels (namespaces wallfacer::kernels::avx2 and ::avx512,
# src/wallfacer/kernels/isa.h) use instructions beyond x86-64 (VEX/EVEX-encoded: ymm, zmm, mask
# registers, any v-prefixed instruction). And those levels are really built: avx512 uses zmm
# registers, avx2 ymm registers and no AVX-512.
# The one other exception: a source named *_avx512.cpp or *_amx.cpp is compiled with its own -m
# flags and called only when the CPU reports the feature (kernels/bf16_gemm.h). It may use wider instructions, but
# must define no weak symbol (an inline function or template the linker could pick for the rest
# of the library): only functions of its own, static or with names of their own. (The generated
# per-level files, *_cpp_avx512.cpp, are not such sources.)
# Usage: check_portable.sh OBJDUMP LIBRARY.a
set -u
objdump=$1 lib=$2
nm=${objdump%objdump}nm
fail=0
weak=$("$nm" -A "$lib" 2>/dev/null | awk '$1 ~ /_(avx512|amx)\.cpp\.o:/ && $1 !~ /_cpp_avx512\.cpp\.o:/ && ($2 == "W" || $2 == "V") && $3 !~ /^DW\.ref\./')
if [ -n "$weak" ]; then
  echo "FAIL: weak symbols in a *_avx512.cpp or *_amx.cpp object (built with wider -m flags):"
  echo "$weak"
  fail=1
fi
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
    if (obj ~ /_(avx512|amx)\.cpp\.o:$/ && obj !~ /_cpp_avx512\.cpp\.o:$/) { cpuid_chosen++; next }
    outside[obj " " fn]++
  }
  END {
    fail = 0
    for (k in outside) { print "FAIL: instructions beyond x86-64 in " k " (" outside[k] ")"; fail = 1 }
    for (k in bad2) { print "FAIL: AVX-512 in the avx2 level: " k; fail = 1 }
    if (zmm512 == 0) { print "FAIL: the avx512 level uses no zmm register"; fail = 1 }
    if (ymm2 == 0) { print "FAIL: the avx2 level uses no ymm register"; fail = 1 }
    if (!fail) printf "portable code: ok (avx512 level: %d zmm instructions, avx2 level: %d ymm, *_avx512.cpp and *_amx.cpp: %d)\n", zmm512, ymm2, cpuid_chosen
    exit fail
  }' || fail=1
exit $fail
