#!/usr/bin/env python3
"""Writes a Llama checkpoint in Hugging Face form (`wallfacer export-hf`: config.json and
model.safetensors) as a GGUF file that llama.cpp loads, with the same weights in fp32, so that
bench/generate_vs_llama_cpp.sh runs both engines on one model:

  python bench/gguf_from_hf.py HF_FOLDER OUT.gguf

Runs in the llama.cpp virtual environment (bench/llama_cpp_venv.sh: the gguf, safetensors and
numpy packages). What it writes:
  - the model's shape and constants under llama.cpp's "llama" architecture (context length: at
    least 2^20, the positions a benchmark may use; width,
    layers, SwiGLU width, heads, K,V heads, RMSNorm eps, rope_theta); a rope_scaling other than
    none is refused (llama.cpp takes llama3 scaling as a table of frequencies, not written here);
  - the tensors under llama.cpp's names, fp32. Hugging Face's q and k rows rotate the pairs
    (i, i + D/2) of each head; llama.cpp's "llama" rotary embedding rotates (2i, 2i+1): the rows of
    each head are reordered to match (row i of the first half goes to 2i, of the second to 2i+1);
  - a placeholder vocabulary of the model's size (token "<id>" for each id, SentencePiece type,
    no merges): the benchmark gives token ids, never text, so only its size matters.
"""
import json
import os
import sys

import gguf
import numpy as np
from safetensors.numpy import load_file


def interleave_halves(w, heads):
    """Rows (heads * D, C) from rotate-half order to adjacent pairs, per head."""
    d = w.shape[0] // heads
    return w.reshape(heads, 2, d // 2, -1).transpose(0, 2, 1, 3).reshape(w.shape)


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: gguf_from_hf.py HF_FOLDER OUT.gguf")
    folder, out = sys.argv[1:]
    cfg = json.load(open(os.path.join(folder, "config.json")))
    if cfg.get("model_type") != "llama":
        sys.exit(f"gguf_from_hf.py: model_type {cfg.get('model_type')!r}: only llama is written")
    if cfg.get("rope_scaling"):
        sys.exit("gguf_from_hf.py: rope_scaling is not written: export a model without it")
    t = load_file(os.path.join(folder, "model.safetensors"))
    H, Hkv, L = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["num_hidden_layers"]
    w = gguf.GGUFWriter(out, "llama")
    # The rotary embedding has no length of its own; llama.cpp warns below its context length.
    w.add_context_length(max(int(cfg["max_position_embeddings"]), 1 << 20))
    w.add_embedding_length(int(cfg["hidden_size"]))
    w.add_block_count(L)
    w.add_feed_forward_length(int(cfg["intermediate_size"]))
    w.add_head_count(H)
    w.add_head_count_kv(Hkv)
    w.add_rope_dimension_count(int(cfg["hidden_size"]) // H)
    w.add_rope_freq_base(float(cfg.get("rope_theta", 10000.0)))
    w.add_layer_norm_rms_eps(float(cfg["rms_norm_eps"]))
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    V = int(cfg["vocab_size"])
    w.add_tokenizer_model("llama")
    w.add_token_list([f"<{i}>".encode() for i in range(V)])
    w.add_token_scores([0.0] * V)
    w.add_token_types([gguf.TokenType.NORMAL] * V)
    w.add_bos_token_id(0)
    w.add_eos_token_id(V - 1)
    w.add_add_bos_token(False)

    def put(name, key, fix=None):
        a = np.ascontiguousarray(t[key].astype(np.float32))
        w.add_tensor(name, fix(a) if fix is not None else a)

    put("token_embd.weight", "model.embed_tokens.weight")
    for i in range(L):
        p = f"model.layers.{i}."
        put(f"blk.{i}.attn_norm.weight", p + "input_layernorm.weight")
        put(f"blk.{i}.attn_q.weight", p + "self_attn.q_proj.weight",
            lambda a: np.ascontiguousarray(interleave_halves(a, H)))
        put(f"blk.{i}.attn_k.weight", p + "self_attn.k_proj.weight",
            lambda a: np.ascontiguousarray(interleave_halves(a, Hkv)))
        put(f"blk.{i}.attn_v.weight", p + "self_attn.v_proj.weight")
        put(f"blk.{i}.attn_output.weight", p + "self_attn.o_proj.weight")
        put(f"blk.{i}.ffn_norm.weight", p + "post_attention_layernorm.weight")
        put(f"blk.{i}.ffn_gate.weight", p + "mlp.gate_proj.weight")
        put(f"blk.{i}.ffn_up.weight", p + "mlp.up_proj.weight")
        put(f"blk.{i}.ffn_down.weight", p + "mlp.down_proj.weight")
    put("output_norm.weight", "model.norm.weight")
    put("output.weight", "lm_head.weight" if "lm_head.weight" in t else "model.embed_tokens.weight")
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(f"gguf_from_hf.py: {out}: {L} layers, {V} tokens, fp32")


if __name__ == "__main__":
    main()
