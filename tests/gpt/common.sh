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
