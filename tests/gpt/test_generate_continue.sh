#!/usr/bin/env bash
# wallfacer generate --continue (docs/generate.md, "Continuing a conversation"): a second turn
# prefilled against the sharded KV cache, by pass-KV and by pass-Q, on P = 1, 2, 4 ranks, for a
# GPT, a Llama-family model (GQA 4/2, llama3 rope scaling) and a Llama with a sliding window of 16
# on one of its layers (the conversation well past it): the second turn's greedy tokens equal, and its logits are
# within 1e-5 of, one process generating from the whole conversation as one prompt (first prompt,
# first answer, second prompt); the bytes each way sends equal the count that picks the way, and
# auto picks the fewer; a turn shorter than P (ranks with no new row); a turn after a prompt
# prefilled in chunks (--prefill-chunk); two turns, also given as text (--continue-text); bad input.
set -u
source "$(dirname "$0")/common.sh"
py=${4:-python3}

source "$(dirname "$0")/generate_models.sh"
train_generate_models gpt llama window

# check REF.json REF.npy GOT.json GOT.npy TURN WAY: continuation TURN's tokens equal the reference's,
# its logits (the last rows of GOT.npy) within 1e-5; the bytes sent are the chosen way's count.
check() {
  "$py" - "$@" <<'PY'
import json, os, sys
sys.path.insert(0, os.environ['GENERATE_TESTS'])
from logits_npy import rows as npy
ref, got = json.load(open(sys.argv[1])), json.load(open(sys.argv[3]))
turn, way = int(sys.argv[5]), sys.argv[6]
c = got['continuations'][turn]
n = len(ref['tokens'])
err = max(abs(a - b) for r, g in zip(npy(sys.argv[2]), npy(sys.argv[4])[-n:]) for a, b in zip(r, g))
ok = c['tokens'] == ref['tokens']
want = c['pass_kv_bytes'] if c['way'] == 'pass-kv' else c['pass_q_bytes']
fewer = 'pass-kv' if c['pass_kv_bytes'] <= c['pass_q_bytes'] else 'pass-q'
way_ok = c['way'] == (fewer if way == 'auto' else way)
print('%s, max |logit error| %.3g over %d steps; %d new tokens after %d cached: %s, sent %d bytes '
      '(pass-KV %d, pass-Q %d), new rows by rank %s' %
      ('tokens equal' if ok else 'tokens DIFFER %s vs %s' % (c['tokens'], ref['tokens']), err, n,
       c['new_tokens'], c['cached_tokens'], c['way'], c['sent_bytes'], c['pass_kv_bytes'],
       c['pass_q_bytes'], c['new_tokens_by_rank']))
sys.exit(0 if ok and err <= 1e-5 and c['sent_bytes'] == want and way_ok else 1)
PY
}

new=6
p1="Verse 12: and the 5 lamps"
for arch in gpt llama window; do
  ck=$work/run_$arch
  # The first answer on one process, then the whole conversation as one prompt.
  a1=$("$wf" generate --ckpt "$ck" --prompt "$p1" --max-new $new --temperature 0 2>/dev/null)
  [ -n "$a1" ] || { err "$arch: first turn failed"; continue; }
  for second in " were lit, and the 3 doors were opened. Verse 13: and the" "."; do
    ids "$second" "$work/turn2.npy"
    # shellcheck disable=SC2046,SC2086
    ids "$p1" "$work/whole.npy" $a1 $(printf '%s' "$second" | od -An -tu1)
    "$wf" generate --ckpt "$ck" --prompt-tokens "$work/whole.npy" --max-new $new --temperature 0 \
      --json --logits "$work/ref.npy" >"$work/ref.json" 2>"$work/err" ||
      { err "$arch: reference failed: $(cat "$work/err")"; continue; }
    for r in "1 ring pass-kv" "1 ring pass-q" "2 ring pass-kv" "2 zigzag pass-q" "4 ring pass-kv" \
        "4 ring pass-q" "4 wallfacer --teams 2 auto" "3 ring auto" "3 ring --prefill-chunk 6 auto"; do
      read -r np strat rest <<<"$r"
      way=${rest##* }
      rest=${rest% *}
      [ "$rest" = "$way" ] && rest=
      # shellcheck disable=SC2086
      mpi "$np" generate --ckpt "$ck" --prompt "$p1" --max-new $new --temperature 0 \
        --strategy "$strat" $rest --continue "$work/turn2.npy" --continue-way "$way" --json \
        --logits "$work/got.npy" >"$work/got.json" 2>"$work/err" ||
        { err "$arch P=$np $strat $way: generate failed: $(cat "$work/err")"; continue; }
      res=$(check "$work/ref.json" "$work/ref.npy" "$work/got.json" "$work/got.npy" 0 "$way") ||
        err "$arch '$second' P=$np $strat $rest $way: $res"
      echo "$arch ${#second}-byte second turn, P=$np $strat $rest $way: $res"
    done
  done
done

# Two more turns on 4 ranks, pass-KV and pass-Q: the third turn against one process.
ids " were lit" "$work/t2.npy"
ids " and the 4 doors" "$work/t3.npy"
for run in "llama pass-kv" "llama pass-q" "window pass-kv" "window pass-q"; do
  read -r arch way <<<"$run"
  ck=$work/run_$arch
  mpi 4 generate --ckpt "$ck" --prompt "$p1" --max-new $new --temperature 0 --continue "$work/t2.npy" \
    --continue "$work/t3.npy" --continue-way $way --json --logits "$work/got.npy" \
    >"$work/got.json" 2>"$work/err" || { err "$arch two turns $way failed: $(cat "$work/err")"; continue; }
  # shellcheck disable=SC2046
  ids "" "$work/whole3.npy" $("$py" -c "
import json, sys
j = json.load(open(sys.argv[1]))
ids = list(sys.argv[2].encode()) + j['tokens'] + list(b' were lit') + j['continuations'][0]['tokens'] + list(b' and the 4 doors')
print(' '.join(map(str, ids)))" "$work/got.json" "$p1")
  "$wf" generate --ckpt "$ck" --prompt-tokens "$work/whole3.npy" --max-new $new --temperature 0 \
    --json --logits "$work/ref.npy" >"$work/ref.json" 2>/dev/null || err "three-turn reference failed"
  res=$(check "$work/ref.json" "$work/ref.npy" "$work/got.json" "$work/got.npy" 1 $way) ||
    err "$arch third turn, P=4 $way: $res"
  echo "$arch third turn, P=4 $way: $res"
done
ck=$work/run_llama

# The same two turns given as text (--continue-text, encoded as --prompt is): the same ids, so the
# same tokens and bit-identical logits as the .npy turns.
for form in npy text; do
  if [ $form = npy ]; then turns=(--continue "$work/t2.npy" --continue "$work/t3.npy")
  else turns=(--continue-text " were lit" --continue-text " and the 4 doors"); fi
  mpi 2 generate --ckpt "$ck" --prompt "$p1" --max-new $new --temperature 0 "${turns[@]}" --json \
    --logits "$work/$form.npy" >"$work/$form.json" 2>"$work/err" ||
    err "turns as $form failed: $(cat "$work/err")"
done
res=$("$py" - "$work" <<'PY'
import json, os, sys
sys.path.insert(0, os.environ['GENERATE_TESTS'])
from logits_npy import rows as npy
w = sys.argv[1]
a, b = (json.load(open(f'{w}/{f}.json')) for f in ('npy', 'text'))
ta = [a['tokens']] + [c['tokens'] for c in a['continuations']]
tb = [b['tokens']] + [c['tokens'] for c in b['continuations']]
same = npy(f'{w}/npy.npy') == npy(f'{w}/text.npy')
print(f"{len(tb) - 1} text turns: tokens {'equal' if ta == tb else 'DIFFER'}, logits "
      f"{'identical' if same else 'DIFFER'}")
sys.exit(0 if ta == tb and same and len(tb) == 3 else 1)
PY
) || err "--continue-text: $res"
echo "llama P=2 --continue-text: $res"

# Bad input: one line, exit 2.
ids "" "$work/empty.npy"
ids "" "$work/bad.npy" 1 400
g=(generate --ckpt "$ck" --prompt "In the" --max-new 2)
expect_error 2 "unknown way" "unknown continuation way 'pass-x'" \
  mpi 2 "${g[@]}" --continue "$work/t2.npy" --continue-way pass-x
expect_error 2 "empty turn" "--continue .* holds no token" mpi 2 "${g[@]}" --continue "$work/empty.npy"
expect_error 2 "id outside the vocabulary" "id 400 at index 1 is outside the vocabulary" \
  mpi 2 "${g[@]}" --continue "$work/bad.npy"
expect_error 2 "empty text turn" "--continue-text must not be empty" \
  mpi 2 "${g[@]}" --continue-text ""
expect_error 2 "both forms of turns" "as --continue FILE.npy or as --continue-text TEXT, not both" \
  mpi 2 "${g[@]}" --continue "$work/t2.npy" --continue-text " and"

[ $fail -eq 0 ] && echo "generate --continue: all checks passed"
exit $fail
