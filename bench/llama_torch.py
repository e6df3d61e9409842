#!/usr/bin/python3
"""transformers' LlamaForCausalLM (PyTorch, CPU, scaled_dot_product_attention) timed over a few
training steps (forward, cross-entropy on the next tokens, backward, AdamW) on random tokens: the
peer of `wallfacer train` with model.arch = "llama" in bench/llama_train.sh. Prints one line
`torch tokens/s X`, and with --json a last line, a JSON object with the model, the tokens/s, the
versions and the CPU capability PyTorch's kernels use. Usage (in the venv of bench/hf_venv.sh):
  python bench/llama_torch.py --layers 8 --dim 512 --heads 8 --kv-heads 4 --intermediate 1536 \
      --vocab 32000 --seq 4096 --steps 2 --threads 2 [--dtype fp32|bf16] [--json]
--dtype bf16 runs the forward and backward under bf16 autocast (fp32 master weights and AdamW
state, as wallfacer's train.dtype = "bf16").
"""
import argparse
import json

import torch
import torch.nn.functional as F
import transformers

from gpt_torch import train_tokens_per_s


def main():
    ap = argparse.ArgumentParser()
    for k, v in dict(layers=8, dim=512, heads=8, kv_heads=4, intermediate=1536, vocab=32000,
                     seq=4096, batch=1, steps=2, threads=2).items():
        ap.add_argument("--" + k.replace("_", "-"), type=int, default=v)
    ap.add_argument("--rope-theta", type=float, default=500000.0)
    ap.add_argument("--dtype", choices=["fp32", "bf16"], default="fp32")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(
        vocab_size=a.vocab, hidden_size=a.dim, intermediate_size=a.intermediate,
        num_hidden_layers=a.layers, num_attention_heads=a.heads, num_key_value_heads=a.kv_heads,
        max_position_embeddings=a.seq, rms_norm_eps=1e-5, rope_theta=a.rope_theta,
        tie_word_embeddings=False, attention_bias=False, mlp_bias=False)
    cfg._attn_implementation = "sdpa"
    model = transformers.LlamaForCausalLM(cfg)
    model.train()
    params = sum(p.numel() for p in model.parameters())
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, {a.dtype}, "
          f"{params / 1e6:.1f}M parameters, cpu capability "
          f"{torch.backends.cpu.get_cpu_capability()}", flush=True)

    def loss_of(inputs, targets):
        logits = model(input_ids=inputs, use_cache=False).logits
        return F.cross_entropy(logits.float().reshape(-1, a.vocab), targets.reshape(-1))

    tps = train_tokens_per_s(loss_of, model.parameters(), a.vocab, a.batch, a.seq, a.steps,
                             a.dtype == "bf16", lr=1e-4, betas=(0.9, 0.95), weight_decay=0.1)
    print(f"torch tokens/s {tps:.1f}")
    if a.json:
        print(json.dumps({"tool": "torch", "torch_version": torch.__version__,
                          "transformers_version": transformers.__version__,
                          "torch_cpu_capability": torch.backends.cpu.get_cpu_capability(),
                          "layers": a.layers, "dim": a.dim, "heads": a.heads,
                          "kv_heads": a.kv_heads, "intermediate": a.intermediate,
                          "vocab": a.vocab, "params": params, "seq": a.seq, "batch": a.batch,
                          "steps": a.steps, "threads": a.threads, "dtype": a.dtype,
                          "tokens_per_s": tps}))


if __name__ == "__main__":
    main()
