#!/usr/bin/env bash
# The schedule counter's bytes and steps per rank, `wallfacer attn --count` (the schedules are
# summed, nothing runs, so this takes seconds on any machine):
#   bench/schedule_bytes.sh [WALLFACER] > docs/data/schedule-bytes.jsonl
#     docs/results.md, "Bytes and steps per rank": each strategy at P = 8 and 16, H_kv = 32 and 8,
#     S = 65536, 32 heads of 128, causal;
#   bench/schedule_bytes.sh WALLFACER worked-example > docs/data/worked-example.jsonl
#     docs/algorithm.md's worked example: WallFacer-C at P = 16, S = 65536, 32 heads of 128 (as
#     many K,V heads), no mask, C = 1, 2, 4 with and without keep_kv.
# Writes one JSON line per configuration: {"command", "commit", "load", "output"} (the --json
# output), to stdout.
set -euo pipefail
wf=${1:-build/wallfacer}
set_name=${2:-strategies}
commit=$(git rev-parse --short HEAD)$(git diff --quiet HEAD -- src apps || echo "+changes")

# record CMD: runs CMD (written as build/wallfacer ...) with $wf and prints its JSON line.
record() {
  local cmd=${1//  / }
  local out
  # shellcheck disable=SC2086
  out=$("$wf" ${cmd#build/wallfacer })
  python3 -c 'import json, sys
print(json.dumps({"command": sys.argv[1], "commit": sys.argv[2], "load": float(sys.argv[3]),
                  "output": json.loads(sys.argv[4])}, sort_keys=True))' \
    "$cmd" "$commit" "$(cut -d' ' -f1 /proc/loadavg)" "$out"
}

case $set_name in
  worked-example)
    for cfg in "--teams 1" "--teams 2" "--teams 2 --keep-kv" "--teams 4" "--teams 4 --keep-kv"; do
      record "build/wallfacer attn --count 16 --strategy wallfacer $cfg --seq 65536 --heads 32 --head-dim 128 --json"
    done ;;
  strategies)
    for kv in 32 8; do
      for p in 8 16; do
        configs=("ring" "zigzag" "ulysses" "wallfacer --teams 1" "wallfacer --teams 2")
        ((p == 16)) && configs+=("wallfacer --teams 4")
        for cfg in "${configs[@]}"; do
          # Ulysses needs the kv heads divisible by P
          [[ $cfg == ulysses && $((kv % p)) -ne 0 ]] && continue
          kvarg=""
          ((kv != 32)) && kvarg="--kv-heads $kv"
          record "build/wallfacer attn --count $p --strategy $cfg --seq 65536 --heads 32 $kvarg --head-dim 128 --causal --json"
        done
      done
    done ;;
  *) echo "schedule_bytes.sh: unknown set '$set_name': give strategies or worked-example" >&2; exit 2 ;;
esac
