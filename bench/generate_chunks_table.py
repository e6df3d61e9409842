#!/usr/bin/env python3
"""The table of docs/generate.md ("Memory") from the JSON lines that bench/generate_chunks.sh
appends to its OUT/results.jsonl:

  python3 bench/generate_chunks_table.py docs/data/generate-chunks.jsonl

One row per --prefill-chunk asked (0: the prompt in one piece): the chunks the prefill ran and
their length, how many of the later chunks ran pass-KV and pass-Q, the time to first token (the
median over the rounds) and its ratio to the prefill in one piece (the median of the ratios within
each round), generate's memory estimate per rank, the largest rank's peak resident set and its KV
cache shard.
"""
import collections
import json
import sys

from generate_table import caps_text, model_text
from kernels_table import context, load_after, med, rounds_text


def main():
    rows = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
    if not rows:
        sys.exit("generate_chunks_table.py: no runs")
    # chunk asked -> round -> row
    runs = collections.defaultdict(dict)
    for r in rows:
        runs[r["chunk_asked"]][r["round"]] = r
    whole = runs.get(0, {})
    mb = 1e6
    print("| prompt tokens | ranks | chunks x tokens | later chunks pass-KV / pass-Q | "
          "time to first token (s) | vs one piece | estimate per rank (MB) | "
          "peak RSS per rank (MB) | KV cache per rank (MB) |")
    print("|---:|---:|---|---:|---:|---:|---:|---:|---:|")
    for chunk in sorted(runs, key=lambda c: (c != 0, -c)):
        rs = runs[chunk]
        r0 = next(iter(rs.values()))
        t = med([r["ttft_ms"] / 1e3 for r in rs.values()])
        q = [r["ttft_ms"] / whole[k]["ttft_ms"] for k, r in rs.items() if k in whole]
        shape = ("1 (one piece)" if r0["prefill_chunks"] == 1 else
                 f"{r0['prefill_chunks']} x {r0['prefill_chunk_tokens']:,}")
        later = ("-" if r0["prefill_chunks"] == 1 else
                 f"{r0['prefill_pass_kv_chunks']} / {r0['prefill_pass_q_chunks']}")
        print(f"| {r0['prompt_tokens']:,} | {r0['ranks']} | {shape} | {later} | {t:.2f} | "
              f"{med(q):.2f}x | {r0['memory_estimate_bytes'] / mb:.1f} | "
              f"{med([r['peak_rss_bytes_per_rank'] / mb for r in rs.values()]):.1f} | "
              f"{r0['cache_bytes_per_rank'] / mb:.2f} |")
    r0 = rows[0]
    extra = [model_text(r0["model"]),
             f"{r0['strategy']} prefill, greedy, {rounds_text(len({r['round'] for r in rows}))}",
             *caps_text(rows), load_after(rows)]
    print()
    print(context(rows, extra))


if __name__ == "__main__":
    main()
