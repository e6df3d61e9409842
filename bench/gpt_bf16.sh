#!/usr/bin/env bash
# Trains the same GPT with train.dtype = fp32 and = bf16 on one rank with THREADS threads,
# alternating the two ROUNDS times (so a change of machine load hits both), and prints the
# tokens/s of each run, the mean per dtype, their ratio and the largest relative difference of the
# losses of the first run of each.
# Usage: bench/gpt_bf16.sh [LAYERS DIM HEADS SEQ STEPS THREADS ROUNDS]   (defaults 4 256 4 4096 3 2 2)
set -euo pipefail
layers=${1:-4} dim=${2:-256} heads=${3:-4} seq=${4:-4096} steps=${5:-3} threads=${6:-2}
rounds=${7:-2}
wf=${WALLFACER:-build/wallfacer}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
source "$(dirname "$0")/gpt_common.sh"
echo "model: $layers layers, dim $dim, $heads heads, seq $seq, batch 1, $threads threads," \
  "$steps timed steps, $rounds rounds; load average $(cut -d' ' -f1-3 /proc/loadavg)"
losses() { sed -E 's/.*"loss":([^,}]*).*/\1/' "$1/metrics.jsonl"; }
for r in $(seq 1 "$rounds"); do
  for dtype in fp32 bf16; do
    tps=$(wf_run "$dtype-$r" "$dtype")
    echo "round $r $dtype tokens/s $tps"
    echo "$dtype $tps" >> "$work/tps"
  done
done
awk '{ s[$1] += $2; n[$1]++ }
     END { f = s["fp32"] / n["fp32"]; b = s["bf16"] / n["bf16"]
           printf "mean fp32 %.1f tokens/s, bf16 %.1f tokens/s, bf16 / fp32 %.2fx\n", f, b, b / f }' "$work/tps"
paste <(losses "$work/fp32-1") <(losses "$work/bf16-1") |
  awk '{ d = ($2 - $1) / $1; if (d < 0) d = -d; if (d > m) m = d }
       END { printf "largest relative loss difference bf16 vs fp32: %.2e\n", m }'
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
