#!/usr/bin/env bash
# wallfacer plan answers for every shipped cluster and model with the documented JSON, and bad
# input gives one line and exit code 2.
set -u
wf=$1
src=$2
fail=0
err() { echo "FAIL: $*"; fail=1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

for c in "$src"/configs/clusters/*.toml; do
  for m in "$src"/configs/models/*.toml; do
    for seq in 64K 131072; do
      "$wf" plan --cluster "$c" --model "$m" --seq $seq --gpus 1 >/dev/null ||
        err "plan $(basename "$c") $(basename "$m") --gpus 1 exited $?"
    done
  done
done

for c in a100-40gb-16x2-eth100 a100-40gb-8x4-eth100 h100-80gb-8x8-ib; do
  for m in gpt-3b gpt-7b dit-1b; do
    out="$tmp/$c-$m.json"
    "$wf" plan --cluster "$src/configs/clusters/$c.toml" --model "$src/configs/models/$m.toml" \
      --seq 128K --gpus 32 --json >"$out" || { err "plan $c $m exited $?"; continue; }
    python3 - "$out" <<'PY' || err "plan $c $m: bad JSON"
import json, sys
j = json.load(open(sys.argv[1]))
keys = ["strategy", "teams", "placement", "tokens_per_s", "step_s", "memory_gib", "feasible", "reason"]
assert j["configs"], "no configs"
for c in j["configs"]:
    for k in keys:
        assert k in c, k
feasible = [c for c in j["configs"] if c["feasible"]]
assert feasible and j["best"] == feasible[0], "best is not the first feasible"
rates = [c["tokens_per_s"] for c in feasible]
assert rates == sorted(rates, reverse=True), "not ranked"
for c in j["configs"]:
    assert c["feasible"] or c["reason"], "infeasible without reason"
labels = {c["label"] for c in j["configs"]}
for want in ["ring", "wallfacer C=2 team-intra", "wallfacer C=4 team-intra"]:
    assert want in labels, want
PY
  done
done
"$wf" plan --cluster "$src/configs/clusters/h100-80gb-8x8-ib.toml" \
  --model "$src/configs/models/gpt-7b.toml" --seq 64K | grep -q "wallfacer C=2" ||
  err "table misses wallfacer C=2"

expect2() {  # expect2 WHAT ARGS...: exit 2 and one line naming WHAT
  local what=$1; shift
  out=$("$wf" plan "$@" 2>&1 </dev/null); rc=$?
  [ $rc -eq 2 ] || err "plan $*: exit $rc, expected 2 ($out)"
  [ "$(echo "$out" | wc -l)" -eq 1 ] || err "plan $*: more than one line: $out"
  echo "$out" | grep -q -- "$what" || err "plan $*: error does not mention '$what': $out"
}
C="$src/configs/clusters/a100-40gb-8x4-eth100.toml"
M="$src/configs/models/gpt-3b.toml"
expect2 "--seq N" --cluster "$C" --model "$M"
expect2 "no/such.toml" --cluster no/such.toml --model "$M" --seq 64K
expect2 "--seq" --cluster "$C" --model "$M" --seq 64Q
expect2 "--gpus" --cluster "$C" --model "$M" --seq 64K --gpus 33
printf 'name = "x"\n[nodes]\ncount = 1\ndevices_per_node = 2\n' >"$tmp/bad.toml"
expect2 "device" --cluster "$tmp/bad.toml" --model "$M" --seq 64K
expect2 "model" --cluster "$C" --model "$C" --seq 64K

[ $fail -eq 0 ] && echo "plan cli: ok"
exit $fail
