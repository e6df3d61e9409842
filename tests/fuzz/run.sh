#!/usr/bin/env bash
# Runs one fuzz target for a bounded time: every committed input first (a regression input that
# crashes fails at once), then new inputs mutated from them, under ASan+UBSan. New inputs go to
# WORK/corpus, never into the committed corpus. A crash, sanitizer report, timeout or memory
# blow-up fails with the reproducer's path and how to keep it as a regression input.
# Usage: run.sh TARGET CORPUS SECONDS WORK [--keep]
#   --keep  start from the inputs WORK/corpus holds from earlier runs too (make fuzz); without it
#           WORK/corpus starts empty, so that a run starts from the committed corpus alone.
set -u
target=$1 corpus=$2 seconds=$3 work=$4 keep=${5:-}
name=$(basename "$target")
[ "$keep" = --keep ] || rm -rf "$work/corpus"
mkdir -p "$work/corpus" "$work/artifacts"
rm -f "$work/artifacts"/*
# Keys and boundary values of the format, when the target has a dictionary.
dict=$(dirname "$0")/dict/${name#fuzz_}.dict
dict_flag=()
[ -f "$dict" ] && dict_flag=(-dict="$dict")
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
"$target" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=1024 \
  -max_len=16384 -print_final_stats=1 -artifact_prefix="$work/artifacts/" "${dict_flag[@]}" \
  "$work/corpus" "$corpus" >"$work/log" 2>&1
rc=$?
grep -E '^(INFO: seed|#[0-9]+\s+(INITED|DONE)|stat::number_of_executed_units|stat::new_units_added)' \
  "$work/log"
if [ $rc -ne 0 ]; then
  tail -n 60 "$work/log"
  for f in "$work/artifacts"/*; do
    [ -e "$f" ] || continue
    echo "$name: reproducer $f"
    echo "  run it:  $target $f"
    echo "  keep it: cp $f $corpus/regress-<what-it-broke> (after the fix), and commit it"
  done
  echo "$name: FAILED (exit $rc), log $work/log"
  exit 1
fi
echo "$name: ok, $(grep -m1 -oE 'number_of_executed_units: [0-9]+' "$work/log" | cut -d' ' -f2) runs in ${seconds}s"
