#!/usr/bin/env bash
# The measured errors of docs/numerics.md, as JSON lines on stdout:
#
#   bench/numerics_errors.sh [unit] [mpi] [attn] > docs/data/numerics-errors.jsonl
#
# (the parts named, default all three:)
# 1. "unit": the unit tests that compare the kernels with their fp64 reference (fp32 attention,
#    bf16 attention, bf16 dense layers), run with WALLFACER_ERRORS_OUT (tests/unit/measured_errors.h):
#    every error they checked, with the test's tolerance.
# 2. "mpi": the bf16 runs of the MPI tests (test_seqpar_mpi bf16) at P = 1, 2, 4, 8, on the
#    kernels' own bf16 path and, where the CPU has AVX512-BF16, on the portable one too: the errors
#    each configuration printed against the fp64 reference and against the same attention on one
#    rank.
# 3. "attn": `wallfacer attn --dtype bf16 --check --json` for the gradient table (P = 8, S = 2048,
#    H = 4, D = 64; ring and WallFacer C = 2, with H_kv = 4 and 1).
# Each line holds the command, the commit, the load average before and after and whether the CPU
# has AVX512-BF16 (where it does not, the kernels' own path is the portable one).
# bench/numerics_table.py prints the tables from it. Build first (make build).
set -euo pipefail
cd "$(dirname "$0")/.."
parts=("$@")
[[ ${#parts[@]} -gt 0 ]] || parts=(unit mpi attn)
for p in "${parts[@]}"; do
  case "$p" in
    unit | mpi | attn) ;;
    *) echo "numerics_errors.sh: unknown part '$p' (unit, mpi or attn)" >&2; exit 2 ;;
  esac
done
want() { [[ " ${parts[*]} " == *" $1 "* ]]; }
unit=build/tests/wallfacer_unit_tests mpi=build/tests/mpi/test_seqpar_mpi wf=build/wallfacer
need=("$wf")
want unit && need+=("$unit")
want mpi && need+=("$mpi")
for f in "${need[@]}"; do
  [[ -x $f ]] || { echo "numerics_errors.sh: $f not found: run make build" >&2; exit 2; }
done
commit=$(git rev-parse --short HEAD)
avx512_bf16=false
grep -qw avx512_bf16 /proc/cpuinfo && avx512_bf16=true
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
load() { cut -d' ' -f1 /proc/loadavg; }

# emit KIND COMMAND LOAD0 RECORDS-FILE [PATH]: one JSON line.
emit() {
  python3 - "$1" "$2" "$commit" "$3" "$(load)" "$avx512_bf16" "$4" "${5:-}" <<'PY'
import json, re, sys
kind, cmd, commit, load0, load1, avx, path, bf16_path = sys.argv[1:]
text = open(path).read()
line = {"kind": kind, "command": cmd, "commit": commit, "load": [float(load0), float(load1)],
        "avx512_bf16": avx == "true"}
if kind == "unit":
    line["records"] = [json.loads(l) for l in text.splitlines() if l.strip()]
elif kind == "mpi":
    recs = []
    for l in text.splitlines():
        m = re.match(r"^(.+? bf16)\s+err o (\S+) lse (\S+) dq (\S+) dk (\S+) dv (\S+)", l)
        if m:
            recs.append({"config": m.group(1), "against": "fp64",
                         **dict(zip(["O", "LSE", "dQ", "dK", "dV"], map(float, m.groups()[1:])))})
        m = re.match(r"^(.+? bf16)\s+vs P=1: o (\S+) lse (\S+) dq (\S+) dk (\S+) dv (\S+)", l)
        if m:
            recs.append({"config": m.group(1), "against": "P=1",
                         **dict(zip(["O", "LSE", "dQ", "dK", "dV"], map(float, m.groups()[1:])))})
    if not recs or not re.search(r"configurations, 0 failures", text):
        sys.exit(f"numerics_errors.sh: no errors or failures in the output of {cmd}:\n{text[-2000:]}")
    line["bf16_path"] = bf16_path
    line["records"] = recs
else:
    line["output"] = json.loads(text)
print(json.dumps(line, sort_keys=True))
PY
}

# 1. Unit tests.
if want unit; then
  filter='*Attn*:*DenseBf16*'
  l0=$(load)
  WALLFACER_ERRORS_OUT=$tmp/unit.jsonl "$unit" --gtest_filter="$filter" --gtest_brief=1 >&2
  emit unit "WALLFACER_ERRORS_OUT=FILE $unit --gtest_filter='$filter'" "$l0" "$tmp/unit.jsonl"
fi

# 2. MPI tests, bf16.
if want mpi; then
  # The kernels' own bf16 path, and the portable one where that is another (AVX512-BF16).
  paths=(auto)
  $avx512_bf16 && paths+=(portable)
  for path in "${paths[@]}"; do
    for np in 1 2 4 8; do
      l0=$(load)
      WALLFACER_BF16_PATH=$path WALLFACER=$mpi scripts/wallfacer-mpirun "$np" bf16 >"$tmp/mpi.txt"
      emit mpi "WALLFACER_BF16_PATH=$path WALLFACER=$mpi scripts/wallfacer-mpirun $np bf16" "$l0" \
        "$tmp/mpi.txt" "$path"
    done
  done
fi

# 3. The gradient accumulators at P = 8.
if want attn; then
  for cfg in "--strategy ring --kv-heads 4" "--strategy ring --kv-heads 1" \
      "--strategy wallfacer --teams 2 --kv-heads 4" "--strategy wallfacer --teams 2 --kv-heads 1 --causal"; do
    cmd="scripts/wallfacer-mpirun 8 attn $cfg --seq 2048 --heads 4 --head-dim 64 --dtype bf16 --check --json"
    l0=$(load)
    # shellcheck disable=SC2086
    scripts/wallfacer-mpirun 8 attn $cfg --seq 2048 --heads 4 --head-dim 64 --dtype bf16 --check \
      --json >"$tmp/attn.json"
    emit attn "$cmd" "$l0" "$tmp/attn.json"
  done
fi
