#!/usr/bin/env python3
"""The table of docs/models.md ("Sequence-parallel fine-tuning on an emulated cluster") from the
JSON lines that bench/llama_sp.sh appends to its OUT/results.jsonl:

  python3 bench/llama_sp_table.py docs/data/llama-sp.jsonl

One row per seq and configuration: tokens/s of the steps after each run's first (median over the
rounds), the ratio to zigzag at the same seq (the median of the ratios within each round), the
seconds of those steps, the bytes the nodes' cards sent per step (both nodes, the whole run's count
over its steps: the start-up and the gradient all-reduce included) beside the schedules' count of
the attention's bytes across nodes (layers x one forward and one backward, `wallfacer attn
--count`), and the first step's loss (the same weights and data in every configuration).
"""
import collections
import json
import statistics
import sys

from kernels_table import context, load_after, med, rounds_text, span

LABELS = {"wallfacer2": "WallFacer-2", "zigzag": "zigzag", "ulysses2-zigzag": "Ulysses 2 x zigzag"}


def dense_weights(m):
    """One Llama layer's dense weights: Q and O, K and V (grouped), the SwiGLU's three."""
    hd = m["dim"] // m["heads"]
    return (2 * m["dim"] * m["dim"] + 2 * m["dim"] * m["kv_heads"] * hd +
            3 * m["dim"] * m["intermediate"])


def params(m):
    """The Llama model's parameters: embedding, untied LM head, the layers (their dense weights
    and two norms), the final norm."""
    layer = dense_weights(m) + 2 * m["dim"]
    return 2 * m["vocab"] * m["dim"] + m["layers"] * layer + m["dim"]


def main():
    rows = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
    configs = list(dict.fromkeys(r["config"] for r in rows))
    # (seq, config) -> round -> row
    runs = collections.defaultdict(dict)
    for r in rows:
        runs[(r["seq"], r["config"])][r["round"]] = r
    print("| seq | configuration | tokens/s | vs zigzag | s per step | MB across nodes per step: "
          "cards / attention schedule | loss at step 1 |")
    print("|---:|---|---:|---:|---:|---:|---:|")
    notes = []
    for seq in sorted({r["seq"] for r in rows}):
        base = runs.get((seq, "zigzag"), {})
        for c in configs:
            rs = runs.get((seq, c))
            if not rs:
                continue
            tps = med([r["tokens_per_s"] for r in rs.values()])
            q = [rs[k]["tokens_per_s"] / base[k]["tokens_per_s"] for k in rs if k in base]
            if c != "zigzag" and len(q) > 1:
                notes.append(f"{LABELS[c]} at {seq:,}: {span(q)}")
            secs = med([statistics.mean(r["step_s"][1:] or r["step_s"]) for r in rs.values()])
            cards = [sum(r["card_bytes"]) / r["steps"] for r in rs.values() if "card_bytes" in r]
            r0 = next(iter(rs.values()))
            sched = r0["model"]["layers"] * sum(r0["schedule_inter_node_bytes_per_layer"].values())
            card_text = f"{med(cards) / 1e6:.1f}" if cards else "-"
            print(f"| {seq:,} | {LABELS[c]} | {tps:,.0f} | "
                  f"{f'{med(q):.2f}x' if q else '-'} | {secs:.1f} | {card_text} / "
                  f"{sched / 1e6:.1f} | {r0['loss'][0]:.4f} |")
    r0 = rows[0]
    m = r0["model"]
    extra = [f"model.arch llama: {m['layers']} layers, dim {m['dim']}, {m['heads']} heads "
             f"({m['kv_heads']} K,V), SwiGLU {m['intermediate']}, vocab {m['vocab']}, "
             f"{params(m) / 1e6:.2f}M parameters, llama3 rope scaling from "
             f"{m['rope_scaling']['original_max_position_embeddings']} positions to seq",
             f"{r0['ranks']} ranks (sp), batch 1, attention checkpointing, dtype "
             f"{'/'.join(sorted({r['dtype'] for r in rows}))}, "
             f"{r0['steps'] - 1} timed steps after one per run, "
             f"{rounds_text(len({r['round'] for r in rows}))}"]
    if r0.get("cluster"):
        nodes, rate = r0["cluster"].split(":")
        extra.append(f"{nodes} emulated nodes with cards of {rate}")
    if r0.get("cpu_per_rank"):
        extra.append(f"each rank capped at {r0['cpu_per_rank']:g} of a core (--cpu-per-rank)")
    extra.append(load_after(rows))
    if notes:
        print("\nRatios to zigzag per round: " + "; ".join(notes) + ".")
    print()
    print(context(rows, extra))


if __name__ == "__main__":
    main()
