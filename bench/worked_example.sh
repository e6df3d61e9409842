#!/usr/bin/env bash
# The worked example of docs/algorithm.md: WallFacer-C's bytes and rounds per rank and layer at
# P = 16, N = 65,536 tokens, 32 heads of 128 (as many K,V heads), fp32, no mask, for C = 1, 2, 4
# with and without keep_kv: `wallfacer attn --count` (the schedules are summed, nothing runs).
# Writes one JSON line per configuration: {"command", "commit", "load", "output"} (the --json
# output), to stdout.
#   bench/worked_example.sh [WALLFACER] > docs/data/worked-example.jsonl
set -euo pipefail
wf=${1:-build/wallfacer}
commit=$(git rev-parse --short HEAD)$(git diff --quiet HEAD -- src apps || echo "+changes")
for cfg in "--teams 1" "--teams 2" "--teams 2 --keep-kv" "--teams 4" "--teams 4 --keep-kv"; do
  cmd="build/wallfacer attn --count 16 --strategy wallfacer $cfg --seq 65536 --heads 32 --head-dim 128 --json"
  # shellcheck disable=SC2086
  out=$("$wf" ${cmd#build/wallfacer })
  python3 -c 'import json, sys
print(json.dumps({"command": sys.argv[1], "commit": sys.argv[2], "load": float(sys.argv[3]),
                  "output": json.loads(sys.argv[4])}, sort_keys=True))' \
    "$cmd" "$commit" "$(cut -d' ' -f1 /proc/loadavg)" "$out"
done
