#!/usr/bin/env bash
# prepare --tokens: token-id arrays (.npy of int32, int64 and uint32, made by NumPy) with ids
# beyond 16 bits become int32 shards that the tiny GPT trains on (model.vocab covering the ids),
# with packed documents ended by the --eos id, on 1 and 2 ranks alike; bad token files exit 2
# naming the file and the index and write nothing; a model.vocab below the shards' exits 2;
# sample takes and prints token ids from the checkpoint.
# Usage: test_train_tokens.sh WALLFACER MPIRUN WORK PYTHON (an interpreter with NumPy).
set -u
py=${4:-python3}
source "$(dirname "$0")/common.sh"

"$py" - "$work" <<'PY' || err "the NumPy token files could not be made"
import sys
import numpy as np
work = sys.argv[1]
rng = np.random.default_rng(3)
EOS = 69999
# Documents of 20-300 ids in 65536..69998 and 0..255 (both sides of 16 bits), one file each,
# in three integer types; then one array of several documents each ended by EOS.
for i in range(12):
    n = int(rng.integers(20, 300))
    ids = np.where(rng.random(n) < 0.5, rng.integers(65536, EOS, n), rng.integers(0, 256, n))
    np.save(f"{work}/doc{i:02d}.npy", ids.astype([np.int32, np.int64, np.uint32][i % 3]))
docs = [np.append(rng.integers(0, EOS, int(rng.integers(30, 200))), EOS) for _ in range(10)]
np.save(f"{work}/many.npy", np.concatenate(docs).astype(np.int64))
np.save(f"{work}/bad.npy", np.array([5, 6, 70000, 7], dtype=np.int32))
np.save(f"{work}/neg.npy", np.array([5, -1], dtype=np.int64))
np.save(f"{work}/float.npy", np.zeros(4, dtype=np.float32))
PY

out=$("$wf" prepare --tokens "$work"/doc*.npy "$work/many.npy" --eos 69999 --vocab 70000 \
  --out "$work/tok" --val-fraction 0.1 2>&1) || err "prepare --tokens exited $?: $out"
echo "$out"
echo "$out" | grep -q "(vocab 70000, end-of-text 69999)" || err "prepare does not report the vocab: $out"
# 4 bytes an id, end-of-text after each of the 12 one-document files (many.npy ends with it).
"$py" - "$work" <<'PY' || err "the shards do not hold the ids NumPy wrote"
import sys
import numpy as np
work = sys.argv[1]
want = []
for i in range(12):
    want += list(np.load(f"{work}/doc{i:02d}.npy").astype(np.int64)) + [69999]
want += list(np.load(f"{work}/many.npy"))
got = []
for name in ("train", "val"):
    raw = open(f"{work}/tok/{name}.bin", "rb").read()
    assert raw[:8] == b"WFTOKENS", name
    version, header, width, vocab = np.frombuffer(raw[8:24], dtype="<u4")
    eos = int(np.frombuffer(raw[40:44], dtype="<u4")[0])
    assert (version, header, width, vocab, eos) == (2, 64, 4, 70000, 69999), (version, width, vocab, eos)
    got += list(np.frombuffer(raw[64:], dtype="<i4").astype(np.int64))
assert got == want, (len(got), len(want))
assert max(got) > 65535
print(f"shards: {len(got)} ids as written, largest {max(got)}")
PY

# Two steps of the tiny GPT with packed documents, on 1 and 2 ranks.
t=(data.dir="$work/tok" model.vocab=70000 train.steps=2 train.eval_every=2 train.packing=documents)
run tok_p1 1 "${t[@]}" train.ckpt_every=2
run tok_p2 2 "${t[@]}" parallel.sp=2 parallel.strategy=zigzag
within tok_p1 tok_p2 1e-4 2
losses "$work/tok_p1" | awk '{ if (!($1 > 0 && $1 < 20)) bad = 1 } END { exit bad }' ||
  err "tok_p1 losses are not finite and positive: $(losses "$work/tok_p1" | tr '\n' ' ')"

# sample: the prompt's ids, then at most 5 generated ids, each inside the vocabulary.
out=$("$wf" sample --ckpt "$work/tok_p1" --prompt-ids 65536,5 --tokens 5 --temperature 0 2>&1) ||
  err "sample --prompt-ids exited $?: $out"
echo "sample: $out"
echo "$out" | awk 'NR == 1 && $1 == 65536 && $2 == 5 && NF >= 2 && NF <= 7 {
    for (i = 3; i <= NF; i++) if ($i !~ /^[0-9]+$/ || $i >= 70000) exit 1; ok = 1 }
  END { exit !(ok && NR == 1) }' || err "sample printed '$out'"
expect_error 2 "sample without --prompt-ids" "not byte-level text (257): give its tokenizer, --tokenizer tokenizer.json, or the prompt as token ids" \
  "$wf" sample --ckpt "$work/tok_p1" --tokens 3
expect_error 2 "sample --prompt-ids beyond the vocabulary" "'70000', not a token id in 0..69999" \
  "$wf" sample --ckpt "$work/tok_p1" --prompt-ids 1,70000

# Bad inputs: exit 2, one line naming the file and the index, nothing written.
expect_error 2 "id beyond --vocab" "bad.npy: the id 70000 at index 2 is outside the vocabulary" \
  "$wf" prepare --tokens "$work/doc00.npy" "$work/bad.npy" --vocab 70000 --out "$work/bad1"
expect_error 2 "negative id" "neg.npy: the id -1 at index 1" \
  "$wf" prepare --tokens "$work/neg.npy" --out "$work/bad2"
expect_error 2 "float array" "float.npy: the array is '<f4'" \
  "$wf" prepare --tokens "$work/float.npy" --out "$work/bad3"
expect_error 2 "--eos without --tokens" "go with --tokens" \
  "$wf" prepare --input "$work/tiny.toml" --eos 3 --out "$work/bad4"
for d in bad1 bad2 bad3 bad4; do [ ! -e "$work/$d" ] || err "a refused prepare wrote $work/$d"; done
expect_error 2 "model.vocab below the shards'" "set model.vocab to at least 70000" \
  mpi 1 train --config "$work/tiny.toml" --out "$work/small_vocab" --set data.dir="$work/tok"

[ $fail -eq 0 ] && echo "train_tokens: ok"
exit $fail
