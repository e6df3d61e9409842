#!/usr/bin/env python3
"""The tables of docs/generate.md ("Measured") from the JSON lines that bench/generate.sh appends
to its OUT/results.jsonl:

  python3 bench/generate_table.py docs/data/generate.jsonl [--emulated]

First table: time to first token (seconds) of each prompt length on each rank count and
configuration, with its ratio to one rank at the same length (the median of the ratios within each
round). Second table: the decode after each prompt (the tokens after the first): tokens/s, its
ratio to one rank, the bytes each rank sends in the merges of one token (all layers) and the
milliseconds a rank spends in them per token (the messages and the wait for the slowest rank's
partial; the mean over the ranks), and the largest shard of the KV cache. Medians over the rounds.
--emulated takes the runs on an emulated cluster (bench/generate.sh --emulate), else the others.
"""
import collections
import sys

import json

from kernels_table import context, load_after, med, rounds_text
from llama_sp_table import params

LABELS = {"ring": "ring", "zigzag": "zigzag", "wallfacer2": "WallFacer-2",
          "ulysses2-zigzag": "Ulysses 2 x zigzag"}


def model_text(m):
    """The context line's part naming the Llama model of a run's "model"."""
    return (f"model.arch llama: {m['layers']} layer{'s' if m['layers'] > 1 else ''}, dim "
            f"{m['dim']}, {m['heads']} heads ({m['kv_heads']} K,V), SwiGLU {m['intermediate']}, "
            f"vocab {m['vocab']}, {params(m) / 1e6:.2f}M parameters, fp32")


def caps_text(rows):
    """The context line's part naming the runs' --cpu-per-rank caps (none: no part)."""
    caps = sorted({r["cpu_per_rank"] for r in rows if r.get("cpu_per_rank")})
    return [f"each rank capped at {'/'.join(f'{c:g}' for c in caps)} of a core "
            "(--cpu-per-rank)"] if caps else []


def main():
    emulated = "--emulated" in sys.argv[2:]
    rows = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
    rows = [r for r in rows if bool(r.get("emulate")) == emulated]
    if not rows:
        sys.exit("generate_table.py: no runs " + ("on an emulated cluster" if emulated else
                                                  "outside an emulated cluster"))
    # (seq, ranks, config) -> round -> row
    runs = collections.defaultdict(dict)
    for r in rows:
        runs[(r["prompt_tokens"], r["ranks"], r["config"])][r["round"]] = r
    keys = sorted(runs, key=lambda k: (k[0], k[1], list(LABELS).index(k[2])))

    def vs_one(key, field, invert):
        one = runs.get((key[0], 1, "zigzag"), {})
        q = [(one[k][field] / r[field]) if invert else (r[field] / one[k][field])
             for k, r in runs[key].items() if k in one and r[field] > 0 and one[k][field] > 0]
        return f"{med(q):.2f}x" if q and key[1] > 1 else "-"

    print("| prompt tokens | ranks | prefill | time to first token (s) | vs 1 rank | "
          "prefill tokens/s |")
    print("|---:|---:|---|---:|---:|---:|")
    for key in keys:
        seq, P, c = key
        t = med([r["ttft_ms"] / 1e3 for r in runs[key].values()])
        print(f"| {seq:,} | {P} | {LABELS[c] if P > 1 else '-'} | {t:,.1f} | "
              f"{vs_one(key, 'ttft_ms', False)} | {seq / t:,.0f} |")
    print()
    print("| context | ranks | prefill | decode tokens/s | vs 1 rank | merge bytes per token | "
          "merge ms per token | KV cache per rank (MB) |")
    print("|---:|---:|---|---:|---:|---:|---:|---:|")
    for key in keys:
        seq, P, c = key
        rs = runs[key].values()
        tps = med([r["decode_tokens_per_s"] for r in rs])
        mb = med([r["merge_ms_per_token"] for r in rs])
        cache = med([r["cache_bytes_per_rank"] / 1e6 for r in rs])
        r0 = next(iter(rs))
        print(f"| {seq:,} | {P} | {LABELS[c] if P > 1 else '-'} | {tps:,.1f} | "
              f"{vs_one(key, 'decode_tokens_per_s', False)} | {r0['merge_bytes_per_token']:,} | "
              f"{mb:.2f} | {cache:,.1f} |")
    r0 = rows[0]
    extra = [model_text(r0["model"]),
             f"greedy, the decode is the tokens after the first, "
             f"{rounds_text(len({r['round'] for r in rows}))}"]
    if r0.get("emulate"):
        nodes, rate = r0["emulate"].split(":")
        extra.append(f"{nodes} emulated nodes with cards of {rate}")
    extra += caps_text(rows)
    periods = sorted({r["wallfacer_cpu_period_us"] for r in rows
                      if r.get("wallfacer_cpu_period_us")})
    if periods:
        extra.append("scheduling period " + "/".join(f"{p / 1000:g} ms" for p in periods))
    extra.append(load_after(rows))
    print()
    print(context(rows, extra))


if __name__ == "__main__":
    main()
