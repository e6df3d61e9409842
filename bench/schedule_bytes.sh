#!/usr/bin/env bash
# The schedule counter's bytes and steps per rank (docs/results.md, "Bytes and steps per rank"):
# `wallfacer attn --count` for each strategy at P = 8 and 16, H_kv = 32 and 8, S = 65536, 32 heads
# of 128, causal. Nothing runs (the schedules are summed), so this takes seconds on any machine.
# Writes one JSON line per configuration: {"command", "commit", "load", "output"} (the --json
# output), to stdout.
#   bench/schedule_bytes.sh [WALLFACER] > docs/data/schedule-bytes.jsonl
set -euo pipefail
wf=${1:-build/wallfacer}
commit=$(git rev-parse --short HEAD)$(git diff --quiet HEAD -- src apps || echo "+changes")
for kv in 32 8; do
  for p in 8 16; do
    configs=("ring" "zigzag" "ulysses" "wallfacer --teams 1" "wallfacer --teams 2")
    ((p == 16)) && configs+=("wallfacer --teams 4")
    for cfg in "${configs[@]}"; do
      # Ulysses needs the kv heads divisible by P
      [[ $cfg == ulysses && $((kv % p)) -ne 0 ]] && continue
      kvarg=""
      ((kv != 32)) && kvarg="--kv-heads $kv"
      cmd="build/wallfacer attn --count $p --strategy $cfg --seq 65536 --heads 32 $kvarg --head-dim 128 --causal --json"
      cmd=${cmd//  / }
      # shellcheck disable=SC2086
      out=$("$wf" ${cmd#build/wallfacer })
      python3 -c 'import json, sys
print(json.dumps({"command": sys.argv[1], "commit": sys.argv[2], "load": float(sys.argv[3]),
                  "output": json.loads(sys.argv[4])}, sort_keys=True))' \
        "$cmd" "$commit" "$(cut -d' ' -f1 /proc/loadavg)" "$out"
    done
  done
done
