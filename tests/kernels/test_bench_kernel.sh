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
        "fwd_ratio", "bwd_ratio", "batch", "threads", "peak_rss_bytes", "blas_core", "sgemm", "isa",
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
    assert bf16["bf16_path"] in ("amx", "avx512", "portable"), bf16
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

# Packed documents: one row per mask, the kept fraction counted exactly (documents of 100 and 156
# positions keep (100^2 + 156^2) / 256^2 of the full mask's pairs), and a passing spot check.
out=$("$wf" bench kernel --docs 100,156 --heads 2 --head-dim 16 --iters 1 --full --json) ||
  err "--docs: exit $?"
echo "$out"
echo "$out" | python3 -c '
import json, sys
rows = [json.loads(l) for l in sys.stdin if l.strip()]
assert len(rows) == 1, rows
r = rows[0]
assert r["seq"] == 256 and r["docs"] == 2 and r["longest_doc"] == 156, r
assert abs(r["kept_fraction"] - (100**2 + 156**2) / 256**2) < 1e-12, r
assert r["check_err"] <= r["check_tol"], r
for k in ("fwd_ms", "fwd_docs_ms", "bwd_ms", "bwd_docs_ms", "fwd_speedup", "bwd_speedup"):
    assert r[k] > 0, k
print("bench kernel --docs: ok")' || err "--docs json"
# The bf16 kernels with documents: one row per dtype, each spot check passing.
out=$("$wf" bench kernel --docs 100,156 --heads 2 --head-dim 16 --iters 1 --causal --dtype both \
  --json) || err "--docs --dtype both: exit $?"
echo "$out"
echo "$out" | python3 -c '
import json, sys
rows = [json.loads(l) for l in sys.stdin if l.strip()]
assert [r["dtype"] for r in rows] == ["fp32", "bf16"], rows
for r in rows:
    assert r["causal"] and r["docs"] == 2 and r["check_err"] <= r["check_tol"], r
print("bench kernel --docs --dtype both: ok")' || err "--docs --dtype both json"
text=$("$wf" bench kernel --docs-random 7 --seed 3 --seq 300 --heads 1 --head-dim 16 --iters 1) ||
  err "--docs-random: exit $?"
echo "$text"
[ "$(echo "$text" | grep -v '^#' | grep -c ' 7 ')" -eq 2 ] || err "expected two rows of 7 documents"

for bad in "--seq 0" "--head-dim 300" "--heads 0" "--dtype fp16" "--docs 100,0,28" \
    "--docs 100,28 --seq 64" "--docs 64 --docs-random 2" \
    "--docs-random 100 --seq 64"; do
  msg=$("$wf" bench kernel $bad --iters 1 2>&1 >/dev/null); rc=$?
  [ $rc -eq 2 ] || err "bench kernel $bad exited $rc, expected 2"
  [ "$(echo "$msg" | wc -l)" -eq 1 ] || err "bench kernel $bad: not one line: $msg"
done
exit $fail
