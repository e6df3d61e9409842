# Shared by the GPT CLI tests: a tiny corpus, a tiny config, and loss extraction.
wf=$1
mpirun_bin=$2
work=$3
rm -rf "$work"
mkdir -p "$work"
fail=0
err() { echo "FAIL: $*"; fail=1; }
export OMP_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl_vader_single_copy_mechanism=none
mpi() { local np=$1; shift; "$mpirun_bin" --oversubscribe --bind-to none -np "$np" "$wf" "$@"; }

# A small deterministic corpus.
for i in $(seq 1 400); do
  echo "Verse $i: and the $((i % 7)) lamps were lit, and the $((i % 11)) doors were opened."
done > "$work/corpus.txt"
"$wf" prepare --input "$work/corpus.txt" --out "$work/data" --val-fraction 0.05 >/dev/null ||
  err "prepare failed"

cat > "$work/tiny.toml" <<TOML
[model]
layers = 2
dim = 32
heads = 4
kv_heads = 4

[train]
seq = 64
batch = 2
steps = 5
lr = 3e-3
warmup = 2
seed = 7
eval_every = 5
dtype = "fp32"

[data]
dir = "$work/data"

[parallel]
sp = 1
strategy = "ring"
TOML

# run NAME NP overrides...: `train` of tiny.toml with --set overrides into $work/NAME on NP ranks.
# Another config: RUN_CONFIG; the array RUN_ARGS and the words of RUN_FLAGS go before the overrides.
run() {
  local name=$1 np=$2
  shift 2
  local sets=()
  for s in "$@"; do sets+=(--set "$s"); done
  mpi "$np" train --config "${RUN_CONFIG:-$work/tiny.toml}" --out "$work/$name" --progress none \
    ${RUN_ARGS[@]+"${RUN_ARGS[@]}"} ${RUN_FLAGS:-} "${sets[@]}" >"$work/$name.log" 2>&1 ||
    { err "$name exited $?"; cat "$work/$name.log"; }
}

# The "loss" values of metrics.jsonl, one per line, as written (full precision).
losses() { sed -E 's/.*"loss":([^,}]*).*/\1/' "$1/metrics.jsonl"; }

# within A B BOUND STEPS: every loss of run B within BOUND (relative) of run A, over STEPS steps.
within() {
  paste <(losses "$work/$1") <(losses "$work/$2") | awk -v a="$1" -v b="$2" -v bound="$3" -v want="$4" '
    { n++; d = ($2 - $1) / $1; if (d < 0) d = -d; if (d > worst) worst = d; if (d > bound) bad++ }
    END { if (n != want || bad) { printf "FAIL: %s vs %s: %d steps, %d beyond %g (largest %.2e)\n", a, b, n, bad, bound, worst; exit 1 }
          printf "ok: %s within %g of %s over %d steps (largest %.2e)\n", b, bound, a, n, worst }' || fail=1
}

# expect_error RC WHAT PATTERN command...: the command exits with RC and prints exactly one
# "error:" line, which matches PATTERN; says how long it took (a hang is caught by ctest's TIMEOUT).
expect_error() {
  local want=$1 what=$2 pat=$3 t0 rc
  shift 3
  t0=$(date +%s.%N)
  out=$("$@" 2>&1); rc=$?
  echo "$what: exit $rc after $(echo "$(date +%s.%N) - $t0" | bc) s"
  [ $rc -eq "$want" ] || err "$what: exit $rc, expected $want ($out)"
  [ "$(echo "$out" | grep -c "error:")" -eq 1 ] || err "$what: not exactly one error line: $out"
  echo "$out" | grep -q -- "$pat" || err "$what: message does not mention '$pat': $out"
}

# The "work_imbalance" values of metrics.jsonl (train.packing = "documents"), one per line.
imbalances() { grep -o '"work_imbalance":[^,}]*' "$1/metrics.jsonl" | cut -d: -f2; }

# imbalance_below BALANCED STRATEGY STEPS [strict]: every step's work_imbalance of run BALANCED
# (parallel.layout = "balanced") is >= 1 and at most the larger of that of run STRATEGY (the
# strategy's layout, same data) and the target 1.10 (the balanced layout may give up to 8 % of
# the forward's balance to balance the ring's steps), over STEPS steps; with `strict` also below
# it in the sum over the steps.
imbalance_below() {
  paste <(imbalances "$work/$1") <(imbalances "$work/$2") | awk -v r="$1" -v want="$3" -v strict="${4:-}" '
    { n++; b += $1; s += $2; if ($1 < 1 || ($1 > $2 + 1e-9 && $1 > 1.10)) bad++ }
    END { if (n != want || bad || (strict != "" && b >= s)) { printf "FAIL: %s: work_imbalance balanced %.4f strategy %.4f (sums of %d steps), %d steps out of [1, max(strategy, 1.10)]\n", r, b, s, n, bad; exit 1 }
          printf "ok: %s work_imbalance per step, balanced %.4f strategy %.4f (mean of %d)\n", r, b / n, s / n, n }' ||
    fail=1
}

# resume_same NAME NP overrides...: `run NAME` for 6 steps with a checkpoint every 3, then its
# step-6 checkpoint removed and the run resumed from step 3: the losses are the same bit for bit.
resume_same() {
  local name=$1 np=$2
  shift 2
  run "$name" "$np" "$@" train.steps=6 train.ckpt_every=3 train.eval_every=0
  cp "$work/$name/metrics.jsonl" "$work/$name-full.jsonl"
  rm -rf "$work/$name/ckpt/step-6"
  RUN_FLAGS=--resume run "$name" "$np" "$@" train.steps=6 train.ckpt_every=3 train.eval_every=0
  grep -q "resumed from .*step-3" "$work/$name.log" || err "$name: resume did not start from step 3"
  local a b
  a=$(sed -E 's/.*"loss":([^,}]*).*/\1/' "$work/$name-full.jsonl" | tr '\n' ' ')
  b=$(losses "$work/$name" | tr '\n' ' ')
  if [ "$a" == "$b" ]; then echo "ok: $name: resumed losses identical: $b"; else err "$name: resumed losses differ: '$a' vs '$b'"; fi
}

# prepare_doc_corpus: $work/docs from 60 short files, so that every window of 64 tokens crosses
# one or more end-of-text tokens (train.packing = "documents").
prepare_doc_corpus() {
  local files=() i r f
  for i in $(seq 1 60); do
    f="$work/doc$i.txt"
    for r in $(seq 0 $((i % 4))); do echo "Psalm $i.$r: praise ye the $((i * r % 13)) hills."; done > "$f"
    files+=(--input "$f")
  done
  "$wf" prepare "${files[@]}" --out "$work/docs" --val-fraction 0.1 >/dev/null || err "prepare failed"
}
