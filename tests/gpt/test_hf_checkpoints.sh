#!/usr/bin/env bash
# import-hf and export-hf on the transformers fixtures (tests/golden/hf): import -> export ->
# import gives the same config.toml and checkpoint bytes (Llama, Mistral, Qwen2 with a window on
# one layer); the imported run continues under train --resume on 2 ranks with --set; bad folders
# (another architecture or rope_scaling type, a missing, unexpected or misshapen tensor, a
# truncated file) and a non-empty --out exit 2 with one line and write nothing. score: the
# fixtures' losses on 1 to 4 ranks with every strategy, padded lengths, bad token files.
# Usage: test_hf_checkpoints.sh WALLFACER MPIRUN WORK SOURCE_DIR
set -u
source "$(dirname "$0")/common.sh"
hf=$4/tests/golden/hf

for f in llama3 mistral qwen2-window; do
  "$wf" import-hf "$hf/$f" --out "$work/$f-a" >"$work/$f-a.log" 2>&1 || { err "import $f"; cat "$work/$f-a.log"; }
  "$wf" export-hf "$work/$f-a" --out "$work/$f-hf" >"$work/$f-hf.log" 2>&1 || { err "export $f"; cat "$work/$f-hf.log"; }
  "$wf" import-hf "$work/$f-hf" --out "$work/$f-b" >"$work/$f-b.log" 2>&1 || { err "import again $f"; cat "$work/$f-b.log"; }
  for x in config.toml ckpt/step-0/state.bin; do
    cmp -s "$work/$f-a/$x" "$work/$f-b/$x" || err "$f: $x differs after import -> export -> import"
  done
  grep -q "\"architectures\"" "$work/$f-hf/config.json" || err "$f: no architectures in config.json"
  echo "ok: $f import -> export -> import identical"
done
# A sharded set (model.safetensors.index.json and two shards, written by Python's json and struct
# from the fixture's file) imports as the single file does.
mkdir -p "$work/sharded"
python3 - "$hf/llama3" "$work/sharded" <<'PY' || err "the sharded set could not be made"
import json, struct, sys
src, dst = sys.argv[1], sys.argv[2]
raw = open(src + "/model.safetensors", "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
head = json.loads(raw[8:8 + n])
data = raw[8 + n:]
names = [k for k in head if k != "__metadata__"]
halves = [names[: len(names) // 2], names[len(names) // 2:]]
weight_map = {}
for i, part in enumerate(halves):
    file = "model-%05d-of-00002.safetensors" % (i + 1)
    h, body = {}, b""
    for k in part:
        b, e = head[k]["data_offsets"]
        h[k] = {"dtype": head[k]["dtype"], "shape": head[k]["shape"],
                "data_offsets": [len(body), len(body) + e - b]}
        body += data[b:e]
        weight_map[k] = file
    hj = json.dumps(h).encode()
    open(dst + "/" + file, "wb").write(struct.pack("<Q", len(hj)) + hj + body)
json.dump({"metadata": {}, "weight_map": weight_map}, open(dst + "/model.safetensors.index.json", "w"))
open(dst + "/config.json", "w").write(open(src + "/config.json").read())
PY
"$wf" import-hf "$work/sharded" --out "$work/sharded-run" >/dev/null || err "import of the sharded set"
cmp -s "$work/sharded-run/ckpt/step-0/state.bin" "$work/llama3-b/ckpt/step-0/state.bin" ||
  err "the sharded set imports other weights"
echo "ok: a sharded set imports as the single file"

# bf16 export: half the bytes of the weights.
"$wf" export-hf "$work/llama3-a/ckpt/step-0" --out "$work/llama3-bf16" --dtype bf16 >/dev/null ||
  err "export bf16"
grep -q '"dtype": "bfloat16"' "$work/llama3-bf16/config.json" || err "bf16 config.json"
# BF16 weights import exactly: their export in bf16 is the same file again.
"$wf" import-hf "$work/llama3-bf16" --out "$work/bf16-run" >/dev/null || err "import of bf16 weights"
"$wf" export-hf "$work/bf16-run" --out "$work/bf16-again" --dtype bf16 >/dev/null || err "export bf16 again"
cmp -s "$work/llama3-bf16/model.safetensors" "$work/bf16-again/model.safetensors" ||
  err "bf16 weights changed through import and export"
echo "ok: bf16 weights import and export unchanged"

# The imported run continues: 2 steps on 2 ranks, training settings changed with --set.
mpi 2 train --config "$work/llama3-a/config.toml" --out "$work/llama3-a" --resume --progress none \
  --set data.dir="$work/data" --set train.seq=64 --set train.batch=2 --set train.steps=2 \
  --set parallel.sp=2 --set parallel.strategy=zigzag --set train.lr=1e-3 >"$work/resume.log" 2>&1 ||
  { err "train --resume of the imported run exited $?"; cat "$work/resume.log"; }
grep -q "resumed from .*step-0 (step 0)" "$work/resume.log" || err "no resume from step 0: $(cat "$work/resume.log")"
[ "$(losses "$work/llama3-a" | wc -l)" -eq 2 ] || err "not 2 steps in metrics.jsonl"
[ -d "$work/llama3-a/ckpt/step-2" ] || err "no checkpoint of step 2"
"$wf" export-hf "$work/llama3-a" --out "$work/llama3-trained" >/dev/null || err "export after training"
echo "ok: the imported run trained 2 steps and exported"

# A context extension: mistral (max_position_embeddings 128, no rope scaling) trained at seq 256
# with linear scaling of factor 4 exports max_position_embeddings 512 (128 x 4) and that scaling;
# at seq 1024, 1024. The llama3 run above, trained at 64 of its 512, keeps 512.
"$wf" import-hf "$hf/mistral" --out "$work/long" >/dev/null || err "import of mistral"
for seq in 256 1024; do
  mpi 2 train --config "$work/long/config.toml" --out "$work/long" --resume --progress none \
    --set data.dir="$work/data" --set train.seq=$seq --set train.batch=1 --set train.steps=$((seq / 256)) \
    --set parallel.sp=2 --set parallel.strategy=zigzag --set model.rope_scaling.type=linear \
    --set model.rope_scaling.factor=4.0 --set train.eval_every=0 >"$work/long.log" 2>&1 ||
    { err "train at seq $seq exited $?"; cat "$work/long.log"; }
  "$wf" export-hf "$work/long" --out "$work/long-hf-$seq" >/dev/null || err "export at seq $seq"
done
python3 - "$work" <<'PY' || err "max_position_embeddings / rope_scaling after the context extension"
import json, sys
got = {k: json.load(open(f"{sys.argv[1]}/{k}/config.json"))
       for k in ("long-hf-256", "long-hf-1024", "llama3-trained")}
want = {"long-hf-256": 512, "long-hf-1024": 1024, "llama3-trained": 512}
for k, c in got.items():
    print(f"{k}: max_position_embeddings {c['max_position_embeddings']}, "
          f"rope_scaling {c['rope_scaling']}")
ok = all(got[k]["max_position_embeddings"] == v for k, v in want.items())
ok = ok and got["long-hf-256"]["rope_scaling"] == {"rope_type": "linear", "factor": 4.0}
sys.exit(0 if ok else 1)
PY

# bad FIXTURE NAME PYTHON-EDIT PATTERN: a copy of the fixture edited by the Python statement
# (c: its config.json as a dict; d: the folder) is refused with exit 2, one line, nothing written.
bad() {
  local f=$1 name=$2 edit=$3 pat=$4
  cp -r "$hf/$f" "$work/bad-$name"
  python3 - "$work/bad-$name" <<PY || err "$name: the edit failed"
import json, sys
d = sys.argv[1]
c = json.load(open(d + "/config.json"))
$edit
json.dump(c, open(d + "/config.json", "w"))
PY
  expect_error 2 "import-hf $name" "$pat" "$wf" import-hf "$work/bad-$name" --out "$work/out-$name"
  [ ! -e "$work/out-$name" ] || err "$name: --out was written"
}
bad llama3 arch 'c["architectures"] = ["GPTNeoXForCausalLM"]' "GPTNeoXForCausalLM"
bad llama3 yarn 'c["rope_scaling"] = {"rope_type": "yarn", "factor": 4.0}' "yarn"
bad llama3 missing 'c["num_hidden_layers"] = 3' "model.layers.2.input_layernorm.weight' is missing"
bad llama3 unexpected 'c["num_hidden_layers"] = 1' "model.layers.1.*unexpected"
bad llama3 tied 'c["tie_word_embeddings"] = True' "lm_head.weight' is unexpected"
bad llama3 shape 'c["intermediate_size"] = 80' "gate_proj.weight' has shape \[96, 64\], expected \[80, 64\]"
bad qwen2 bias 'c["architectures"] = ["LlamaForCausalLM"]; c["model_type"] = "llama"' "bias' is unexpected"
bad llama3 truncated 'import os; os.truncate(d + "/model.safetensors", 5000)' "model.safetensors"
expect_error 2 "export-hf into a folder with files" "not an empty folder" \
  "$wf" export-hf "$work/llama3-b" --out "$work/llama3-b"
expect_error 2 "import-hf into a run" "already holds a run" \
  "$wf" import-hf "$hf/llama3" --out "$work/llama3-b"
# score: the fixtures' loss.json on 1 to 4 ranks, every strategy, lengths the layout cannot split
# (padded); a prefix of one row against the loss of transformers' logits over that prefix.
python3 - "$hf" "$work" <<'PY' || err "the score inputs could not be made"
import json, struct, sys, math
hf, work = sys.argv[1], sys.argv[2]
def load(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<H", raw[8:10])[0]
    head = raw[10:10 + n].decode()
    shape = tuple(int(x) for x in head.split("'shape': (")[1].split(")")[0].split(",") if x.strip())
    code = head.split("'descr': '")[1].split("'")[0]
    fmt = {"<i8": "q", "<f4": "f"}[code]
    body = raw[10 + n:]
    return shape, struct.unpack("<%d%s" % (len(body) // struct.calcsize(fmt), fmt), body)
def save(path, ids):
    head = "{'descr': '<i8', 'fortran_order': False, 'shape': (%d,), }" % len(ids)
    head += " " * (63 - (10 + len(head)) % 64) + "\n"
    open(path, "wb").write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(head)) + head.encode() +
                           struct.pack("<%dq" % len(ids), *ids))
(B, L), tok = load(f"{hf}/llama3/tokens.npy")
(_, S, V), logits = load(f"{hf}/llama3/logits.npy")
n = 19  # positions 0..18 of row 0: 20 ids
save(f"{work}/prefix.npy", list(tok[:n + 1]))
total = 0.0
for t in range(n):
    row = logits[t * V:(t + 1) * V]
    m = max(row)
    total += m + math.log(sum(math.exp(x - m) for x in row)) - row[tok[t + 1]]
print(json.dumps({"loss": total / n}), file=open(f"{work}/prefix.json", "w"))
save(f"{work}/big-id.npy", [1, 2, 300, 4])
save(f"{work}/small-ids.npy", [5, 17, 200, 3, 44, 9, 120])
PY
# score_close NAME WANT NP ARGS...: score --json on NP ranks within 1e-5 (relative) of WANT.
score_close() {
  local name=$1 want=$2 np=$3
  shift 3
  local out
  out=$(mpi "$np" score --json "$@" 2>&1) || { err "score $name exited $?: $out"; return; }
  python3 -c "
import json, sys
j = json.loads(sys.argv[1]); want = float(sys.argv[2])
d = abs(j['loss'] - want) / want
print('%s: loss %.7f, transformers %.7f, %.1e, %d tokens, padded seq %d' % (sys.argv[3], j['loss'], want, d, j['tokens'], j['padded_seq']))
sys.exit(0 if d <= 1e-5 else 1)" "$out" "$want" "$name" || err "score $name: $out"
}
for f in llama3 mistral qwen2-window; do
  run=$work/$f-b/ckpt/step-0
  want=$(python3 -c "import json; print(json.load(open('$hf/$f/loss.json'))['loss'])")
  for layout in "1 ring" "2 zigzag" "2 ulysses" "3 ring" "3 zigzag" "4 wallfacer --teams 2" \
    "4 wallfacer --teams 2 --placement ring-intra" "4 zigzag --ulysses 2"; do
    set -- $layout
    np=$1
    shift
    score_close "$f P=$np $*" "$want" "$np" --ckpt "$run" --tokens "$hf/$f/tokens.npy" --strategy "$@"
  done
done
want=$(python3 -c "import json; print(json.load(open('$work/prefix.json'))['loss'])")
score_close "llama3 prefix of 19 P=4 zigzag" "$want" 4 --ckpt "$work/llama3-b" \
  --tokens "$work/prefix.npy" --strategy zigzag
expect_error 2 "score: an id past the vocabulary" "id 300 at index 2" \
  mpi 2 score --ckpt "$work/llama3-b" --tokens "$work/big-id.npy"
expect_error 2 "score: a layout that does not fit" "heads" \
  mpi 4 score --ckpt "$work/llama3-b" --tokens "$hf/llama3/tokens.npy" --strategy ulysses
# A GPT checkpoint: score takes it, export-hf refuses it.
run gpt 1 train.steps=1 train.ckpt_every=1 train.eval_every=0
out=$(mpi 2 score --ckpt "$work/gpt" --tokens "$work/small-ids.npy" --json 2>&1) ||
  err "score of a GPT checkpoint: $out"
expect_error 2 "export-hf of a GPT checkpoint" "not a model.arch = 'llama'" \
  "$wf" export-hf "$work/gpt" --out "$work/gpt-hf"
exit $fail
