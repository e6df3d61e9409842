#!/usr/bin/env bash
# Bad input is refused with a one-line error and exit code 2, never accepted silently: CLI numbers
# out of range, a folder where a file is expected, token ids outside the vocabulary, damaged header
# fields, checkpoint manifests whose shard names leave the checkpoint or whose step differs.
set -u
src=$4
source "$(dirname "$0")/../gpt/common.sh"

expect2() { expect_error 2 "$@"; }
t=(train --config "$work/tiny.toml" --progress none)
cl=$src/configs/clusters/local.toml
md=$src/configs/models/gpt-3b.toml

# CLI numbers.
expect2 "plan --gpus -4" "--gpus is -4" "$wf" plan --cluster "$cl" --model "$md" --seq 8K --gpus -4
expect2 "attn --count -3" "--count is -3" "$wf" attn --count -3 --seq 64 --heads 2 --head-dim 8
expect2 "attn --progress-rows -5" "--progress-rows is -5" \
  "$wf" attn --strategy ring --seq 64 --heads 2 --head-dim 8 --progress-rows -5
expect2 "train --steps 0" "--steps is 0" "$wf" "${t[@]}" --out "$work/s0" --steps 0
expect2 "train --steps -3" "--steps is -3" "$wf" "${t[@]}" --out "$work/s0" --steps -3
expect2 "train --timeout -1" "timeout" "$wf" "${t[@]}" --out "$work/s0" --timeout -1
expect2 "train.timeout nan" "train.timeout must be >= 0" "$wf" "${t[@]}" --out "$work/s0" \
  --set train.timeout=nan
sed -e 's/^count = .*/count = 1048576/' -e 's/^devices_per_node = .*/devices_per_node = 4096/' \
  "$cl" >"$work/huge.toml"
expect2 "nodes x devices_per_node past int" "1048576 x 4096 = 4294967296 devices; at most" \
  "$wf" plan --cluster "$work/huge.toml" --model "$md" --seq 8K

sed -e 's/^count = .*/count = 2/' -e 's/^devices_per_node = .*/devices_per_node = 4096/' "$cl" >"$work/big.toml"
expect2 "plan on 8192 devices" "planning for 8192 devices would take too long.*--gpus N" \
  "$wf" plan --cluster "$work/big.toml" --model "$md" --seq 8K
expect2 "plan --model DIR" "the model file '$work' is a folder" \
  "$wf" plan --cluster "$cl" --model "$work" --seq 8K
expect2 "unknown subcommand" "unknown subcommand 'frobnicate': the subcommands are prepare, import-hf" \
  "$wf" frobnicate
a=(attn --strategy ring --seq 64 --heads 2 --head-dim 8 --iters 1)
expect2 "attn --kv-heads 3" "--heads 2 must be a multiple of --kv-heads 3" "$wf" "${a[@]}" --kv-heads 3
expect2 "attn --ulysses 3" "--ulysses 3 must divide the 1 ranks" "$wf" "${a[@]}" --ulysses 3
expect2 "attn --teams 3" "--teams 3: wallfacer needs C^2 = 9" \
  "$wf" attn --strategy wallfacer --teams 3 --seq 64 --heads 2 --head-dim 8 --count 4
expect2 "bench kernel --kv-heads 3" "--heads 4 must be a multiple of --kv-heads 3" \
  "$wf" bench kernel --seq 64 --heads 4 --kv-heads 3 --head-dim 8 --iters 1 --full
expect2 "parallel.ulysses 3" "parallel.ulysses" "$wf" "${t[@]}" --out "$work/s0" \
  --set parallel.ulysses=3

expect2 "tune --calibrate --out in a missing folder" "give --out a path in a writable folder" \
  "$wf" tune --calibrate --out "$work/none/c.toml"

# Trace files: where the JSON is bad, in words.
: >"$work/empty.json"
expect2 "trace-plot empty file" "empty.json': the file is empty" \
  "$wf" trace-plot "$work/empty.json" --out "$work/t.png"
printf '{"traceEvents": [\n{"ph": "X", "ts": 1e400}]}' >"$work/big.json"
expect2 "trace-plot 1e400" "big.json': line 2: the number 1e400 of \"ts\" is out of range" \
  "$wf" trace-plot "$work/big.json" --out "$work/t.png"
printf '{"traceEvents": [{"ph": "X"}]}' >"$work/noname.json"
expect2 "trace-plot event without a name" "trace event 1 (counting from 1) is malformed" \
  "$wf" trace-plot "$work/noname.json" --out "$work/t.png"

# Memory sized before allocating (the estimate and the limit), sizes bounded so products cannot wrap.
expect2 "model.dim = 2^20" "needs about .* GiB per process; the limit is" \
  "$wf" "${t[@]}" --out "$work/s0" --set model.dim=1048576
expect2 "model.dim = 1e9" "model.dim (1000000000) <= 1048576" \
  "$wf" "${t[@]}" --out "$work/s0" --set model.dim=1000000000
expect2 "train --max-memory" "the limit is 0.0001 GiB" \
  "$wf" "${t[@]}" --out "$work/s0" --max-memory 0.0001
expect2 "attn --head-dim 1000000" "--head-dim is 1000000" \
  "$wf" attn --strategy ring --seq 1024 --heads 1 --head-dim 1000000
expect2 "attn on 10M tokens" "attention on these shapes needs about" \
  "$wf" attn --strategy ring --seq 10000000 --heads 64 --head-dim 128
expect2 "bench --heads 2000000000" "needs about" "$wf" bench kernel --heads 2000000000

# A folder where a file is expected.
expect2 "--config DIR" "is a folder" "$wf" train --config "$work/data" --out "$work/s0"
expect2 "prepare --input DIR" "is a folder" "$wf" prepare --input "$work/data" --out "$work/p0"

# sample: a GPT checkpoint to sample from.
"$wf" "${t[@]}" --out "$work/g" --steps 2 --set train.ckpt_every=1 >/dev/null 2>&1 ||
  err "training the checkpoint failed"
expect2 "sample --temperature nan" "--temperature: the value nan is not a finite number" "$wf" sample --ckpt "$work/g" --temperature nan
expect2 "sample --temperature -1" "--temperature is -1" "$wf" sample --ckpt "$work/g" --temperature -1
expect2 "sample --tokens 2147483647" "--tokens is 2147483647" \
  "$wf" sample --ckpt "$work/g" --tokens 2147483647
expect2 "sample --tokens -1" "--tokens is -1" "$wf" sample --ckpt "$work/g" --tokens -1
expect2 "sample --out for a GPT" "--out is for a DiT" "$wf" sample --ckpt "$work/g" --out "$work/x.gif"
[ -e "$work/x.gif" ] && err "sample --out wrote a file for a GPT checkpoint"

# Token shards with bad contents but valid checksums (what a buggy writer or another tool makes).
shard() {  # shard FILE VOCAB NUM_TOKENS TOKEN...
  python3 - "$@" <<'PY'
import struct, sys
path, vocab, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
toks = b"".join(struct.pack("<H", int(t)) for t in sys.argv[4:])
h = 0xcbf29ce484222325
for b in toks:
    h = ((h ^ b) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
hdr = b"WFTOKENS" + struct.pack("<IIIIQQ", 1, 64, 2, vocab, n, h) + bytes(24)
open(path, "wb").write(hdr + toks)
PY
}
mkdir -p "$work/bad"
many=$(seq 1 300 | sed 's/.*/65/' | tr '\n' ' ')
shard "$work/bad/train.bin" 257 301 $many 300  # one id (300) past the vocabulary
shard "$work/bad/val.bin" 257 300 $many
expect2 "token id past the vocabulary" "token 300 at position 300 is outside its vocabulary of 257" \
  "$wf" "${t[@]}" --out "$work/b1" --set data.dir="$work/bad"
shard "$work/bad/train.bin" 0 300 $many
expect2 "vocabulary 0" "vocabulary 0 outside" "$wf" "${t[@]}" --out "$work/b2" --set data.dir="$work/bad"
shard "$work/bad/train.bin" 4294967295 300 $many
expect2 "vocabulary 2^32-1" "vocabulary 4294967295 outside" \
  "$wf" "${t[@]}" --out "$work/b3" --set data.dir="$work/bad"
shard "$work/bad/train.bin" 257 9223372036854775808 $many  # 2^63 tokens: 2^64 bytes wraps to 0
expect2 "token count whose size wraps" "truncated" \
  "$wf" "${t[@]}" --out "$work/b4" --set data.dir="$work/bad"
shard "$work/bad/train.bin" 257 300 $many
shard "$work/bad/val.bin" 300 300 $many
expect2 "validation vocabulary larger than the model's" "set model.vocab to at least 300" \
  "$wf" "${t[@]}" --out "$work/b5" --set data.dir="$work/bad"

# Checkpoint manifests: a shard name that leaves the checkpoint, a step that differs.
cp -r "$work/g" "$work/g2"
man="$work/g2/ckpt/step-2/manifest.json"
sed -i 's#"state.bin"#"../../../data/train.bin"#' "$man"
rm -rf "$work/g2/ckpt/step-1"
out=$("$wf" "${t[@]}" --out "$work/g2" --steps 3 --resume 2>&1); rc=$?
[ $rc -eq 1 ] || err "shard name outside the checkpoint: exit $rc, expected 1: $out"
echo "$out" | grep -q "shards\[0\].file is '../../../data/train.bin', expected 'state.bin'" ||
  err "shard name outside the checkpoint: $out"
cp -r "$work/g" "$work/g3"
rm -rf "$work/g3/ckpt/step-1"
sed -i 's#"step": 2#"step": 1#' "$work/g3/ckpt/step-2/manifest.json"
out=$("$wf" "${t[@]}" --out "$work/g3" --steps 3 --resume 2>&1); rc=$?
[ $rc -eq 1 ] || err "step differing from the manifest: exit $rc, expected 1: $out"
echo "$out" | grep -q "is of step 2, its manifest of step 1" || err "step mismatch: $out"

# Manifest keys missing or mistyped: the file and the key, in words.
manifest_error() {
  local what=$1 edit=$2 pat=$3 d="$work/m-$RANDOM"
  cp -r "$work/g" "$d"
  rm -rf "$d/ckpt/step-1"
  python3 -c "import json, sys; p = sys.argv[1]; m = json.load(open(p)); $edit; json.dump(m, open(p, 'w'))" \
    "$d/ckpt/step-2/manifest.json"
  expect_error 1 "manifest $what" "$pat" "$wf" "${t[@]}" --out "$d" --steps 3 --resume
  echo "$out" | grep -q "json.exception" && err "manifest $what: library text: $out"
}
manifest_error "step missing" "m.pop('step')" "manifest.json': key 'step' is missing"
manifest_error "step a string" "m.update(step='2')" "key 'step' must be an integer"
manifest_error "step 1e300" "m.update(step=1e300)" "key 'step' must be an integer"
manifest_error "config missing" "m.pop('config')" "key 'config' is missing"
manifest_error "fnv1a64 a float" "m['shards'][0].update(fnv1a64=1.5)" \
  "key 'shards\[0\].fnv1a64' must be a string (it is 1.5)"

[ $fail -eq 0 ] && echo "ok: bad input refused"
exit $fail
