#!/usr/bin/env python3
"""Writes a tiny random-weight LlamaForCausalLM with transformers (config.json + model.safetensors,
as save_pretrained writes them) into OUT, and TOKENS.npy: int64 (2, SEQ + 1) token ids from the
bytes of a text file, the sequences examples/llama/flow.sh scores with both programs. Run in the
venv of bench/hf_venv.sh:
  python examples/llama/make_tiny_llama.py --out DIR --text FILE --seq 1024 --tokens FILE.npy
"""
import argparse

import numpy as np
import torch
import transformers


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--text", required=True)
    ap.add_argument("--seq", type=int, required=True)
    ap.add_argument("--tokens", required=True)
    a = ap.parse_args()
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(
        vocab_size=320, hidden_size=128, intermediate_size=344, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
        rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=False, bos_token_id=256,
        eos_token_id=256)
    model = transformers.LlamaForCausalLM(cfg).to(torch.float32)
    model.save_pretrained(a.out, safe_serialization=True)
    data = np.frombuffer(open(a.text, "rb").read(), dtype=np.uint8).astype(np.int64)
    n = a.seq + 1
    np.save(a.tokens, np.stack([data[:n], data[n:2 * n]]))
    print(f"{a.out}: LlamaForCausalLM, {sum(p.numel() for p in model.parameters()):,} parameters, "
          f"trained context {cfg.max_position_embeddings}; {a.tokens}: 2 x {n} token ids")


if __name__ == "__main__":
    main()
