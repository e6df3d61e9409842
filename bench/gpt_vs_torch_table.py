#!/usr/bin/env python3
"""The table of docs/training.md ("Speed against PyTorch") from the JSON lines that
bench/gpt_vs_torch.sh appends to its OUT:

  python3 bench/gpt_vs_torch_table.py docs/data/gpt-vs-torch.jsonl

One row per model and sequence length: tokens/s of wallfacer fp32, wallfacer bf16 and PyTorch bf16
(medians over the rounds), and the ratios as medians of the ratios within each round (the three
runs of a round follow each other), their range in the line below.
"""
import collections
import json
import sys

from kernels_table import context, med, span


def rate(x):
    """tokens/s: whole numbers from 100 on, one decimal below."""
    return f"{x:,.0f}" if x >= 100 else f"{x:.1f}"


def main():
    rows = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
    runs = ("wallfacer_fp32", "wallfacer_bf16", "torch_bf16")
    # (layers, dim, heads, seq, steps, threads) -> round -> run -> tokens/s
    cases = collections.defaultdict(lambda: collections.defaultdict(dict))
    for r in rows:
        key = (r["layers"], r["dim"], r["heads"], r["seq"], r["steps"], r["threads"])
        cases[key][r["round"]][r["run"]] = r["tokens_per_s"]
    print("| model | seq | rounds | wallfacer fp32 tokens/s | wallfacer bf16 tokens/s | "
          "PyTorch bf16 tokens/s | bf16 / fp32 | bf16 / PyTorch bf16 | fp32 / PyTorch bf16 |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    notes = []
    for key in sorted(cases, key=lambda k: (k[0], k[1], k[2], k[3])):
        layers, dim, heads, seq, steps, threads = key
        rounds = [rd for rd in cases[key].values() if all(x in rd for x in runs)]
        if not rounds:  # a round cut short: no row
            continue
        tps = {x: med([rd[x] for rd in rounds]) for x in runs}
        q = {
            "bf16/fp32": [rd["wallfacer_bf16"] / rd["wallfacer_fp32"] for rd in rounds],
            "bf16/torch": [rd["wallfacer_bf16"] / rd["torch_bf16"] for rd in rounds],
            "fp32/torch": [rd["wallfacer_fp32"] / rd["torch_bf16"] for rd in rounds],
        }
        print(f"| {layers} layers, dim {dim}, {heads} heads | {seq:,} | {len(rounds)} | "
              f"{rate(tps['wallfacer_fp32'])} | {rate(tps['wallfacer_bf16'])} | "
              f"{rate(tps['torch_bf16'])} | {med(q['bf16/fp32']):.2f}x | "
              f"{med(q['bf16/torch']):.2f}x | {med(q['fp32/torch']):.2f}x |")
        notes.append(f"seq {seq:,}: bf16 / fp32 {span(q['bf16/fp32'])}, bf16 / PyTorch bf16 "
                     f"{span(q['bf16/torch'])}, fp32 / PyTorch bf16 {span(q['fp32/torch'])}")
    print()
    print("Per round: " + "; ".join(notes) + ".")
    th = [r for r in rows if r["run"] == "torch_bf16"]
    tv = sorted({f"{r['torch_version']} (CPU capability {r['torch_cpu_capability']})" for r in th})
    print(context(rows, [f"batch 1, {rows[0]['threads']} threads, {rows[0]['steps']} timed steps "
                         "after one warm-up step", f"PyTorch {', '.join(tv)}"]))


if __name__ == "__main__":
    main()
