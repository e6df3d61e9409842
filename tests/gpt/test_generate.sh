#!/usr/bin/env bash
# wallfacer generate (docs/generate.md): greedy tokens and every step's logits of a GPT (MHA), a
# Llama-family model (GQA 4/2, q/k/v biases, llama3 rope scaling, untied head) and a Llama with a
# sliding window of 16 on one of its two layers (prompts of 40 and 110 tokens, 12 new) on P = 1..4
# ranks, every strategy (ring, zigzag, ulysses, wallfacer C = 2, a ring x Ulysses hybrid), against
# one process's decoder (`wallfacer sample`: the prompt fed token by token, the whole cache in one
# place): the same tokens, logits within 1e-5; prompts whose length no layout divides (padded);
# per-rank cache bytes of about a P-th; --max-memory refusing before allocating; bad input.
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
          "4 ring --ulysses 2")
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
