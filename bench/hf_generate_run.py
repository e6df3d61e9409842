#!/usr/bin/env python3
"""Greedy generation with transformers (PyTorch) on one process, timed as `wallfacer generate
--json` times itself, for bench/generate_vs_llama_cpp.sh:

  python bench/hf_generate_run.py HF_FOLDER PROMPT.npy --max-new N --threads T [--bf16]

Runs in the transformers virtual environment (bench/hf_venv.sh). The model is loaded from the
Hugging Face folder in fp32 with scaled_dot_product_attention; --bf16 runs it under CPU bf16
autocast. The prompt's forward pass with a KV cache (use_cache) and the greedy token from its last
logits make the time to first token; then N - 1 more tokens, one forward of one row each against
the cache (the decode). Prints one JSON object: tokens, prompt_tokens, ttft_ms,
prefill_tokens_per_s, decode_ms, decode_tokens_per_s, threads, dtype, torch_version,
transformers_version.
"""
import argparse
import contextlib
import json
import time

import numpy as np
import torch
import transformers


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folder")
    ap.add_argument("prompt")
    ap.add_argument("--max-new", type=int, required=True)
    ap.add_argument("--threads", type=int, required=True)
    ap.add_argument("--bf16", action="store_true")
    a = ap.parse_args()
    if a.max_new < 1:
        ap.error("--max-new must be at least 1")
    torch.set_num_threads(a.threads)
    model = transformers.AutoModelForCausalLM.from_pretrained(
        a.folder, dtype=torch.float32, attn_implementation="sdpa").eval()
    ids = torch.tensor(np.load(a.prompt).reshape(1, -1).astype(np.int64))
    ctx = (torch.autocast("cpu", dtype=torch.bfloat16) if a.bf16 else contextlib.nullcontext())
    with torch.inference_mode(), ctx:
        t0 = time.perf_counter()
        out = model(input_ids=ids, use_cache=True, logits_to_keep=1)
        cache = out.past_key_values
        tokens = [int(out.logits[0, -1].float().argmax())]
        ttft = time.perf_counter() - t0
        t1 = time.perf_counter()
        while len(tokens) < a.max_new:
            out = model(input_ids=torch.tensor([[tokens[-1]]]), past_key_values=cache,
                        use_cache=True)
            cache = out.past_key_values
            tokens.append(int(out.logits[0, -1].float().argmax()))
        decode = time.perf_counter() - t1
    n = ids.shape[1]
    print(json.dumps({
        "tokens": tokens, "prompt_tokens": n, "ttft_ms": ttft * 1e3,
        "prefill_tokens_per_s": n / ttft, "decode_ms": decode * 1e3,
        "decode_tokens_per_s": (len(tokens) - 1) / decode if len(tokens) > 1 and decode > 0 else 0.0,
        "threads": a.threads, "dtype": "bf16" if a.bf16 else "fp32",
        "torch_version": torch.__version__, "transformers_version": transformers.__version__}))


if __name__ == "__main__":
    main()
