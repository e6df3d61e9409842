#!/usr/bin/env bash
# Traces through the CLI (docs/trace.md): attn --trace on every strategy passes
# tests/cli/check_trace.py and trace-plot draws it; plan --trace writes the predicted run of the
# best or a named configuration in the same format; bad input (an unwritable path, an unknown
# configuration, a file that is not a trace) exits non-zero with one line and leaves nothing; text
# from a trace's metadata reaches gnuplot as text, never as a command.
set -u
wf=$1
mpirun=$2
src=$3
work=$4
rm -rf "$work" && mkdir -p "$work"
fail=0
err() { echo "FAIL: $*"; fail=1; }
check="python3 $(dirname "$0")/check_trace.py"
run() { OMP_NUM_THREADS=1 "$mpirun" -q --oversubscribe --bind-to none -np "$@"; }
png() { [ "$(head -c 4 "$1" | tail -c 3)" = "PNG" ]; }

for s in "ring" "zigzag" "ulysses" "wallfacer --teams 2" "zigzag --ulysses 2"; do
  f="$work/attn-${s// /_}.json"
  out=$(run 4 "$wf" attn --strategy $s --seq 256 --heads 4 --head-dim 8 --causal --iters 2 \
    --trace "$f" 2>&1) || err "attn $s --trace failed: $out"
  $check "$f" || err "attn $s: trace"
  out=$("$wf" trace-plot "$f" --out "$work/attn.png" 2>&1) || err "trace-plot $s: $out"
  png "$work/attn.png" || err "trace-plot $s wrote no PNG"
done
grep -q '"iteration"' "$work/attn-ring.json" || err "attn: no iteration spans"

# An unwritable path: one line from rank 0, non-zero, nothing written.
out=$(run 4 "$wf" attn --strategy ring --seq 64 --heads 2 --head-dim 8 \
  --trace "$work/no/such/dir/t.json" 2>&1); rc=$?
[ $rc -ne 0 ] || err "attn --trace to a missing directory exited 0"
[ "$(echo "$out" | wc -l)" -eq 1 ] || err "attn --trace to a missing directory: not one line: $out"
echo "$out" | grep -q "cannot write the trace file" || err "attn unwritable --trace: $out"
[ ! -e "$work/no" ] || err "attn unwritable --trace left something"

# The planner's predicted run: the best configuration, then named ones.
plan=("$wf" plan --cluster "$src/configs/clusters/a100-40gb-8x4-eth100.toml"
  --model "$src/configs/models/gpt-3b.toml" --seq 32K --gpus 8)
"${plan[@]}" --trace "$work/best.json" >/dev/null || err "plan --trace failed"
$check "$work/best.json" || err "plan best: trace"
grep -q '"command":"plan"' "$work/best.json" || err "plan --trace: no command in metadata"
for c in "ring" "wallfacer C=2 team-intra" "ulysses2 x zigzag ring-intra"; do
  "${plan[@]}" --trace "$work/plan.json" --config "$c" >/dev/null || err "plan --config '$c'"
  $check "$work/plan.json" || err "plan '$c': trace"
  grep -qF "\"label\":\"$c\"" "$work/plan.json" || err "plan '$c': label not in the metadata"
  "$wf" trace-plot "$work/plan.json" --out "$work/plan.png" >/dev/null || err "trace-plot plan '$c'"
  png "$work/plan.png" || err "trace-plot plan '$c' wrote no PNG"
done
out=$("${plan[@]}" --trace "$work/x.json" --config "spiral" 2>&1); rc=$?
[ $rc -eq 2 ] || err "plan --config spiral exited $rc, expected 2"
[ "$(echo "$out" | wc -l)" -eq 1 ] || err "plan --config spiral: not one line: $out"
echo "$out" | grep -q "'ring'" || err "plan --config spiral does not list the labels: $out"
out=$("${plan[@]}" --trace "$work/no/such/x.json" 2>&1); rc=$?
[ $rc -ne 0 ] && [ "$(echo "$out" | wc -l)" -eq 1 ] || err "plan unwritable --trace: rc $rc: $out"
[ ! -e "$work/no" ] || err "plan unwritable --trace left something"

# A trace whose labels try to run commands through gnuplot: backquotes in the title (substituted
# inside double quotes), a quote that ends a label and calls system() in a host name.
python3 - "$work/plan.json" "$work/evil.json" "$work" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
j["otherData"]["config"]["strategy"] = "`touch %s/pwned-title`" % sys.argv[3]
ranks = 1 + max(e["args"]["rank"] for e in j["traceEvents"] if e["ph"] == "X")
j["otherData"]["hosts"] = ["a' . system('touch %s/pwned-host') . '" % sys.argv[3]] + \
    ["b\nunset output"] * (ranks - 1)
json.dump(j, open(sys.argv[2], "w"))
PY
out=$("$wf" trace-plot "$work/evil.json" --out "$work/evil.png" 2>&1) || err "trace-plot evil: $out"
png "$work/evil.png" || err "trace-plot evil wrote no PNG"
[ ! -e "$work/pwned-title" ] && [ ! -e "$work/pwned-host" ] || err "trace-plot ran a trace's text"

# trace-plot on what is not a trace.
echo "not json" > "$work/bad.json"
out=$("$wf" trace-plot "$work/bad.json" --out "$work/bad.png" 2>&1); rc=$?
[ $rc -eq 2 ] || err "trace-plot of a non-trace exited $rc, expected 2"
[ "$(echo "$out" | wc -l)" -eq 1 ] || err "trace-plot of a non-trace: not one line: $out"
[ ! -e "$work/bad.png" ] || err "trace-plot of a non-trace wrote a PNG"
exit $fail
