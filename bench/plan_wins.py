#!/usr/bin/env python3
"""Which strategy the planner picks at scale (docs/cluster.md, "When WallFacer wins at scale"):
`wallfacer plan --json` of an MHA model (configs/models/gpt-7b.toml: 32 heads, 32 K,V heads) and a
GQA-8 one (configs/models/gpt-7b-gqa8.toml: 32 heads, 8 K,V heads) at 128K and 1M tokens on 64,
256, 1,024 and 4,096 GPUs of two clusters of 512 nodes of 8:
  h100-80gb-512x8-ib      H100s with a 400 Gb/s InfiniBand card per GPU (rails)
  a100-40gb-512x8-eth100  A100s sharing one 100 Gb/s Ethernet card per node
For each run, one JSON line: the command, commit, CPU, load, the best configuration, the best of
each strategy family (ring, Ulysses, Ulysses x ring, WallFacer-C, Ulysses x WallFacer-C, double
ring) with its predicted tokens/s and the bytes one rank moves per layer, and the families with
configurations the planner did not simulate (`not_simulated`: above 1,024 devices, those without
a period whose ring is not cut, docs/planner.md, "Planning at scale"); a family's best is then the
best of those simulated, marked † in the tables.

Usage: bench/plan_wins.py [path/to/wallfacer] > docs/data/plan-wins.jsonl
       bench/plan_wins.py --table docs/data/plan-wins.jsonl    the tables of docs/cluster.md
"""
import json
import os
import subprocess
import sys
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import record  # noqa: E402  (the CPU and load fields every benchmark records)

CLUSTERS = ("docs/data/plan/h100-80gb-512x8-ib.toml", "docs/data/plan/a100-40gb-512x8-eth100.toml")
MODELS = ("configs/models/gpt-7b.toml", "configs/models/gpt-7b-gqa8.toml")
SEQS = ("128K", "1M")
GPUS = (64, 256, 1024, 4096)
FAMILIES = ("ring", "ulysses", "ulysses x ring", "wallfacer", "ulysses x wallfacer",
            "double ring")


def family(c):
    """The strategy family of a configuration of `plan --json`."""
    s = c["strategy"].removeprefix("ulysses x ")
    hybrid = c.get("ulysses", 1) > 1
    if s == "wallfacer":
        return "ulysses x wallfacer" if hybrid else "wallfacer"
    if s in ("ring", "zigzag"):
        return "ulysses x ring" if hybrid else "ring"
    return {"ulysses": "ulysses", "double-ring": "double ring"}[s]


def summary(c):
    return {"label": c["label"], "tokens_per_s": c["tokens_per_s"],
            "p2p_mb_per_layer": c["p2p_bytes_per_layer"] / 1e6,
            "coll_mb_per_layer": c["coll_bytes_per_layer"] / 1e6,
            "inter_node_mb_per_layer": c["inter_node_bytes_per_layer"] / 1e6,
            "exposed_comm_s": c["exposed_comm_s"], "step_s": c["step_s"],
            "memory_gib": c["memory_gib"]}


def run(wf):
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, check=True,
                            capture_output=True, text=True).stdout.strip()
    for cluster in CLUSTERS:
        for model in MODELS:
            for seq in SEQS:
                for gpus in GPUS:
                    cmd = [wf, "plan", "--cluster", cluster, "--model", model, "--seq", seq,
                           "--gpus", str(gpus), "--json"]
                    load = record.loadavg()
                    t0 = time.monotonic()
                    out = subprocess.run(cmd, cwd=ROOT, check=True, capture_output=True, text=True)
                    plan = json.loads(out.stdout)
                    best, unsimulated = {}, set()
                    for c in plan["configs"]:
                        f = family(c)
                        if c["feasible"]:
                            if f not in best or c["tokens_per_s"] > best[f]["tokens_per_s"]:
                                best[f] = c
                        elif c["reason"].startswith("not simulated"):
                            unsimulated.add(f)
                    print(json.dumps({
                        "command": " ".join(["wallfacer"] + cmd[1:]), "commit": commit,
                        "cluster": plan["cluster"], "model": plan["model"], "seq": plan["seq"],
                        "gpus": gpus, "wall_s": round(time.monotonic() - t0, 2), "loadavg": load,
                        **record.cpu(), "configs": len(plan["configs"]),
                        "feasible": sum(c["feasible"] for c in plan["configs"]),
                        "best": summary(plan["best"]) if plan["best"] else None,
                        "families": {f: summary(best[f]) for f in FAMILIES if f in best},
                        # Families with configurations the planner did not simulate (no period,
                        # and more devices than it simulates rank by rank).
                        "not_simulated": [f for f in FAMILIES if f in unsimulated],
                    }), flush=True)


def table(path):
    """One table per cluster: per model, tokens and GPU count, the planner's best and each family's
    best predicted tokens/s against the (zigzag) ring's, and the inter-node bytes per layer of the
    best against the ring's."""
    rows = [json.loads(line) for line in open(path)]
    for cluster in dict.fromkeys(r["cluster"] for r in rows):
        print(f"**{cluster}**\n")
        print("| model | tokens | GPUs | best (planner) | best tok/s | Ulysses × ring | WallFacer-C "
              "| Ulysses × WallFacer-C | double ring | inter-node MB/layer, best / ring |")
        print("|---|---:|---:|---|---:|---:|---:|---:|---:|---:|")
        for r in rows:
            if r["cluster"] != cluster:
                continue
            fam, best = r["families"], r["best"]
            ring = fam.get("ring")

            def rel(f):
                if f not in fam:
                    return "not simulated" if f in r.get("not_simulated", []) else "–"
                x = fam[f]
                s = x["label"].replace(" team-intra", "").replace(" ring-intra", " (ring-intra)")
                if f in r.get("not_simulated", []):  # the best of those simulated
                    s += " †"
                if not ring:
                    return s
                return f"{x['tokens_per_s'] / ring['tokens_per_s']:.2f}x {s}"
            seq = r["seq"]
            tokens = f"{seq // 1048576}M" if seq % 1048576 == 0 else f"{seq // 1024}K"
            if best is None:
                print(f"| {r['model']} | {tokens} | {r['gpus']:,} | nothing fits | – | – | – | – | "
                      "– | – |")
                continue
            inter = (f"{best['inter_node_mb_per_layer']:,.0f} / "
                     f"{ring['inter_node_mb_per_layer']:,.0f}" if ring else "–")
            print(f"| {r['model']} | {tokens} | {r['gpus']:,} | {best['label']} | "
                  f"{best['tokens_per_s']:,.0f} | {rel('ulysses x ring')} | {rel('wallfacer')} | "
                  f"{rel('ulysses x wallfacer')} | {rel('double ring')} | {inter} |")
        print()
    r0 = rows[0]
    loads = [float(r["loadavg"].split()[0]) for r in rows]
    print(f"Predicted by `wallfacer plan` (commit {', '.join(sorted({r['commit'] for r in rows}))}"
          f") on {r0['cpu']}, {r0['cpus']} cores; {len(rows)} plans in "
          f"{sum(r['wall_s'] for r in rows):.0f} s, load average {min(loads):.1f}–{max(loads):.1f}"
          " (1 min). Each family's column is its best configuration's predicted tokens/s over the "
          "best (zigzag) ring's.")
    columns = ("ulysses x ring", "wallfacer", "ulysses x wallfacer", "double ring")
    if any(f in r["families"] for r in rows for f in r.get("not_simulated", []) if f in columns):
        print("\n† The best of the family's configurations that were simulated; others were not "
              "(docs/planner.md, \"Planning at scale\").")


def main():
    args = sys.argv[1:]
    if args[:1] == ["--table"]:
        return table(args[1])
    run(args[0] if args else "build/wallfacer")


if __name__ == "__main__":
    main()
