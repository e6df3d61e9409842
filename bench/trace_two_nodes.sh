#!/usr/bin/env bash
# The two-node runs of docs/trace.md: ring, zigzag and WallFacer C=2 on an emulated cluster of two
# nodes of two ranks with a 200 Mbit/s card between them (scripts/emulate-cluster; needs root),
# seq 4096, 4 heads of 64, causal, 3 iterations (times are medians).
#
#   sudo bench/trace_two_nodes.sh > docs/data/trace-two-nodes.jsonl
#
# Prints one JSON line per run: the command, the commit, the load average before and after, and
# the `attn --json` output. bench/trace_two_nodes_table.py prints the table from it.
set -euo pipefail
cd "$(dirname "$0")/.."
[[ $(id -u) -eq 0 ]] || { echo "trace_two_nodes.sh: needs root for the emulated cluster" >&2; exit 2; }
[[ -x build/wallfacer ]] || { echo "trace_two_nodes.sh: build/wallfacer not found: run make build" >&2; exit 2; }
commit=$(git rev-parse --short HEAD)
for cfg in "ring" "zigzag" "wallfacer --teams 2"; do
  cmd="scripts/emulate-cluster --nodes 2 --ranks-per-node 2 --rate 200mbit -- attn --strategy $cfg --seq 4096 --heads 4 --head-dim 64 --causal --iters 3 --json"
  l0=$(cut -d' ' -f1 /proc/loadavg)
  # shellcheck disable=SC2086
  json=$(scripts/emulate-cluster --nodes 2 --ranks-per-node 2 --rate 200mbit -- attn --strategy $cfg \
    --seq 4096 --heads 4 --head-dim 64 --causal --iters 3 --json | tail -1)
  python3 - "$cmd" "$commit" "$l0" "$(cut -d' ' -f1 /proc/loadavg)" "$json" <<'PY'
import json, sys
cmd, commit, l0, l1, out = sys.argv[1:]
print(json.dumps({"command": cmd, "commit": commit, "load": [float(l0), float(l1)],
                  "output": json.loads(out)}, sort_keys=True))
PY
done
