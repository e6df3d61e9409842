#!/usr/bin/env bash
# The measured errors of docs/numerics.md, as JSON lines on stdout:
#
#   bench/numerics_errors.sh > docs/data/numerics-errors.jsonl
#
# The bf16 runs of the MPI tests (test_seqpar_mpi bf16) at P = 1, 2, 4, 8, on the kernels' own
# bf16 path and, where the CPU has AVX512-BF16, on the portable one too: the errors each
# configuration printed against the fp64 reference and against the same attention on one rank.
# Each line holds the command, the commit, the load average before and after and whether the CPU
# has AVX512-BF16 (where it does not, the kernels' own path is the portable one).
# bench/numerics_table.py prints the tables from it. Build first (make build).
set -euo pipefail
cd "$(dirname "$0")/.."
[[ $# -eq 0 ]] || { echo "numerics_errors.sh: takes no arguments (see the comment at the top)" >&2; exit 2; }
mpi=build/tests/mpi/test_seqpar_mpi
[[ -x $mpi ]] || { echo "numerics_errors.sh: $mpi not found: run make build" >&2; exit 2; }
commit=$(git rev-parse --short HEAD)
avx512_bf16=false
grep -qw avx512_bf16 /proc/cpuinfo && avx512_bf16=true
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
load() { cut -d' ' -f1 /proc/loadavg; }

# emit KIND COMMAND LOAD0 OUTPUT-FILE PATH: one JSON line of the errors in the test's output.
emit() {
  python3 - "$1" "$2" "$commit" "$3" "$(load)" "$avx512_bf16" "$4" "${5:-}" <<'PY'
import json, re, sys
kind, cmd, commit, load0, load1, avx, path, bf16_path = sys.argv[1:]
text = open(path).read()
line = {"kind": kind, "command": cmd, "commit": commit, "load": [float(load0), float(load1)],
        "avx512_bf16": avx == "true"}
if kind == "mpi":
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
print(json.dumps(line, sort_keys=True))
PY
}

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
