#!/usr/bin/env python3
"""Markdown tables of bench/rails.sh results:

    rails_table.py RESULTS.jsonl [CALIBRATED_DIR]            every run, one table per cluster
    rails_table.py --summary RESULTS.jsonl [CALIBRATED_DIR] [--first-pass EARLIER.jsonl]
                                                             one line per cluster, the errors
                                                             (and an earlier pass's)
    rails_table.py --calibration CALIBRATE.jsonl             the cards that tune --calibrate found
    rails_table.py --plan PLAN.jsonl                         a `plan --json` ranking, best first
    rails_table.py --counts RESULTS.jsonl                    the schedules' busiest card, in K,V blocks

One table per cluster (N nodes x R ranks) and card count K: each configuration's measured time
(the iteration: the slowest rank's forward + backward, median of the iterations; runs recorded
before attn printed it: the slowest forward plus the slowest backward) and its speed against zigzag, the frozen planner's
prediction and its speed against zigzag's prediction, the prediction's error, and the busiest
card's bytes per iteration, sent and received, measured on the veths beside the schedule's count.
CALIBRATED_DIR (default docs/data/rails): where plan-NxR-kK.json lies; the planner's best is set
beside the fastest measured."""
import json
import os
import sys
from attn_times import measured_ms


def label(r):
    s = r["strategy"]
    kv = " keep-kv" if r.get("keep_kv") else ""
    if r["ulysses"] > 1 and s == "wallfacer":
        return f"ulysses{r['ulysses']} x wallfacer C={r['C']}{kv} {r['placement']}"
    if r["ulysses"] > 1:
        return f"ulysses{r['ulysses']} x {s} {r['placement']}"
    if s == "wallfacer":
        return f"wallfacer C={r['C']}{kv} {r['placement']}"
    if s == "double-ring":
        return f"double-ring W={r['inner']}"
    return s


def total(t):
    return t["fwd"] + t["bwd"]


def busiest(per_node):
    return max(max(node) for node in per_node)


def cpu_of(rs):
    """'; on CPU (flags)' for rows that record their CPU (bench/record.py's cpu()), else ''."""
    cpus = sorted({f"{r['cpu']}, {' '.join(r['cpu_flags'])}" for r in rs if "cpu" in r})
    return f"; on {' / '.join(cpus)}" if cpus else ""


def load(path):
    """Runs grouped by (cluster, cards per node), in file order; the last run of a configuration
    counts (a rerun replaces an earlier one)."""
    groups = {}
    for line in open(path):
        if line.strip():
            r = json.loads(line)
            groups.setdefault((r["cluster"], r["cards_per_node"]), {})[r["config"]] = r
    return {k: list(v.values()) for k, v in groups.items()}


def plan_best(caldir, key):
    plan_file = os.path.join(caldir, f"plan-{key[0]}-k{key[1]}.json")
    if not os.path.exists(plan_file):
        return None
    best = json.load(open(plan_file))["best"]
    return best["label"] + (" keep-kv" if best.get("keep_kv") else "")


def summary(path, caldir, first_pass=None):
    print("| nodes x ranks | cards per node | zigzag ms | WallFacer-2 keep-kv: measured / predicted "
          "vs zigzag | WallFacer-4 keep-kv: measured / predicted | best hybrid: measured / "
          "predicted | busiest card MB per iter: zigzag / WF-2 kkv / best hybrid | fastest measured "
          "| `plan`'s best |")
    print("|---|---:|---:|---:|---:|---:|---:|---|---|")
    for key, rs in load(path).items():
        base = next((r for r in rs if r["config"] == "zigzag"), None)
        if not base:
            continue
        bt, bp = measured_ms(base), total(base["predicted_ms"])

        def best_of(pred):
            c = [r for r in rs if pred(r)]
            return min(c, key=measured_ms) if c else None

        def cell(r):
            if not r:
                return "-"
            return (f"{bt / measured_ms(r):.2f}x / {bp / total(r['predicted_ms']):.2f}x "
                    f"({r['placement']})")

        def card(r):
            return f"{busiest(r['measured_card_bytes']['sent']) / 1e6:.1f}" if r else "-"

        w2 = best_of(lambda r: r["strategy"] == "wallfacer" and r["C"] == 2 and r.get("keep_kv"))
        w4 = best_of(lambda r: r["strategy"] == "wallfacer" and r["C"] == 4 and r.get("keep_kv"))
        hy = best_of(lambda r: r["ulysses"] > 1)
        hyc = "-" if not hy else f"{cell(hy).split(' (')[0]} (u{hy['ulysses']} {hy['placement']})"
        fastest = min(rs, key=measured_ms)
        print(f"| {key[0]} | {key[1]} | {bt:.0f} | {cell(w2)} | {cell(w4)} | {hyc} | "
              f"{card(base)} / {card(w2)} / {card(hy)} | {label(fastest)} | "
              f"{plan_best(caldir, key) or '-'} |")
    errors(path, first_pass)


def error_stats(path):
    """(runs, within ±25%, lowest, highest, median) of the planner's errors over every run (the
    last run of each configuration), in percent, and the commits the runs were made at."""
    rs = [r for group in load(path).values() for r in group]
    errs = sorted(100 * (total(r["predicted_ms"]) / measured_ms(r) - 1) for r in rs)
    commits = sorted({r["commit"].split()[0].removesuffix("-dirty") for r in rs})
    return (len(errs), sum(abs(e) <= 25 for e in errs), errs[0], errs[-1],
            errs[len(errs) // 2], commits)


def errors(path, first_pass=None):
    """How far the planner's times are from the measured ones, over every run; with FIRST_PASS (the
    runs of an earlier pass on the same cluster files), that pass's errors and what changed
    since."""
    n, within, lo, hi, med, commits = error_stats(path)
    print(f"\nPredicted against measured over all {n} runs: {within} within ±25%, "
          f"errors from {lo:+.0f}% to {hi:+.0f}% (median {med:+.0f}%).", end="")
    if not first_pass:
        print()
        return
    n0, within0, lo0, hi0, med0, commits0 = error_stats(first_pass)
    print(f" The cluster files are the ones calibrated before the first run and unchanged since; "
          f"a first pass on them (commits {', '.join(commits0)}, `{first_pass}`) gave {within0} "
          f"of {n0} within ±25% (from {lo0:+.0f}% to {hi0:+.0f}%, median {med0:+.0f}%). Between "
          f"it and these runs (commits {', '.join(commits)}) the model changed, not the files: "
          "the causal contiguous ring skips the hops whose blocks no query needs (in the schedules "
          "and so in the planner's replay), and the measured time became `iteration_ms` (the "
          "slowest rank's forward + backward) instead of the slowest forward plus the slowest "
          "backward.")


def calibration(path):
    print("| nodes x ranks | cards per node | one rank alone MB/s | all ranks of node 0 at once MB/s "
          "| devices_per_nic written |")
    print("|---|---:|---:|---:|---:|")
    for line in open(path):
        c = json.loads(line)
        print(f"| {c['cluster']} | {c['cards_per_node']} | {c['alone_mb_per_s']:.2f} | "
              f"{c['together_mb_per_s']:.2f} ({c['ranks_at_once']} ranks) | {c['devices_per_nic']} |")


def plan_table(path):
    for line in open(path):
        p = json.loads(line)["plan"]
        zig = next(c for c in p["configs"] if c["label"] == "zigzag")
        print("| configuration | tokens/s | vs zigzag | inter-node MB per layer (busiest rank) |")
        print("|---|---:|---:|---:|")
        for c in p["configs"]:
            if not c["feasible"]:
                continue
            kv = " keep-kv" if c.get("keep_kv") else ""
            print(f"| {c['label']}{kv} | {c['tokens_per_s']:,.0f} | "
                  f"{c['tokens_per_s'] / zig['tokens_per_s']:.2f}x | "
                  f"{c['inter_node_bytes_per_layer'] / 1e6:,.0f} |")


def counts(path):
    """The busiest card's bytes (sent, forward and backward) as the schedules count them, in units
    of one rank's K,V block b = 2 (S/P) H_kv D elements of 4 bytes, team-intra with K,V kept."""
    groups = load(path)

    def cell(nr, k, pred):
        r = next((r for r in groups.get((nr, k), []) if pred(r)), None)
        if not r:
            return None
        b = 2 * r["seq"] / r["P"] * r["kv_heads"] * r["head_dim"] * 4
        return busiest(r["card_bytes"]["sent"]) / b

    def pair(nr, r_, pred):
        one, rails = cell(nr, 1, pred), cell(nr, r_, pred)
        return "—" if one is None or rails is None else f"{one:.1f} / {rails:.1f}"

    print("| nodes × ranks | zigzag, 1 card / R cards | WallFacer-2, 1 card / R cards | "
          "WallFacer-4, 1 card / R cards | Ulysses R × zigzag, 1 card / R cards |")
    print("|---|---:|---:|---:|---:|")
    for nr in dict.fromkeys(k[0] for k in groups):
        r_ = int(nr.split("x")[1])

        def wf(c):
            return lambda r: (r["strategy"] == "wallfacer" and r["C"] == c and r.get("keep_kv")
                              and r["placement"] == "team-intra")

        def zig(r):
            return r["config"] == "zigzag"

        def hyb(r):
            return r["ulysses"] == r_ and r["placement"] == "team-intra"

        print(f"| {nr.replace('x', '×')} | {pair(nr, r_, zig)} | {pair(nr, r_, wf(2))} | "
              f"{pair(nr, r_, wf(4))} | {pair(nr, r_, hyb)} |")


def main():
    if sys.argv[1] == "--counts":
        return counts(sys.argv[2])
    if sys.argv[1] == "--plan":
        return plan_table(sys.argv[2])
    if sys.argv[1] == "--summary":
        args, first_pass = sys.argv[2:], None
        if "--first-pass" in args:
            i = args.index("--first-pass")
            first_pass = args[i + 1]
            del args[i:i + 2]
        return summary(args[0], args[1] if len(args) > 1 else "docs/data/rails", first_pass)
    if sys.argv[1] == "--calibration":
        return calibration(sys.argv[2])
    caldir = sys.argv[2] if len(sys.argv) > 2 else "docs/data/rails"
    for key, rs in load(sys.argv[1]).items():
        n, k = key[0].split("x")
        base = next((r for r in rs if r["config"] == "zigzag"), None)
        r0 = rs[0]
        cards = key[1]
        kind = "one card per node" if cards == 1 else f"{cards} cards per node"
        print(f"\n**{n} nodes x {k} ranks, {kind}** (P = {r0['P']}, {r0['rate']} per card each way; "
              f"seq {r0['seq']}, {r0['heads']} heads of {r0['head_dim']}, causal; "
              f"load {r0['load_before']}{cpu_of(rs)}):\n")
        print("| configuration | measured ms | vs zigzag | predicted ms | predicted vs zigzag | error "
              "| busiest card MB sent / received per iter: measured | schedule | check |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|---|")
        for r in rs:
            t, p = measured_ms(r), total(r["predicted_ms"])
            vs = f"{measured_ms(base) / t:.2f}x" if base else "-"
            pvs = f"{total(base['predicted_ms']) / p:.2f}x" if base else "-"
            m = r["measured_card_bytes"]
            s = r["card_bytes"]
            print(f"| {label(r)} | {t:.0f} | {vs} | {p:.0f} | {pvs} | {100 * (p / t - 1):+.0f}% | "
                  f"{busiest(m['sent']) / 1e6:.1f} / {busiest(m['received']) / 1e6:.1f} | "
                  f"{busiest(s['sent']) / 1e6:.1f} / {busiest(s['received']) / 1e6:.1f} | "
                  f"{r.get('check') or '-'} |")
        fastest = min(rs, key=measured_ms)
        predicted = min(rs, key=lambda r: total(r["predicted_ms"]))
        line = (f"\nFastest measured: {label(fastest)}; fastest predicted among these: "
                f"{label(predicted)}.")
        best = plan_best(caldir, key)
        if best:
            line += f" `plan`'s best: {best}."
        print(line)


if __name__ == "__main__":
    main()
