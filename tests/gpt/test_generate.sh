#!/usr/bin/env bash
# wallfacer generate (docs/generate.md): greedy tokens and every step's logits of a GPT (MHA), a
# Llama-family model (GQA 4/2, q/k/v biases, llama3 rope scaling, untied head) and a Llama with a
# sliding window of 16 on one of its two layers (prompts of 40 and 110 tokens, 12 new) on P = 1..4
# ranks, every strategy (ring, zigzag, ulysses, wallfacer C = 2, a ring x Ulysses hybrid, the double
# ring with inner rings of 2), against
# one process's decoder (`wallfacer sample`: the prompt fed token by token, the whole cache in one
# place): the same tokens, logits within 1e-5; prompts whose length no layout divides (padded);
# per-rank cache bytes of about a P-th; --max-memory refusing before allocating; a prompt whose
# one-process cache exceeds --max-memory prefilled in chunks on 8 ranks under it; bad input.
set -u
source "$(dirname "$0")/common.sh"
py=${4:-python3}

source "$(dirname "$0")/generate_models.sh"
train_generate_models gpt llama window

# compare REF.npy GOT.npy REF_IDS GOT_JSON: the same tokens (the reference may stop at
# end-of-text), every step's logits within 1e-5.
compare() {
  "$py" - "$@" <<'PY'
import json, os, sys
sys.path.insert(0, os.environ['GENERATE_TESTS'])
from logits_npy import rows as npy
ref, got = npy(sys.argv[1]), npy(sys.argv[2])
ref_ids = [int(t) for t in sys.argv[3].split()]
got_ids = json.load(open(sys.argv[4]))['tokens']
n = len(ref_ids)
ok = got_ids[:n] == ref_ids and (len(got_ids) == n or got_ids[n] == 256)
err = max(abs(a - b) for r, g in zip(ref[:n], got[:n]) for a, b in zip(r, g))
print('tokens %s, max |logit error| %.3g over %d steps' % ('equal' if ok else 'DIFFER', err, n))
sys.exit(0 if ok and err <= 1e-5 else 1)
PY
}

verses="Verse 301: and the 3 lamps were lit, and the 4 doors were opened. Verse 302: and the 1 lamps were lit, and the"
for arch in gpt llama window; do
  ck=$work/run_$arch
  new=10
  prompts=("Verse 12: and the 5 lamps" "$verses")
  # The window model: prompt and answer well past the window of 16.
  [ $arch = window ] && new=12 && prompts=("Verse 301: and the 3 lamps were lit, and" "$verses")
  for prompt in "${prompts[@]}"; do
    len=$(printf '%s' "$prompt" | wc -c)
    ids=$("$wf" sample --ckpt "$ck" --prompt "$prompt" --tokens $new --temperature 0 --ids \
      --logits "$work/ref.npy" 2>/dev/null | tr ' ' '\n' | tail -n +$((len + 1)) | tr '\n' ' ')
    runs=("1 ring" "2 ring" "3 ring" "4 ring" "2 zigzag" "4 zigzag" "2 ulysses" "4 wallfacer --teams 2"
          "4 ring --ulysses 2" "4 double-ring --inner 2")
    [ $arch = gpt ] && runs+=("4 ulysses")
    for r in "${runs[@]}"; do
      read -r np strat rest <<<"$r"
      # shellcheck disable=SC2086
      mpi "$np" generate --ckpt "$ck" --prompt "$prompt" --max-new $new --temperature 0 \
        --strategy "$strat" $rest --json --logits "$work/got.npy" >"$work/got.json" 2>"$work/err" ||
        { err "$arch P=$np $strat $rest: generate failed: $(cat "$work/err")"; continue; }
      res=$(compare "$work/ref.npy" "$work/got.npy" "$ids" "$work/got.json") ||
        err "$arch $len-token prompt, P=$np $strat $rest: $res"
      echo "$arch $len-token prompt, P=$np $strat $rest: $res; $(grep -o '"padded_tokens": [0-9]*\|"cache_bytes_by_rank": \[[^]]*\]' "$work/got.json" | tr '\n' ' ')"
    done
  done
done

# --dtype bf16 (a bf16 prefill, an fp32 decode): the first token's logits within bf16's rounding
# of one fp32 process's (and not equal to them: the prefill ran in bf16), on 1, 2 and 4 ranks.
ck=$work/run_llama
prompt="$verses"
"$wf" sample --ckpt "$ck" --prompt "$prompt" --tokens 2 --temperature 0 --ids \
  --logits "$work/ref.npy" >/dev/null 2>&1 || err "sample for the bf16 prefill failed"
for r in "1 ring" "2 zigzag" "4 wallfacer --teams 2"; do
  read -r np strat rest <<<"$r"
  # shellcheck disable=SC2086
  mpi "$np" generate --ckpt "$ck" --prompt "$prompt" --max-new 2 --temperature 0 --dtype bf16 \
    --strategy "$strat" $rest --json --logits "$work/bf16.npy" >"$work/bf16.json" 2>"$work/err" ||
    { err "bf16 prefill P=$np $strat: generate failed: $(cat "$work/err")"; continue; }
  res=$("$py" - "$work/ref.npy" "$work/bf16.npy" "$work/bf16.json" <<'PY'
import json, os, sys
sys.path.insert(0, os.environ['GENERATE_TESTS'])
from logits_npy import rows as npy
ref, got = npy(sys.argv[1])[0], npy(sys.argv[2])[0]
scale = max(1.0, max(abs(x) for x in ref))
err = max(abs(a - b) for a, b in zip(ref, got))
dtype = json.load(open(sys.argv[3]))['dtype']
print('dtype %s, first logits within %.3g of fp32 (bound %.3g)' % (dtype, err, 2e-2 * scale))
sys.exit(0 if dtype == 'bf16' and 0 < err <= 2e-2 * scale else 1)
PY
) || err "bf16 prefill P=$np $strat: $res"
  echo "llama bf16 prefill, P=$np $strat $rest: $res"
done

# Per-rank cache bytes: the one-process total over P, plus at most one position.
ck=$work/run_gpt
prompt="Verse 7: and the 1 lamps were lit, and the 2 doors were opened, and the 3 lamps were lit"
for np in 1 2 4; do
  mpi $np generate --ckpt "$ck" --prompt "$prompt" --max-new 8 --temperature 0 --json \
    >"$work/mem$np.json" || err "generate on $np ranks failed"
  "$py" - "$work/mem$np.json" $np <<'PY' || err "P=$np: cache bytes per rank"
import json, sys
j = json.load(open(sys.argv[1])); P = int(sys.argv[2])
total, most = j['cache_bytes_one_process'], j['cache_bytes_per_rank']
row = total // (j['prompt_tokens'] + 7)
print('P=%d: cache bytes per rank %d, one process %d, total/P + one position %.0f' %
      (P, most, total, total / P + row))
sys.exit(0 if most <= total / P + row and sum(j['cache_bytes_by_rank']) == total else 1)
PY
done

# --max-memory: refused before allocating, naming the ranks that would hold it.
long=$(printf 'and the lamps were lit %.0s' $(seq 1 400))
expect_error 2 "--max-memory too small" "fits on [0-9]* ranks" \
  mpi 2 generate --ckpt "$ck" --prompt "$long" --max-memory 0.002 --max-new 4
# The same limit on the ranks it names: the prompt runs. Limits from the estimate on one rank down
# to a few MB: the first that one rank refuses while at most 4 ranks hold the prompt.
for lim in 0.03 0.02 0.015 0.01 0.008 0.006 0.005 0.004; do
  out=$(mpi 1 generate --ckpt "$ck" --prompt "$long" --max-memory $lim --max-new 4 2>&1) && continue
  fit=$(echo "$out" | grep -o "fits on [0-9]* ranks" | grep -o "[0-9]*")
  [ -n "$fit" ] && [ "$fit" -le 4 ] && [ "$fit" -ge 2 ] && break
  fit=""
done
if [ -z "$fit" ]; then
  err "--max-memory: no limit refused one rank and named 2..4 ranks (last: $out)"
else
  mpi "$fit" generate --ckpt "$ck" --prompt "$long" --max-memory $lim --max-new 4 --json \
    >"$work/fit.json" 2>"$work/err" ||
    err "--max-memory $lim: refused on one rank, naming $fit ranks, but failed on them: $(cat "$work/err")"
  echo "--max-memory $lim GiB: one rank refused; $fit ranks ran the prompt ($(grep -o '"cache_bytes_per_rank": [0-9]*' "$work/fit.json"))"
fi

# Chunked prefill: a prompt of 3,910 tokens whose one-process cache (1.0 MB, Llama GQA 4/2) is
# larger than a limit of 0.0009 GiB. One rank refuses it, naming at most 8 ranks; 8 ranks run it
# under that limit, prefilled in chunks (pass-KV and pass-Q against the cache of the earlier
# ones): the same tokens as one process without a limit, logits within 1e-5, every rank's cache
# and the estimate under the limit. Chunks forced by --prefill-chunk (one rank, zigzag, a window
# model, a last chunk shorter than the others) equal the prefill in one piece.
# check_chunks REF.npy GOT.npy REF.json GOT.json LIMIT_BYTES: LIMIT_BYTES 0 for no limit.
check_chunks() {
  "$py" - "$@" <<'PY'
import json, os, sys
sys.path.insert(0, os.environ['GENERATE_TESTS'])
from logits_npy import rows as npy
ref, got = npy(sys.argv[1]), npy(sys.argv[2])
r, g = json.load(open(sys.argv[3])), json.load(open(sys.argv[4]))
limit = float(sys.argv[5])
ok = r['tokens'] == g['tokens'] and len(ref) == len(got) and g['prefill_chunks'] > 1
err = max(abs(a - b) for x, y in zip(ref, got) for a, b in zip(x, y))
if limit > 0:
    ok = ok and g['cache_bytes_one_process'] > limit and abs(g['memory_limit_bytes'] - limit) <= 1
    ok = ok and g['cache_bytes_per_rank'] <= limit and g['memory_estimate_bytes'] <= limit
print('tokens %s, max |logit error| %.3g over %d steps; %d chunks of %d tokens (pass-KV %d, '
      'pass-Q %d); cache bytes per rank %d, one process %d, estimate %d, limit %s' %
      ('equal' if r['tokens'] == g['tokens'] else 'DIFFER', err, len(ref), g['prefill_chunks'],
       g['prefill_chunk_tokens'], g['prefill_pass_kv_chunks'], g['prefill_pass_q_chunks'],
       g['cache_bytes_per_rank'], g['cache_bytes_one_process'], g['memory_estimate_bytes'],
       int(limit) if limit > 0 else 'none'))
sys.exit(0 if ok and err <= 1e-5 else 1)
PY
}
ck=$work/run_llama
long=$(printf 'and the lamps were lit %.0s' $(seq 1 170))
lim=0.0009
limit_bytes=$("$py" -c "print(int($lim * 2**30))")
"$wf" generate --ckpt "$ck" --prompt "$long" --max-new 6 --temperature 0 --json \
  --logits "$work/whole.npy" >"$work/whole.json" 2>"$work/err" ||
  err "chunked prefill: the reference failed: $(cat "$work/err")"
out=$(mpi 1 generate --ckpt "$ck" --prompt "$long" --max-new 6 --max-memory $lim 2>&1) &&
  err "chunked prefill: one rank ran a prompt whose cache exceeds --max-memory $lim"
fit=$(echo "$out" | grep -o "fits on [0-9]* ranks" | grep -o "[0-9]*")
{ [ -n "$fit" ] && [ "$fit" -le 8 ]; } ||
  err "chunked prefill: one rank's refusal names no count up to 8: $out"
echo "--max-memory $lim GiB, one rank: $(echo "$out" | grep -o "needs about.*")"
mpi 8 generate --ckpt "$ck" --prompt "$long" --max-new 6 --temperature 0 --max-memory $lim \
  --json --logits "$work/chunked.npy" >"$work/chunked.json" 2>"$work/err" ||
  err "chunked prefill: 8 ranks under --max-memory $lim failed: $(cat "$work/err")"
grep -q "^prefill in [0-9]* chunks of [0-9]* tokens" "$work/err" ||
  err "chunked prefill: no line naming the chunks: $(cat "$work/err")"
res=$(check_chunks "$work/whole.npy" "$work/chunked.npy" "$work/whole.json" "$work/chunked.json" \
  "$limit_bytes") || err "chunked prefill, 8 ranks under --max-memory $lim: $res"
echo "chunked prefill, 8 ranks under --max-memory $lim GiB: $res"
for r in "llama 1 ring 1000" "window 3 ring 7" "window 4 zigzag 50" "gpt 4 wallfacer 24 --teams 2"; do
  read -r arch np strat chunk rest <<<"$r"
  ck=$work/run_$arch
  prompt=$long
  [ $arch = llama ] || prompt=$(printf 'and the lamps were lit %.0s' $(seq 1 12))
  "$wf" generate --ckpt "$ck" --prompt "$prompt" --max-new 6 --temperature 0 --json \
    --logits "$work/whole.npy" >"$work/whole.json" 2>"$work/err" ||
    { err "$arch: the reference failed: $(cat "$work/err")"; continue; }
  # shellcheck disable=SC2086
  mpi "$np" generate --ckpt "$ck" --prompt "$prompt" --max-new 6 --temperature 0 \
    --strategy "$strat" $rest --prefill-chunk "$chunk" --json --logits "$work/chunked.npy" \
    >"$work/chunked.json" 2>"$work/err" ||
    { err "$arch P=$np $strat --prefill-chunk $chunk failed: $(cat "$work/err")"; continue; }
  res=$(check_chunks "$work/whole.npy" "$work/chunked.npy" "$work/whole.json" \
    "$work/chunked.json" 0) || err "$arch P=$np $strat $rest --prefill-chunk $chunk: $res"
  echo "$arch ${#prompt}-token prompt, P=$np $strat $rest --prefill-chunk $chunk: $res"
done
expect_error 2 "--prefill-chunk -1" "--prefill-chunk is -1" \
  mpi 2 generate --ckpt "$ck" --prompt "$long" --max-new 3 --prefill-chunk -1
expect_error 2 "--prefill-chunk with bf16" "a prefill in chunks runs in fp32" \
  mpi 2 generate --ckpt "$ck" --prompt "$long" --max-new 3 --prefill-chunk 8 --dtype bf16

# Bad input: one line, exit 2.
"$py" -c "
import struct, sys
def save(path, ids):
    h = \"{'descr': '<i8', 'fortran_order': False, 'shape': (%d,), }\" % len(ids)
    h += ' ' * (63 - len(h) % 64) + '\n'
    open(path, 'wb').write(b'\x93NUMPY\x01\x00' + struct.pack('<H', len(h)) + h.encode() +
                           struct.pack('<%dq' % len(ids), *ids))
save(sys.argv[1], [1, 2, 300])
save(sys.argv[2], [])
" "$work/bad_ids.npy" "$work/empty.npy"
g=(generate --ckpt "$ck" --prompt "In the")
expect_error 2 "empty prompt" "--prompt must not be empty" mpi 2 generate --ckpt "$ck" --prompt "" --max-new 3
expect_error 2 "empty token file" "holds no token" \
  mpi 2 generate --ckpt "$ck" --prompt-tokens "$work/empty.npy" --max-new 3
expect_error 2 "id outside the vocabulary" "id 300 at index 2 is outside the vocabulary 0..256" \
  mpi 2 generate --ckpt "$ck" --prompt-tokens "$work/bad_ids.npy" --max-new 3
expect_error 2 "--max-new 0" "--max-new is 0" mpi 2 "${g[@]}" --max-new 0
expect_error 2 "--max-new -2" "--max-new is -2" mpi 2 "${g[@]}" --max-new -2
expect_error 2 "--temperature -1" "--temperature is -1" mpi 2 "${g[@]}" --max-new 3 --temperature -1
expect_error 2 "--top-p 0" "--top-p is 0" mpi 2 "${g[@]}" --max-new 3 --top-p 0
expect_error 2 "--top-p 1.5" "--top-p is 1.5" mpi 2 "${g[@]}" --max-new 3 --top-p 1.5
expect_error 2 "--top-k -1" "--top-k is -1" mpi 2 "${g[@]}" --max-new 3 --top-k -1
expect_error 2 "both prompts" "one of them" \
  mpi 2 "${g[@]}" --prompt-tokens "$work/bad_ids.npy" --max-new 3

# Sampling: the same seed draws the same tokens on 1 and 3 ranks.
s1=$("$wf" generate --ckpt "$ck" --prompt "Verse 9" --max-new 12 --temperature 0.9 --top-k 20 \
  --top-p 0.9 --seed 5 2>/dev/null)
s3=$(mpi 3 generate --ckpt "$ck" --prompt "Verse 9" --max-new 12 --temperature 0.9 --top-k 20 \
  --top-p 0.9 --seed 5 2>/dev/null)
[ -n "$s1" ] && [ "$s1" = "$s3" ] || err "sampled tokens differ: P=1 '$s1', P=3 '$s3'"
echo "sampled on 1 and 3 ranks: $s1"

[ $fail -eq 0 ] && echo "generate: all checks passed"
exit $fail
