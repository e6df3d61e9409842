#!/usr/bin/env python3
"""The table of docs/models.md ("Training speed against transformers") from the JSON lines that
bench/llama_train.sh appends to its OUT:

  python3 bench/llama_train_table.py docs/data/llama-train.jsonl

One row per model shape: tokens/s of wallfacer and transformers' LlamaForCausalLM in bf16 (the
kernels the CPU's dispatch picks; PyTorch under bf16 autocast) and in fp32 at the AVX2 level (both
held there by environment variables), medians over the rounds, and the ratios as medians of the
ratios within each round (the runs of a round follow each other), their range in the line below.
"""
import collections
import json
import sys

from kernels_table import context, med, span

RUNS = ("wallfacer_bf16", "torch_bf16", "wallfacer_fp32_avx2", "torch_fp32_avx2")


def rate(x):
    """tokens/s: whole numbers from 100 on, one decimal below."""
    return f"{x:,.0f}" if x >= 100 else f"{x:.1f}"


def params(layers, dim, heads, kv, inter, vocab):
    hd = dim // heads
    per_layer = dim * dim * 2 + 2 * dim * kv * hd + 3 * dim * inter + 2 * dim
    return 2 * vocab * dim + layers * per_layer + dim


def main():
    rows = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
    keys = ("layers", "dim", "heads", "kv_heads", "intermediate", "vocab", "seq", "threads")
    cases = collections.defaultdict(lambda: collections.defaultdict(dict))
    for r in rows:
        cases[tuple(r[k] for k in keys)][r["round"]][r["run"]] = r["tokens_per_s"]
    print("| model | parameters | seq | rounds | wallfacer bf16 tokens/s | transformers bf16 "
          "tokens/s | bf16 ratio | wallfacer fp32 AVX2 tokens/s | transformers fp32 AVX2 "
          "tokens/s | fp32 ratio |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    notes = []
    for key in sorted(cases, key=lambda k: (k[6], params(*k[:6]))):
        layers, dim, heads, kv, inter, vocab, seq, threads = key
        rounds = [rd for rd in cases[key].values() if all(x in rd for x in RUNS)]
        if not rounds:  # a round cut short: no row
            continue
        tps = {x: med([rd[x] for rd in rounds]) for x in RUNS}
        qb = [rd["wallfacer_bf16"] / rd["torch_bf16"] for rd in rounds]
        qf = [rd["wallfacer_fp32_avx2"] / rd["torch_fp32_avx2"] for rd in rounds]
        print(f"| {layers} layers, dim {dim}, {heads} heads ({kv} K,V), MLP {inter}, vocab "
              f"{vocab:,} | {params(*key[:6]) / 1e6:.1f}M | {seq:,} | {len(rounds)} | "
              f"{rate(tps['wallfacer_bf16'])} | {rate(tps['torch_bf16'])} | {med(qb):.2f}x | "
              f"{rate(tps['wallfacer_fp32_avx2'])} | {rate(tps['torch_fp32_avx2'])} | "
              f"{med(qf):.2f}x |")
        notes.append(f"{params(*key[:6]) / 1e6:.1f}M at seq {seq:,}: bf16 {span(qb)}, "
                     f"fp32 AVX2 {span(qf)}")
    print()
    print("Ratios per round: " + "; ".join(notes) + ".")
    th = [r for r in rows if r["tool"] == "torch"]
    tv = sorted({f"PyTorch {r['torch_version']}, transformers {r['transformers_version']} "
                 f"(CPU capability {r['torch_cpu_capability']})" for r in th})
    print(context(rows, [f"batch 1, {rows[0]['threads']} threads, {rows[0]['steps']} timed steps "
                         "after one warm-up step", *tv]))


if __name__ == "__main__":
    main()
