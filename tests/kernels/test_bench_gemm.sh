#!/usr/bin/env bash
# `wallfacer bench gemm --json` prints one JSON object per shape and product (fwd, dinp, dweight)
# with the documented keys and passing spot checks; WALLFACER_BF16_PATH=portable is named in the
# header; bad values exit 2 with one line.
set -u
wf=$1
fail=0
err() { echo "FAIL: $*"; fail=1; }

out=$("$wf" bench gemm --rows 131 --channels 33 --out 65 7 --iters 1 --json) || err "exit $?"
echo "$out"
python3 - "$out" <<'PY' || fail=1
import json, sys
lines = [l for l in sys.argv[1].splitlines() if l.strip()]
assert len(lines) == 6, f"expected 2 shapes x 3 products, got {len(lines)}"
keys = ["rows", "channels", "out", "product", "threads", "iters", "fp32_ms", "fp32_gflops",
        "bf16_ms", "bf16_gflops", "ratio", "bf16_path", "check_err_bf16", "check_err_fp32"]
seen = set()
for l in lines:
    j = json.loads(l)
    missing = [k for k in keys if k not in j]
    assert not missing, f"missing keys {missing}"
    assert (j["rows"], j["channels"]) == (131, 33), j
    flops = 2 * 131 * 33 * j["out"]
    for d in ["fp32", "bf16"]:
        assert j[d + "_gflops"] > 0, j
        assert abs(j[d + "_gflops"] - flops / (j[d + "_ms"] * 1e-3) * 1e-9) < 1e-6 * j[d + "_gflops"]
    assert abs(j["ratio"] - j["bf16_gflops"] / j["fp32_gflops"]) < 1e-9 * j["ratio"]
    assert 0 < j["check_err_bf16"] <= 1.5 / 256, j["check_err_bf16"]
    assert j["check_err_fp32"] <= 2.0 ** -16, j["check_err_fp32"]
    seen.add((j["out"], j["product"]))
assert seen == {(oc, p) for oc in (65, 7) for p in ("fwd", "dinp", "dweight")}, seen
print("bench gemm json: ok")
PY

text=$(WALLFACER_BF16_PATH=portable "$wf" bench gemm --rows 64 --channels 16 --out 24 --iters 1) ||
  err "WALLFACER_BF16_PATH=portable: exit $?"
echo "$text"
echo "$text" | grep -q "bf16 (portable path)" || err "the header does not name the portable path"
echo "$text" | grep -q "^# check: .* ok$" || err "no passing check line"
[ "$(echo "$text" | grep -vc '^#')" -eq 3 ] || err "expected three product rows"

for bad in "--rows 0" "--channels 0" "--out 0" "--iters -1"; do
  msg=$("$wf" bench gemm $bad 2>&1 >/dev/null); rc=$?
  [ $rc -eq 2 ] || err "bench gemm $bad exited $rc, expected 2"
  [ "$(echo "$msg" | wc -l)" -eq 1 ] || err "bench gemm $bad: not one line: $msg"
done
msg=$(WALLFACER_BF16_PATH=fast "$wf" bench gemm --rows 8 --out 8 --iters 1 2>&1 >/dev/null); rc=$?
[ $rc -eq 2 ] || err "WALLFACER_BF16_PATH=fast exited $rc, expected 2"
echo "$msg" | grep -q "WALLFACER_BF16_PATH must be" || err "WALLFACER_BF16_PATH=fast: $msg"
exit $fail
