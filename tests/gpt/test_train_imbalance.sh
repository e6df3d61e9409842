#!/usr/bin/env bash
# work_imbalance of a GPT whose layers use several attention windows, and the memory check of the
# attentions the trainer builds for them.
#
# work_imbalance: one window of train.seq + 1 tokens whose documents are known (a shard written
# here: documents of 5 to 40 tokens, each ending in end-of-text), so every step trains the same
# window; 3 layers, a window of 12 on layer 0 only. Each step's work_imbalance must be the sum over
# the layers of the busiest rank's kept pairs over the sum of the mean (docs/training.md), counted
# here pair by pair for the contiguous (ring) and zigzag layouts of the strategy: 2 global layers
# and 1 windowed. It must also differ from the global layers' own imbalance (what the first window's
# attentions alone would give).
#
# Memory: `--max-memory` far below the need makes every config stop with the estimate in its one
# line; a model with a global and a windowed set of attentions needs more than the same model with
# either alone, and with packed sequences per rank more than with one.
set -u
source "$(dirname "$0")/common.sh"
seq=128

# The shard: documents of seeded lengths, exactly seq + 1 tokens in train.bin (one window, start 0);
# val.bin the same tokens.
python3 - "$work/one" "$seq" <<'PY'
import os, random, struct, sys
out, seq = sys.argv[1], int(sys.argv[2])
rng = random.Random(5)
tokens = []
while len(tokens) < seq + 1:
    n = rng.randint(5, 40)
    tokens += [rng.randint(97, 122) for _ in range(n - 1)] + [256]
tokens = tokens[:seq + 1]
os.makedirs(out, exist_ok=True)
body = struct.pack(f"<{len(tokens)}H", *tokens)
h = 0xcbf29ce484222325
for b in body:
    h = ((h ^ b) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
head = b"WFTOKENS" + struct.pack("<IIIIQQ", 1, 64, 2, 257, len(tokens), h) + bytes(24)
for name in ("train.bin", "val.bin"):
    with open(os.path.join(out, name), "wb") as f:
        f.write(head + body)
with open(os.path.join(out, "tokens.txt"), "w") as f:
    f.write(" ".join(map(str, tokens)))
PY

cat >"$work/three.toml" <<TOML
[model]
layers = 3
dim = 32
heads = 4
kv_heads = 4
window = 12
window_layers = [0]
[train]
seq = $seq
batch = 1
steps = 2
lr = 3e-3
eval_every = 0
dtype = "fp32"
packing = "documents"
[data]
dir = "$work/one"
[parallel]
sp = 4
layout = "strategy"
TOML

# reference NAME LAYOUT: every step's work_imbalance of run NAME against the pair-by-pair count.
reference() {
  python3 - "$work/$1/metrics.jsonl" "$work/one/tokens.txt" "$seq" "$2" <<'PY' || err "$1: work_imbalance"
import json, sys
metrics, tokens, seq, layout = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
P, W = 4, 12
tok = list(map(int, open(tokens).read().split()))[:seq]
doc, d = [], 0
for t in tok:  # a document ends after each end-of-text token
    doc.append(d)
    d += t == 256
n = seq // P
if layout == "contiguous":
    rows = [range(r * n, (r + 1) * n) for r in range(P)]
else:  # zigzag: chunks r and 2P - 1 - r of 2P
    c = seq // (2 * P)
    rows = [list(range(r * c, (r + 1) * c)) + list(range((2 * P - 1 - r) * c, (2 * P - r) * c))
            for r in range(P)]
def work(window):
    return [sum(1 for i in rs for j in range(i + 1)
                if doc[i] == doc[j] and (window == 0 or i - j < window)) for rs in rows]
g, w = work(0), work(W)
want = (2 * max(g) + max(w)) / (2 * sum(g) / P + sum(w) / P)
first = max(g) / (sum(g) / P)
got = [json.loads(l)["work_imbalance"] for l in open(metrics)]
print(f"{layout}: work_imbalance {got}, reference {want:.12f} (global layers alone {first:.6f}, "
      f"windowed alone {max(w) / (sum(w) / P):.6f})")
assert len(got) == 2, f"{len(got)} steps"
assert abs(first - want) > 1e-3, "the reference does not tell the whole step from the global layers"
for x in got:
    assert abs(x - want) <= 1e-9 * want, f"work_imbalance {x} is not the whole step's {want}"
PY
}
RUN_CONFIG=$work/three.toml
run ring 4 parallel.strategy=ring
reference ring contiguous
run zigzag 4 parallel.strategy=zigzag
reference zigzag zigzag
# One rank: 1.
run p1 1 parallel.sp=1
[ "$(imbalances "$work/p1" | sort -u)" = "1.0" ] || err "P = 1: work_imbalance $(imbalances "$work/p1")"

# The memory check: the estimate in the one error line of --max-memory 1e-6 (GiB).
need() {  # need OVERRIDES...: the GiB the check says the config needs
  local sets=() out rc
  for s in "$@"; do sets+=(--set "$s"); done
  out=$(mpi 4 train --config "$work/three.toml" --out "$work/mem" --progress none \
    --max-memory 1e-6 --set train.seq=4096 --set model.dim=64 --set model.heads=8 \
    --set model.kv_heads=8 --set model.layers=2 --set data.dir="$work/docs" "${sets[@]}" 2>&1)
  rc=$?
  [ $rc -eq 2 ] || err "memory check of $*: exit $rc, expected 2: $out"
  [ "$(echo "$out" | grep -c "error:")" -eq 1 ] || err "memory check of $*: not one error line: $out"
  echo "$out" | grep -o 'needs about [0-9.e+-]* GiB' | awk '{print $3}'
}
prepare_doc_corpus
none=$(need model.window=0 "model.window_layers=[]")
both=$(need model.window=512 "model.window_layers=[0]")
windowed=$(need model.window=512 "model.window_layers=[0,1]")
batch2=$(need model.window=512 "model.window_layers=[0]" train.batch=2)
echo "memory estimate (GiB): no window $none, window on every layer $windowed, on layer 0 only" \
  "(two sets of attentions) $both, the same with 2 packed sequences per rank $batch2"
awk -v a="$none" -v b="$both" -v c="$windowed" -v d="$batch2" 'BEGIN {
  if (!(b > a && b > c)) { print "FAIL: two sets of attentions are not counted: " a " " c " " b; exit 1 }
  if (!(d > b)) { print "FAIL: one attention per packed sequence is not counted: " b " " d; exit 1 } }' ||
  fail=1
exit $fail
