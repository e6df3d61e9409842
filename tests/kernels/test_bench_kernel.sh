#!/usr/bin/env bash
# `wallfacer bench kernel --json` prints one JSON object per case (and dtype) with the documented
# keys, its spot checks pass, --dtype both times fp32 and bf16 and gives their ratio, WALLFACER_CPU
# picks the kernels' level, and bad values exit 2.
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
keys = ["seq", "heads", "head_dim", "causal", "dtype", "fwd_gflops", "bwd_gflops", "sgemm_gflops",
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
    assert j["dtype"] == "fp32", j["dtype"]
    seen.add(j["causal"])
assert seen == {False, True}, seen
print("bench kernel json: ok")
PY

out=$("$wf" bench kernel --seq 100 --heads 2 --kv-heads 1 --head-dim 40 --iters 1 --dtype both \
      --json) || err "--dtype both: exit $?"
echo "$out"
python3 - "$out" <<'PY' || fail=1
import json, sys
rows = [json.loads(l) for l in sys.argv[1].splitlines() if l.strip()]
assert len(rows) == 4, f"expected 4 rows (full, causal) x (fp32, bf16), got {len(rows)}"
assert [(r["causal"], r["dtype"]) for r in rows] == [
    (False, "fp32"), (False, "bf16"), (True, "fp32"), (True, "bf16")], rows
for fp32, bf16 in zip(rows[0::2], rows[1::2]):
    assert bf16["bf16_path"] in ("avx512", "portable"), bf16
    assert bf16["check_err"] <= bf16["check_tol"] <= 0.02, bf16
    assert bf16["check_err"] > 1e-5, "bf16 inputs against fp64 cannot agree to fp32 precision"
    for k in ["fwd", "bwd"]:
        want = bf16[f"{k}_gflops"] / fp32[f"{k}_gflops"]
        assert abs(bf16[f"{k}_vs_fp32"] - want) < 1e-9 * want, (k, bf16, fp32)
    assert "fwd_vs_fp32" not in fp32
print("bench kernel --dtype both: ok")
PY

text=$(WALLFACER_BF16_PATH=portable "$wf" bench kernel --seq 64 --heads 1 --head-dim 16 \
       --iters 1 --dtype bf16 --causal) || err "--dtype bf16 (portable): exit $?"
echo "$text"
echo "$text" | grep -q "bf16 tile products portable" || err "the header does not name the path"
[ "$(echo "$text" | grep -v '^#' | grep -c ' bf16 ')" -eq 1 ] || err "expected one bf16 row"

# WALLFACER_CPU picks the kernels' instruction set (src/wallfacer/kernels/isa.h).
out=$(WALLFACER_CPU=baseline "$wf" bench kernel --seq 64 --heads 1 --head-dim 16 --iters 1 --causal \
  --json) || err "WALLFACER_CPU=baseline: exit $?"
echo "$out" | grep -q '"isa":"baseline"' || err "WALLFACER_CPU=baseline not reported: $out"
msg=$(WALLFACER_CPU=sse9 "$wf" bench kernel --seq 64 --iters 1 2>&1 >/dev/null); rc=$?
[ $rc -eq 2 ] || err "WALLFACER_CPU=sse9 exited $rc, expected 2"
echo "$msg" | grep -q "WALLFACER_CPU=sse9 is not a level" || err "WALLFACER_CPU=sse9: $msg"

for bad in "--seq 0" "--head-dim 300" "--heads 0" "--dtype fp16"; do
  msg=$("$wf" bench kernel $bad --iters 1 2>&1 >/dev/null); rc=$?
  [ $rc -eq 2 ] || err "bench kernel $bad exited $rc, expected 2"
  [ "$(echo "$msg" | wc -l)" -eq 1 ] || err "bench kernel $bad: not one line: $msg"
done
exit $fail
