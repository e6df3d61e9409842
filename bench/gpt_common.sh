# Sourced by the GPT benchmarks (bench/gpt_bf16.sh, bench/gpt_vs_torch.sh): with wf, work, layers,
# dim, heads, seq and steps set, picks the token data ($data: data/kjv when `make demo` prepared
# it, else a small generated text; any text will do for timing) and writes $work/bench.toml, the
# model to time (steps + 1: the first step warms up), and defines wf_run.
data=data/kjv
if [[ ! -f $data/train.bin ]]; then
  data=$work/data
  # 8000 lines: the validation split (1%) must hold a sequence too
  for i in $(seq 1 8000); do echo "line $i: and the lamps were lit and the doors were opened"; done > "$work/text.txt"
  "$wf" prepare --input "$work/text.txt" --out "$data" >/dev/null
fi
source "$(dirname "${BASH_SOURCE[0]}")/gpt_toml.sh"
gpt_toml "$work/bench.toml" "$data"
printf 'steps = %s\nlr = 1e-3\n' $((steps + 1)) >> "$work/bench.toml"

# wf_run NAME DTYPE: trains $work/bench.toml with train.dtype = DTYPE and $threads threads into
# $work/NAME and prints the tokens/s of the steps after the first (the first warms up).
wf_run() {
  OMP_NUM_THREADS=$threads "$wf" train --config "$work/bench.toml" --out "$work/$1" \
    --progress none --set train.dtype="$2" >/dev/null
  sed -E 's/.*"tokens_per_s":([^,}]*).*/\1/' "$work/$1/metrics.jsonl" | tail -n +2 |
    awk '{ s += 1 / $1; n++ } END { printf "%.1f", n / s }'
}
