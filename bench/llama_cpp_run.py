#!/usr/bin/env python3
"""Greedy generation with llama.cpp (llama-cpp-python) on one process, timed as `wallfacer
generate --json` times itself, for bench/generate_vs_llama_cpp.sh:

  python bench/llama_cpp_run.py MODEL.gguf PROMPT.npy --max-new N --threads T [--flash-attn]
                                [--batch 512] [--logits FILE.npy]

Runs in the llama.cpp virtual environment (bench/llama_cpp_venv.sh). The prompt's ids are
evaluated in batches of --batch (llama.cpp's n_batch and n_ubatch), then the greedy token (the
lowest id among equal logits) is drawn from the last position's logits: that is the time to first
token; then N - 1 more tokens, one evaluation each (the decode). Prints one JSON object: tokens,
prompt_tokens, ttft_ms, prefill_tokens_per_s, decode_ms, decode_tokens_per_s, threads, batch,
flash_attn, llama_cpp_version. --logits writes the logits every token was drawn from, (N, V)
fp32, as `wallfacer generate --logits` does.
"""
import argparse
import json
import time

import llama_cpp
import numpy as np


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model")
    ap.add_argument("prompt")
    ap.add_argument("--max-new", type=int, required=True)
    ap.add_argument("--threads", type=int, required=True)
    ap.add_argument("--batch", type=int, default=512)
    ap.add_argument("--flash-attn", action="store_true")
    ap.add_argument("--logits", help="write the logits of every drawn token here (.npy)")
    a = ap.parse_args()
    if a.max_new < 1:
        ap.error("--max-new must be at least 1")
    prompt = [int(x) for x in np.load(a.prompt).reshape(-1)]
    # llama.cpp rounds the context down to a multiple of 256: ask for enough.
    n_ctx = (len(prompt) + a.max_new + 255) // 256 * 256
    llm = llama_cpp.Llama(model_path=a.model, n_ctx=n_ctx, n_batch=a.batch,
                          n_ubatch=a.batch, n_threads=a.threads, n_threads_batch=a.threads,
                          flash_attn=a.flash_attn, logits_all=False, verbose=False)

    kept = []

    vocab = llm.n_vocab()

    def greedy():
        # The logits of the last evaluated position (the only output of a batch without
        # logits_all), read from llama.cpp's context.
        row = np.ctypeslib.as_array(llm._ctx.get_logits_ith(-1), shape=(vocab,)).copy()
        if a.logits:
            kept.append(row)
        return int(np.argmax(row))  # the first of equal maxima

    t0 = time.perf_counter()
    llm.eval(prompt)
    out = [greedy()]
    ttft = time.perf_counter() - t0
    t1 = time.perf_counter()
    while len(out) < a.max_new:
        llm.eval([out[-1]])
        out.append(greedy())
    decode = time.perf_counter() - t1
    if a.logits:
        np.save(a.logits, np.stack(kept))
    print(json.dumps({
        "tokens": out, "prompt_tokens": len(prompt), "ttft_ms": ttft * 1e3,
        "prefill_tokens_per_s": len(prompt) / ttft, "decode_ms": decode * 1e3,
        "decode_tokens_per_s": (len(out) - 1) / decode if len(out) > 1 and decode > 0 else 0.0,
        "threads": a.threads, "batch": a.batch, "flash_attn": a.flash_attn,
        "llama_cpp_version": llama_cpp.__version__}))


if __name__ == "__main__":
    main()
