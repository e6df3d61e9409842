#!/usr/bin/env python3
"""The table of docs/generate.md ("Against llama.cpp") from the JSON lines that
bench/generate_vs_llama_cpp.sh appends to its OUT/results.jsonl:

  python3 bench/generate_vs_llama_cpp_table.py docs/data/generate-llama-cpp.jsonl

One row per prompt length and configuration: prefill tokens/s (the prompt's length over the time to
first token) and decode tokens/s (medians over the rounds), and wallfacer's ratio to each llama.cpp
configuration (the median of the ratios within each round). Under the table: the check that both
engines ran the same model (the first token's logits after a 64-token prompt). transformers runs
the exported folder in PyTorch (scaled_dot_product_attention), fp32 or under bf16 autocast. With the
attention kernel's record (run "attn_kernel") and both engines' fp32 runs at its length, a second
table: where the fp32 prefill's time goes (fp32_budget()).
"""
import collections
import json
import sys

from kernels_table import context, load_after, med, rounds_text
from llama_sp_table import dense_weights, params

LABELS = {"wallfacer": "wallfacer", "wallfacer-bf16": "wallfacer, bf16 prefill",
          "llama.cpp": "llama.cpp",
          "llama.cpp-fa": "llama.cpp, flash attention", "transformers": "transformers, fp32",
          "transformers-bf16": "transformers, bf16 autocast"}


def fp32_budget(rows, kernel):
    """The fp32 prefill's time at the kernel's prompt length: the FLOPs of the attention (causal:
    4 S^2 / 2 D H per layer) at the rate of the attention kernel's forward, and of the dense layers
    (2 x the layers' weights per token) at the rate of the sgemm they run on (both timed in the
    same `bench kernel` run), against the time to first token of both engines in fp32 (medians over
    the rounds) and the time that 1.3x transformers' prefill allows."""
    s = kernel["seq"]
    m = rows[0]["model"]
    attn = m["layers"] * 4.0 * s * s / 2 * (m["dim"] // m["heads"]) * m["heads"]
    dense = m["layers"] * 2.0 * dense_weights(m) * s
    ttft = {c: med([r["ttft_ms"] / 1e3 for r in rows
                    if r["config"] == c and r["prompt_tokens"] == s])
            for c in ("wallfacer", "transformers")}
    compute = attn / (kernel["fwd_gflops"] * 1e9) + dense / (kernel["sgemm_gflops"] * 1e9)
    print(f"| at {s:,} tokens, fp32 | |")
    print("|---|---:|")
    print(f"| attention FLOPs (causal, {m['layers']} layers) | {attn:.3g} |")
    print(f"| dense-layer FLOPs (the prompt's rows) | {dense:.3g} |")
    print(f"| sgemm rate (the attention's product shape, {kernel['threads']} threads) | "
          f"{kernel['sgemm_gflops']:.0f} GFLOP/s |")
    print(f"| the attention kernel's forward | {kernel['fwd_gflops']:.0f} GFLOP/s "
          f"({kernel['fwd_gflops'] / kernel['sgemm_gflops']:.2f} of sgemm) |")
    print(f"| attention at the kernel's rate, dense layers at sgemm's, nothing else | "
          f"{compute:.1f} s |")
    print(f"| wallfacer's time to first token | {ttft['wallfacer']:.1f} s |")
    print(f"| transformers' time to first token | {ttft['transformers']:.1f} s |")
    print(f"| 1.3x transformers' prefill allows | {ttft['transformers'] / 1.3:.1f} s |")


def main():
    lines = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
    kernels = [r for r in lines if r.get("run") == "attn_kernel"]
    rows = [r for r in lines if r.get("run") != "attn_kernel"]
    runs = collections.defaultdict(dict)  # (seq, config) -> round -> row
    for r in rows:
        runs[(r["prompt_tokens"], r["config"])][r["round"]] = r

    def ratio(seq, c, field, mine="wallfacer"):
        wf, other = runs.get((seq, mine), {}), runs[(seq, c)]
        q = [wf[k][field] / r[field] for k, r in other.items() if k in wf and r[field] > 0]
        return f"{med(q):.2f}x" if q else "-"

    print("| prompt tokens | engine | prefill tokens/s | decode tokens/s | wallfacer fp32 / this: "
          "prefill, decode | wallfacer bf16 prefill / this |")
    print("|---:|---|---:|---:|---:|---:|")
    for seq in sorted({k[0] for k in runs}):
        for c in LABELS:
            if (seq, c) not in runs:
                continue
            rs = runs[(seq, c)].values()
            pre = med([r["prefill_tokens_per_s"] for r in rs])
            dec = med([r["decode_tokens_per_s"] for r in rs])
            mine = c.startswith("wallfacer")
            vs = "-" if mine else (f"{ratio(seq, c, 'prefill_tokens_per_s')}, "
                                   f"{ratio(seq, c, 'decode_tokens_per_s')}")
            vs16 = "-" if mine else ratio(seq, c, "prefill_tokens_per_s", "wallfacer-bf16")
            print(f"| {seq:,} | {LABELS[c]} | {pre:,.0f} | {dec:,.1f} | {vs} | {vs16} |")
    r0 = rows[0]
    m = r0["model"]
    ck = r0["check"]
    versions = sorted({r["llama_cpp_version"] for r in rows if r.get("llama_cpp_version")})
    torch_v = sorted({f"PyTorch {r['torch_version']}, transformers {r['transformers_version']}"
                      for r in rows if r.get("torch_version")})
    extra = [f"model.arch llama: {m['layers']} layers, dim {m['dim']}, {m['heads']} heads "
             f"({m['kv_heads']} K,V), SwiGLU {m['intermediate']}, vocab {m['vocab']}, "
             f"{params(m) / 1e6:.1f}M parameters, fp32 weights in every engine (wallfacer's bf16 "
             "prefill rounds them to bf16 for its products)",
             f"{r0['threads']} threads, greedy, {rounds_text(len({r['round'] for r in rows}))}",
             f"llama-cpp-python {'/'.join(versions)}", *torch_v,
             f"the same model: first token's logits after {ck['prompt_tokens']} tokens differ by "
             f"at most {ck['max_abs_diff']:.1e} (largest logit {ck['max_abs_logit']:.2f}), "
             f"greedy token {'the same' if ck['same_greedy'] else 'different'}"]
    extra.append(load_after(rows))
    print()
    print(context(rows, extra))
    fp32_at = {(r["config"], r["prompt_tokens"]) for r in rows}
    if kernels and {("wallfacer", kernels[-1]["seq"]),
                    ("transformers", kernels[-1]["seq"])} <= fp32_at:
        print()
        fp32_budget(rows, kernels[-1])


if __name__ == "__main__":
    main()
