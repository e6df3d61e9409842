#!/usr/bin/env bash
# `wallfacer bench kernel --json` prints one JSON object per case with the documented keys, its
# spot check passes, WALLFACER_CPU picks the kernels' level, and bad values exit 2.
set -u
wf=$1
fail=0
err() { echo "FAIL: $*"; fail=1; }

out=$("$wf" bench kernel --seq 128 --heads 2 --head-dim 16 --iters 1 --json) || err "exit $?"
echo "$out"
python3 - "$out" <<'PY' || fail=1
import json, sys
lines = [l for l in sys.argv[1].splitlines() if l.strip()]
assert len(lines) == 2, f"expected 2 cases (full, causal), got {len(lines)}"
keys = ["seq", "heads", "head_dim", "causal", "fwd_gflops", "bwd_gflops", "sgemm_gflops",
        "fwd_ratio", "bwd_ratio", "batch", "threads", "peak_rss_bytes", "blas_core", "isa",
        "check_err"]
seen = set()
for l in lines:
    j = json.loads(l)
    missing = [k for k in keys if k not in j]
    assert not missing, f"missing keys {missing}"
    assert (j["seq"], j["heads"], j["head_dim"]) == (128, 2, 16), j
    for k in ["fwd_gflops", "bwd_gflops", "sgemm_gflops", "peak_rss_bytes"]:
        assert j[k] > 0, f"{k} = {j[k]}"
    assert abs(j["fwd_ratio"] - j["fwd_gflops"] / j["sgemm_gflops"]) < 1e-9 * j["fwd_ratio"] + 1e-12
    assert abs(j["bwd_ratio"] - j["bwd_gflops"] / j["sgemm_gflops"]) < 1e-9 * j["bwd_ratio"] + 1e-12
    assert j["check_err"] < 4e-6, f"spot check error {j['check_err']}"
    seen.add(j["causal"])
assert seen == {False, True}, seen
print("bench kernel json: ok")
PY

# WALLFACER_CPU picks the kernels' instruction set (src/wallfacer/kernels/isa.h).
out=$(WALLFACER_CPU=baseline "$wf" bench kernel --seq 64 --heads 1 --head-dim 16 --iters 1 --causal \
  --json) || err "WALLFACER_CPU=baseline: exit $?"
echo "$out" | grep -q '"isa":"baseline"' || err "WALLFACER_CPU=baseline not reported: $out"
msg=$(WALLFACER_CPU=sse9 "$wf" bench kernel --seq 64 --iters 1 2>&1 >/dev/null); rc=$?
[ $rc -eq 2 ] || err "WALLFACER_CPU=sse9 exited $rc, expected 2"
echo "$msg" | grep -q "WALLFACER_CPU=sse9 is not a level" || err "WALLFACER_CPU=sse9: $msg"

for bad in "--seq 0" "--head-dim 300" "--heads 0"; do
  msg=$("$wf" bench kernel $bad --iters 1 2>&1 >/dev/null); rc=$?
  [ $rc -eq 2 ] || err "bench kernel $bad exited $rc, expected 2"
  [ "$(echo "$msg" | wc -l)" -eq 1 ] || err "bench kernel $bad: not one line: $msg"
done
exit $fail
