#!/usr/bin/env bash
# bench/documents_count.sh and bench/documents_count_table.py (docs/documents.md, "Imbalance and
# wire"): the script records every case (7 strategies x causal/full x no documents / documents in
# the strategy's layout / in the balanced layout) with its command; the values of the cases without
# documents match the closed forms worked out here (contiguous causal ring: max / mean of the
# ranks' kept pairs; a ring's forward bytes: P - 1 K,V blocks; Ulysses: no p2p); the table takes
# each case's last line, shows "-" for a missing case, and its rows are checked against made-up
# lines; bad options and an empty results file exit 2 with one line.
set -u
wf=$1 src=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail=0
err() { echo "FAIL: $*"; fail=1; }
export WALLFACER=$wf

# A small shape: P = 4, S = 2048, 4 heads of 16, 6 documents.
out=$work/c.jsonl
"$src/bench/documents_count.sh" --ranks 4 --seq 2048 --heads 4 --head-dim 16 --docs 6 --seed 1 \
  --out "$out" >"$work/log" 2>&1 || err "documents_count.sh failed: $(cat "$work/log")"
python3 - "$out" "$wf" <<'PY' || fail=1
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
assert len(rows) == 42, f"{len(rows)} lines, expected 42 (7 strategies x 2 masks x 3 cases)"
P, S, H, D = 4, 2048, 4, 16
n = S // P
seen = set()
for r in rows:
    c = r["command"]
    assert r["run"] == "documents_count" and c.startswith(sys.argv[2] + " attn --count 4 "), c
    assert "--json" in c.split() and r["P"] == P and r["seq"] == S, c
    docs = "--docs-random 6 --seed 1" in c
    assert r["docs"]["count"] == (6 if docs else 1), (c, r["docs"])
    assert r["layout"] == ("balanced" if "--layout balanced" in c else "strategy"), c
    assert not ("--layout balanced" in c and not docs), c
    seen.add((r["strategy"], r["C"], r["ulysses"], r["causal"], docs, r["layout"]))
    if docs:
        continue
    if not r["causal"]:
        assert abs(r["work_imbalance"] - 1) < 1e-12, (c, r["work_imbalance"])
    if r["strategy"] == "ring" and r["ulysses"] == 1:
        # rank P - 1 computes (P - 1) n^2 + n (n + 1) / 2 pairs, the mean S (S + 1) / 2 / P
        want = ((P - 1) * n * n + n * (n + 1) / 2) / (S * (S + 1) / 2 / P) if r["causal"] else 1
        assert abs(r["work_imbalance"] - want) < 1e-12, (c, r["work_imbalance"], want)
        want_bytes = (P - 1) * n * H * D * 4 * 2  # P - 1 blocks of K and V, fp32
        assert r["bytes"]["p2p_fwd"] == want_bytes, (c, r["bytes"], want_bytes)
    if r["strategy"] == "ulysses":
        assert r["bytes"]["p2p_fwd"] == 0 and r["bytes"]["coll_fwd"] > 0, (c, r["bytes"])
assert len(seen) == 42, f"{len(seen)} distinct cases, expected 42"
PY
table=$(python3 "$src/bench/documents_count_table.py" "$out") || err "table failed: $table"
[ "$(grep -c '^| causal \|^| full ' <<<"$table")" -eq 14 ] || err "table rows: $table"
# The causal ring without documents: 1.749634... and 3 blocks of 512 x 4 x 16 x 4 x 2 bytes
grep -q '^| causal | ring | 1.750 | [0-9.]* | [0-9.]* | 0.8 / [0-9.]* | 0.8 |$' <<<"$table" ||
  err "causal ring row: $(grep '^| causal | ring ' <<<"$table")"
# shellcheck disable=SC2016  # the backticks are text
grep -q '(`--docs-random 6 --seed 1`)' <<<"$table" || err "the documents line: $table"

# Made-up lines: the last line of a case wins, a missing case is "-".
python3 - "$work/m.jsonl" <<'PY'
import json, sys
base = {"P": 8, "seq": 65536, "heads": 8, "head_dim": 64, "dtype": "fp32", "C": 2,
        "strategy": "wallfacer", "ulysses": 1, "causal": True, "commit": "abc",
        "docs": {"count": 1, "longest": 65536, "kept": 1.0}}
cmd = "build/wallfacer attn --count 8 --strategy wallfacer --teams 2 --causal"
docs = {"count": 16, "longest": 34135, "kept": 0.3212}
lines = [
    {**base, "command": cmd, "layout": "strategy", "work_imbalance": 1.0,
     "bytes": {"p2p_fwd": 134217728}},
    {**base, "command": cmd + " --docs-random 16 --seed 1", "layout": "strategy", "docs": docs,
     "work_imbalance": 1.5, "bytes": {"p2p_fwd": 100000000}},
    {**base, "command": cmd + " --docs-random 16 --seed 1", "layout": "strategy", "docs": docs,
     "work_imbalance": 1.6884, "bytes": {"p2p_fwd": 134217728}, "commit": "def"},
    {**base, "command": cmd + " --docs-random 16 --seed 1", "layout": "balanced", "docs": docs,
     "work_imbalance": 1.0415, "bytes": {"p2p_fwd": 134200000}, "causal": False,
     "strategy": "ring", "C": 1, "ulysses": 2},
]
with open(sys.argv[1], "w") as o:
    o.writelines(json.dumps(l) + "\n" for l in lines)
PY
table=$(python3 "$src/bench/documents_count_table.py" "$work/m.jsonl") || err "table failed"
want='| causal | wallfacer C=2 | 1.000 | 1.688 | - | 134.2 / 134.2 | - |
| full | ulysses 2 x ring | - | - | 1.042 | - / - | 134.2 |'
[[ $(grep '^| causal \|^| full ' <<<"$table") == "$want" ]] || err "made-up rows: $table"
# shellcheck disable=SC2016
last='P = 8, S = 65,536, 8 heads of 64 (fp32); 16 documents (`--docs-random 16 --seed 1`), the longest 34,135 positions, keeping 32.1 % of the mask'"'"'s pairs (causal and full). Commits abc, def.'
[[ $(tail -1 <<<"$table") == "$last" ]] || err "made-up last line: $(tail -1 <<<"$table")"

# Bad input: one line, exit 2.
: >"$work/empty.jsonl"
msg=$(python3 "$src/bench/documents_count_table.py" "$work/empty.jsonl" 2>&1); rc=$?
[[ $rc -eq 2 && $(wc -l <<<"$msg") -eq 1 && $msg == *"holds no results"* ]] ||
  err "empty results: exit $rc: $msg"
msg=$("$src/bench/documents_count.sh" --bogus 1 2>&1); rc=$?
[[ $rc -eq 2 && $(wc -l <<<"$msg") -eq 1 && $msg == *"unknown option '--bogus'"* ]] ||
  err "unknown option: exit $rc: $msg"
msg=$(WALLFACER=$work/none "$src/bench/documents_count.sh" --out "$work/x.jsonl" 2>&1); rc=$?
[[ $rc -eq 2 && $(wc -l <<<"$msg") -eq 1 && $msg == *"not found"* && ! -e $work/x.jsonl ]] ||
  err "missing wallfacer: exit $rc: $msg"

[ $fail -eq 0 ] && echo "ok: documents_count.sh records every case; the table reads them"
exit $fail
