# Shared by the generate tests (after common.sh): the tiny models they generate from, and token
# files; GENERATE_TESTS, this folder, for the Python snippets' `from logits_npy import rows`.
GENERATE_TESTS=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
export GENERATE_TESTS

# train_generate_models [ARCH...]: of gpt (MHA), llama (GQA 4/2, q/k/v biases, llama3 rope
# scaling, untied head) and window (a Llama, GQA 4/2, with a sliding window of 16 on layer 1 and
# none on layer 0), the ones named (default: gpt llama), 60 steps of tiny.toml each, into
# $work/run_ARCH.
train_generate_models() {
  local arch extra archs=("$@")
  [ $# -gt 0 ] || archs=(gpt llama)
  for arch in "${archs[@]}"; do
    case $arch in
      gpt) extra=$'kv_heads = 4' ;;
      llama) extra=$'arch = "llama"\nkv_heads = 2\nintermediate = 48\ntie_embeddings = false\nqkv_bias = true\nrope_scaling = { type = "llama3", factor = 8.0, low_freq_factor = 1.0, high_freq_factor = 4.0, original_max_position_embeddings = 16 }' ;;
      window) extra=$'arch = "llama"\nkv_heads = 2\nintermediate = 48\ntie_embeddings = false\nwindow = 16\nwindow_layers = [1]' ;;
    esac
    grep -v '^kv_heads' "$work/tiny.toml" | sed -e 's/^steps = .*/steps = 60/' |
      awk -v x="$extra" '{print} /^\[model\]/{print x}' >"$work/$arch.toml"
    "$wf" train --config "$work/$arch.toml" --out "$work/run_$arch" --progress none \
      --set train.ckpt_every=60 >/dev/null 2>&1 || err "$arch: training failed"
  done
}

# ids TEXT OUT.npy [IDS...]: the text's bytes (byte-level ids), then IDS, as a 1-D int64 .npy.
ids() {
  "$py" - "$@" <<'PY'
import struct, sys
ids = list(sys.argv[1].encode()) + [int(t) for t in sys.argv[3:]]
h = "{'descr': '<i8', 'fortran_order': False, 'shape': (%d,), }" % len(ids)
h += ' ' * (63 - len(h) % 64) + '\n'
open(sys.argv[2], 'wb').write(b'\x93NUMPY\x01\x00' + struct.pack('<H', len(h)) + h.encode() +
                              struct.pack('<%dq' % len(ids), *ids))
PY
}
