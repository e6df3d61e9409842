#!/usr/bin/env bash
# --tokenizer tokenizer.json of sample and generate (apps/wallfacer/hf_tokenizer.h), on a Llama
# checkpoint imported from the transformers fixtures (vocabulary 300).
#   with:    with a Python that has the `tokenizers` package (python3 on PATH, or the venv of
#            $HF_VENV, default ~/.cache/wallfacer/hf-venv, that bench/hf_venv.sh makes): a
#            byte-level BPE tokenizer of 300 ids made here; sample and generate (1 and 2 ranks)
#            print the text of the same ids as --prompt-ids / --prompt-tokens give, --json holds
#            it; bad input. Skipped (exit 77) where no such Python is found.
#   missing: python3 that cannot import `tokenizers` (a stub on PYTHONPATH that raises
#            ImportError), no python3 at all, a $WALLFACER_PYTHON that is not there: one line
#            saying what to install, exit 2, no --logits file written.
# Usage: test_tokenizer.sh WALLFACER MPIRUN WORK SOURCE_DIR with|missing
set -u
source "$(dirname "$0")/common.sh"
src=$4
mode=$5

"$wf" import-hf "$src/tests/golden/hf/llama3" --out "$work/run" >/dev/null || err "import-hf failed"

if [ "$mode" = missing ]; then
  unset WALLFACER_PYTHON
  mkdir -p "$work/stub/tokenizers"
  echo 'raise ImportError("No module named tokenizers")' >"$work/stub/tokenizers/__init__.py"
  echo '{}' >"$work/tok.json"
  # PYTHONPATH comes before the installed packages: the stub hides a real package.
  expect_error 2 "sample --tokenizer without the package" "pip install tokenizers" \
    env PYTHONPATH="$work/stub" "$wf" sample --ckpt "$work/run" --tokenizer "$work/tok.json" \
    --tokens 3 --logits "$work/logits.npy"
  [ -e "$work/logits.npy" ] && err "a --logits file was written although the tokenizer failed"
  expect_error 2 "generate --tokenizer without the package" "pip install tokenizers" \
    env PYTHONPATH="$work/stub" "$wf" generate --ckpt "$work/run" --tokenizer "$work/tok.json" \
    --prompt "In the beginning" --max-new 3
  expect_error 2 "sample --tokenizer without python3" "python3 on PATH), which cannot be started" \
    env PATH=/nonexistent "$wf" sample --ckpt "$work/run" --tokenizer "$work/tok.json" --tokens 3
  expect_error 2 "sample --tokenizer, WALLFACER_PYTHON not a program" "$work/none/python" \
    env WALLFACER_PYTHON="$work/none/python" "$wf" sample --ckpt "$work/run" \
    --tokenizer "$work/tok.json" --tokens 3
  expect_error 2 "sample --tokenizer of a missing file" "is not a file" \
    "$wf" sample --ckpt "$work/run" --tokenizer "$work/none.json" --tokens 3
  [ $fail -eq 0 ] && echo "tokenizer (missing package): ok"
  exit $fail
fi

# A Python with the package.
py=
for cand in python3 "${HF_VENV:-$HOME/.cache/wallfacer/hf-venv}/bin/python3"; do
  if command -v "$cand" >/dev/null && "$cand" -c 'import tokenizers' 2>/dev/null; then
    py=$(command -v "$cand")
    break
  fi
done
if [ -z "$py" ]; then
  echo "SKIP: no python3 with the package 'tokenizers' (on PATH, or in \$HF_VENV:" \
    "${HF_VENV:-$HOME/.cache/wallfacer/hf-venv})"
  exit 77
fi
echo "python with tokenizers: $py"
# mpirun may put its own folder first on the ranks' PATH: the interpreter is named.
export WALLFACER_PYTHON=$py

# A byte-level BPE tokenizer of exactly the checkpoint's 300 ids: every id decodes.
"$py" - "$work/tok.json" <<'PY' || err "making the tokenizer failed"
import sys
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
tok = Tokenizer(models.BPE())
tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
tok.decoder = decoders.ByteLevel()
trainer = trainers.BpeTrainer(vocab_size=280, show_progress=False,
                              initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
text = ["In the beginning God created the heaven and the earth. And the earth was without form."]
tok.train_from_iterator(text * 20, trainer)
n = tok.get_vocab_size(with_added_tokens=True)
tok.add_special_tokens(["<extra_%d>" % i for i in range(300 - n)])
assert tok.get_vocab_size(with_added_tokens=True) == 300
tok.save(sys.argv[1])
PY
tok=$work/tok.json
decode() { "$py" "$src/scripts/tokenize" --tokenizer "$tok" --decode; }
prompt="In the beginning God"
pids=$(printf '%s' "$prompt" | "$py" "$src/scripts/tokenize" --tokenizer "$tok" --encode)
[ -n "$pids" ] || err "scripts/tokenize --encode gave no ids"

# sample: --prompt through the tokenizer = --prompt-ids of its ids, decoded.
text=$("$wf" sample --ckpt "$work/run" --tokenizer "$tok" --prompt "$prompt" --tokens 12 \
  --temperature 0 2>"$work/err") || err "sample --tokenizer failed: $(cat "$work/err")"
ids=$("$wf" sample --ckpt "$work/run" --prompt-ids "${pids// /,}" --tokens 12 --temperature 0) ||
  err "sample --prompt-ids failed"
want=$(echo "$ids" | decode)
[ "$text" = "$want" ] || err "sample --tokenizer printed '$text', the decoded ids are '$want'"
echo "sample: $text"
# --prompt-ids with --tokenizer: the same text.
both=$("$wf" sample --ckpt "$work/run" --tokenizer "$tok" --prompt-ids "${pids// /,}" --tokens 12 \
  --temperature 0) || err "sample --tokenizer --prompt-ids failed"
[ "$both" = "$want" ] || err "sample --tokenizer --prompt-ids printed '$both', not '$want'"
case "$text" in "$prompt"*) ;; *) err "the sample does not start with the prompt: '$text'" ;; esac

# generate on 1 and 2 ranks: the new tokens' text; --json holds the ids and their text.
printf '%s' "$pids" | "$py" -c '
import struct, sys
ids = [int(w) for w in sys.stdin.read().split()]
h = "{\x27descr\x27: \x27<i4\x27, \x27fortran_order\x27: False, \x27shape\x27: (%d,), }" % len(ids)
h += " " * (63 - (10 + len(h)) % 64) + "\n"
open(sys.argv[1], "wb").write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(h)) + h.encode() +
                              struct.pack("<%di" % len(ids), *ids))' "$work/prompt.npy"
ref=$("$wf" generate --ckpt "$work/run" --prompt-tokens "$work/prompt.npy" --max-new 8 \
  --temperature 0 2>/dev/null) || err "generate --prompt-tokens failed"
want=$(echo "$ref" | decode)
for np in 1 2; do
  got=$(mpi $np generate --ckpt "$work/run" --tokenizer "$tok" --prompt "$prompt" --max-new 8 \
    --temperature 0 2>"$work/err") || err "P=$np: generate --tokenizer failed: $(cat "$work/err")"
  [ "$got" = "$want" ] || err "P=$np: generate --tokenizer printed '$got', the decoded ids '$want'"
  mpi $np generate --ckpt "$work/run" --tokenizer "$tok" --prompt "$prompt" --max-new 8 \
    --temperature 0 --json >"$work/gen.json" 2>/dev/null || err "P=$np: generate --json failed"
  "$py" - "$work/gen.json" "$ref" "$want" <<'PY' || err "P=$np: generate --json: tokens or text"
import json, sys
j = json.load(open(sys.argv[1]))
sys.exit(0 if j["tokens"] == [int(t) for t in sys.argv[2].split()] and j["text"] == sys.argv[3]
         else 1)
PY
  echo "generate P=$np: $got"
done

# Bad input: not a tokenizer, a tokenizer of another vocabulary.
echo 'not json' >"$work/bad.json"
expect_error 2 "sample --tokenizer of a file that is not a tokenizer" "not a tokenizer.json" \
  "$wf" sample --ckpt "$work/run" --tokenizer "$work/bad.json" --tokens 3
"$py" - "$work/big.json" <<'PY' || err "making the large tokenizer failed"
import sys
from tokenizers import Tokenizer, models, pre_tokenizers
vocab = {"w%d" % i: i for i in range(399)}
vocab["In"] = 399
tok = Tokenizer(models.WordLevel(vocab, unk_token="w0"))
tok.pre_tokenizer = pre_tokenizers.Whitespace()
tok.save(sys.argv[1])
PY
expect_error 2 "sample --tokenizer of another vocabulary" "not this model's tokenizer" \
  "$wf" sample --ckpt "$work/run" --tokenizer "$work/big.json" --prompt "In" --tokens 3
[ $fail -eq 0 ] && echo "tokenizer: ok"
exit $fail
