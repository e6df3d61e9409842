#!/usr/bin/env bash
# bench/record.py and the table scripts that read its JSON lines: a result is appended with its
# context (command, commit, load, CPU flags as /proc/cpuinfo has them, OpenBLAS's core as
# `wallfacer bench kernel` reports it); a failing command appends nothing; the tables take medians
# of the rates and of the ratios within each round (checked against values worked out here).
set -u
wf=$1 src=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail=0
err() { echo "FAIL: $*"; fail=1; }
export WALLFACER=$wf

out=$work/r.jsonl
python3 "$src/bench/record.py" "$out" --run probe --round 2 -- \
  python3 -c 'import json; print("a line that is no JSON"); print(json.dumps({"x": 1.5}))' ||
  err "record.py failed"
python3 - "$out" "$src" "$wf" <<'PY' || fail=1
import json, subprocess, sys
out, src, wf = sys.argv[1:]
rows = [json.loads(l) for l in open(out)]
assert len(rows) == 1, f"{len(rows)} lines recorded, expected 1"
r = rows[0]
flags = next(l.split(":", 1)[1].split() for l in open("/proc/cpuinfo") if l.startswith("flags"))
commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=src, capture_output=True,
                        text=True).stdout.strip()
probe = json.loads(subprocess.run([wf, "bench", "kernel", "--seq", "64", "--heads", "1",
                                   "--dtype", "fp32", "--iters", "1", "--json"],
                                  capture_output=True, text=True).stdout.splitlines()[0])
want = {"x": 1.5, "run": "probe", "round": 2, "commit": commit, "blas_core": probe["blas_core"],
        "sgemm": probe["sgemm"]}
for k, v in want.items():
    assert r.get(k) == v, f"{k}: {r.get(k)!r}, expected {v!r}"
assert r["command"].startswith("python3 -c import json"), r["command"]
assert len(r["loadavg"].split()) == 3, r["loadavg"]
assert set(r["cpu_flags"]) <= set(flags) and ("avx2" in r["cpu_flags"]) == ("avx2" in flags), \
    r["cpu_flags"]
PY
cp "$out" "$work/before"
python3 "$src/bench/record.py" "$out" --run bad -- sh -c 'echo "{\"x\": 2}"; exit 3' 2>/dev/null
rc=$?
[ $rc -eq 3 ] || err "a failing command: exit $rc, expected 3"
cmp -s "$out" "$work/before" || err "a failing command appended to the file"

# Two rounds of made-up kernel results: medians of rates, medians of the per-round ratios.
python3 - "$work/k.jsonl" <<'PY'
import json, sys
ctx = {"commit": "abc", "loadavg": "1.0 1.0 1.0", "cpu": "cpu", "cpus": 2, "cpu_flags": ["avx2"],
       "blas_core": "Zen"}
rows = []
for rd, (f, b, tf, tb) in enumerate([(100, 150, 50, 60), (200, 240, 80, 120)], 1):
    case = {"seq": 1024, "causal": False, "round": rd, **ctx}
    for dt, g in (("fp32", f), ("bf16", b)):
        rows.append({**case, "run": "wallfacer_attn", "dtype": dt, "fwd_gflops": g,
                     "bwd_gflops": g / 2, "sgemm_gflops": 10.0 * rd, "check_err": 1e-3 * rd,
                     "threads": 2, "isa": "avx2", "bf16_path": "portable"})
    for dt, g in (("fp32", tf), ("bf16", tb)):
        rows.append({**case, "run": "torch_attn", "dtype": dt, "fwd_gflops": g, "bwd_gflops": g,
                     "torch_version": "2.x", "torch_cpu_capability": "AVX2"})
with open(sys.argv[1], "w") as o:
    o.writelines(json.dumps(r) + "\n" for r in rows)
PY
row=$(python3 "$src/bench/kernels_table.py" "$work/k.jsonl" --attention | grep '^| 1,024 | full')
# fp32 150 / 75, bf16 195 / 97.5, sgemm 15, bf16/fp32 median(1.5, 1.2) = 1.35 (fwd and bwd),
# fp32/torch fp32 fwd median(2, 2.5) = 2.25, bwd median(1, 1.25) = 1.125 -> 1.12 or 1.13
want='| 1,024 | full | 150.0 / 75.0 | 195.0 / 97.5 | 15.0 | 65.0 / 65.0 | 90.0 / 90.0 | 1.35x / 1.35x | 2.25x / 1.1'
[[ $row == "$want"* ]] || err "attention row: $row"

# GPT runs: tokens/s medians and per-round ratios.
python3 - "$work/g.jsonl" <<'PY'
import json, sys
ctx = {"commit": "abc", "loadavg": "1.0 1.0 1.0", "cpu": "cpu", "cpus": 2, "cpu_flags": [],
       "blas_core": "Zen", "layers": 4, "dim": 256, "heads": 4, "seq": 1024, "steps": 3,
       "threads": 2, "torch_version": "2.x", "torch_cpu_capability": "AVX2"}
with open(sys.argv[1], "w") as o:
    for rd, tps in enumerate([(1000, 500, 2000), (3000, 1500, 2000), (2000, 3000, 1000)], 1):
        for run, t in zip(("wallfacer_fp32", "wallfacer_bf16", "torch_bf16"), tps):
            o.write(json.dumps({**ctx, "run": run, "round": rd, "tokens_per_s": t}) + "\n")
PY
row=$(python3 "$src/bench/gpt_vs_torch_table.py" "$work/g.jsonl" | grep '^| 4 layers')
# medians 2000 / 1500 / 2000; bf16/fp32 median(0.5, 0.5, 1.5) = 0.5; bf16/torch median(0.25,
# 0.75, 3) = 0.75; fp32/torch median(0.5, 1.5, 2) = 1.5
want='| 4 layers, dim 256, 4 heads | 1,024 | 3 | 2,000 | 1,500 | 2,000 | 0.50x | 0.75x | 1.50x |'
[[ $row == "$want" ]] || err "GPT row: $row"

# A training run's fields (record.train_run): tokens/s of the steps after the first, the cap's
# period from the environment, the cards' bytes.
printf '%s\n' '{"step_s": 4, "loss": 5.5}' '{"step_s": 1, "loss": 5.4}' '{"step_s": 3, "loss": 5.3}' \
  > "$work/metrics.jsonl"
echo '{"sent_bytes": [10, 20], "received_bytes": [20, 10]}' > "$work/cards.json"
WALLFACER_CPU_PERIOD_US=20000 python3 - "$work" "$src" <<'PY' || fail=1
import sys
work, src = sys.argv[1:]
sys.path.insert(0, f"{src}/bench")
from record import train_run
run, lines = train_run(f"{work}/metrics.jsonl", "1000", "0.5", "2x4:1gbit", f"{work}/cards.json")
want = {"steps": 3, "tokens_per_s": 500.0, "step_s": [4, 1, 3], "loss": [5.5, 5.4, 5.3],
        "cpu_per_rank": 0.5, "cpu_period_us": 20000, "wait_poll_us": 50, "cluster": "2x4:1gbit",
        "card_bytes": [10, 20]}
assert run == want, run
assert len(lines) == 3
PY

# Llama sequence-parallel runs: tokens/s medians, ratios to zigzag as medians of the rounds',
# cards' bytes per step beside the schedules' count.
python3 - "$work/l.jsonl" <<'PY'
import json, sys
ctx = {"commit": "abc", "loadavg": "1.0 1.0 1.0", "load_after": "2.0 1.0 1.0", "cpu": "cpu",
       "cpus": 2, "cpu_flags": [], "blas_core": "Zen", "seq": 1024, "ranks": 8, "steps": 3,
       "dtype": "bf16", "step_s": [9, 2, 4], "loss": [5.5, 5.4, 5.3], "card_bytes": [3e6, 3e6],
       "schedule_inter_node_bytes_per_layer": {"fwd": 1e6, "bwd": 2e6},
       "model": {"layers": 2, "dim": 128, "heads": 4, "kv_heads": 2, "intermediate": 344,
                 "vocab": 257, "rope_scaling": {"original_max_position_embeddings": 4096}}}
with open(sys.argv[1], "w") as o:
    for rd, tps in enumerate([(100, 150), (200, 100), (300, 600)], 1):
        for config, t in zip(("zigzag", "wallfacer2"), tps):
            o.write(json.dumps({**ctx, "config": config, "round": rd, "tokens_per_s": t}) + "\n")
PY
row=$(python3 "$src/bench/llama_sp_table.py" "$work/l.jsonl" | grep '^| 1,024 | WallFacer-2')
# median(150, 100, 600) = 150; median(1.5, 0.5, 2) = 1.5; steps 2 and 3: 3 s; 6 MB / 3 steps;
# 2 layers x 3 MB
want='| 1,024 | WallFacer-2 | 150 | 1.50x | 3.0 | 2.0 / 6.0 | 5.5000 |'
[[ $row == "$want" ]] || err "Llama sequence-parallel row: $row"

[ $fail -eq 0 ] && echo "ok: results recorded with their context, tables from medians"
exit $fail
