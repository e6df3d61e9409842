#!/usr/bin/env python3
"""Writes the small safetensors files that tests/unit/test_safetensors.cpp reads, with the Python
standard library only (struct + json), independently of wallfacer's writer:

  dtypes.safetensors        F32, BF16 and F16 tensors (subnormals, infinities, -0, NaN), an I64
                            tensor, an empty and a 0-d one, and __metadata__
  sharded/                  model.safetensors.index.json and its two shards (F32, BF16, F16)
  expected.json             every float tensor's values as the fp32 bit patterns Python's struct
                            module gives them (half and bfloat16 widened by struct, not by hand)

Usage: gen_safetensors.py [DIR]      write into DIR (default: tests/golden/safetensors)
       gen_safetensors.py --check    exit 1 unless the committed files equal what it writes
"""
import json
import os
import struct
import sys

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "safetensors")


def f32_bits(x):
    return struct.unpack("<I", struct.pack("<f", x))[0]


def f32_tensor(values):
    data = struct.pack("<%df" % len(values), *values)
    return "F32", data, [f32_bits(v) for v in values]


def f16_tensor(values):
    data = struct.pack("<%de" % len(values), *values)
    # Widened by struct: half -> double (exact) -> float (exact: every half is a float).
    widened = struct.unpack("<%de" % len(values), data)
    return "F16", data, [f32_bits(v) for v in widened]


def bf16_tensor(bits):
    # bfloat16 is the upper half of a float: the value of bits b is the float with bits b << 16.
    data = struct.pack("<%dH" % len(bits), *bits)
    widened = [struct.unpack("<f", struct.pack("<I", b << 16))[0] for b in bits]
    return "BF16", data, [f32_bits(v) for v in widened]


def safetensors_bytes(tensors, metadata=None):
    """tensors: list of (name, dtype, shape, data) in the order of their data."""
    header, offset = {}, 0
    for name, dtype, shape, data in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
    if metadata:
        header["__metadata__"] = metadata
    text = json.dumps(header, sort_keys=True, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + b"".join(t[3] for t in tensors)


def files():
    out, expected = {}, {}

    def add(tensors, name, dtype_data_bits, shape):
        dtype, data, bits = dtype_data_bits
        tensors.append((name, dtype, shape, data))
        expected[name] = {"dtype": dtype, "shape": shape, "f32_bits": bits}

    t = []
    # The data order differs from the names' order (the header's keys are sorted).
    add(t, "weight.f32", f32_tensor([1.0, -2.5, 3.1415927, 1e-40, -0.0, float("inf")]), [2, 3])
    add(t, "a.bf16", bf16_tensor([0x3F80, 0xC0A0, 0x0001, 0x7F7F, 0x8000, 0xFF80, 0x3EAB]), [7])
    add(t, "m.f16", f16_tensor([1.0, -0.333251953125, 65504.0, 2.0 ** -24, 6.0e-05, -0.0,
                                float("-inf"), float("nan")]), [2, 2, 2])
    t.append(("ids.i64", "I64", [3], struct.pack("<3q", 1, -2, 3)))
    add(t, "empty.f32", f32_tensor([]), [0, 4])
    add(t, "scalar.f16", f16_tensor([0.5]), [])
    out["dtypes.safetensors"] = safetensors_bytes(
        t, {"format": "pt", "source": "gen_safetensors.py"})

    s1, s2 = [], []
    add(s1, "model.embed_tokens.weight", bf16_tensor([0x3F80, 0x4000, 0x4040, 0x4080, 0xBF80,
                                                      0xC000]), [3, 2])
    add(s1, "model.norm.weight", f32_tensor([0.25, 0.5]), [2])
    add(s2, "lm_head.weight", f16_tensor([0.125, -8.0, 1024.0, -0.0009765625, 3.0, 7.5]), [3, 2])
    out["sharded/model-00001-of-00002.safetensors"] = safetensors_bytes(s1, {"format": "pt"})
    out["sharded/model-00002-of-00002.safetensors"] = safetensors_bytes(s2, {"format": "pt"})
    index = {"metadata": {"total_size": sum(len(x[3]) for x in s1 + s2)},
             "weight_map": {name: "model-0000%d-of-00002.safetensors" % k
                            for k, shard in ((1, s1), (2, s2)) for name, *_ in shard}}
    out["sharded/model.safetensors.index.json"] = (json.dumps(index, indent=2, sort_keys=True)
                                                   + "\n").encode()
    out["expected.json"] = (json.dumps(expected, indent=1, sort_keys=True) + "\n").encode()
    return out


def main():
    if sys.argv[1:] == ["--check"]:
        bad = []
        for name, data in files().items():
            path = os.path.join(HERE, name)
            if not os.path.exists(path) or open(path, "rb").read() != data:
                bad.append(path)
        for path in bad:
            print("differs from what gen_safetensors.py writes: %s" % path)
        return 1 if bad else 0
    root = sys.argv[1] if len(sys.argv) > 1 else HERE
    for name, data in files().items():
        path = os.path.join(root, name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(data)
    return 0


if __name__ == "__main__":
    sys.exit(main())
