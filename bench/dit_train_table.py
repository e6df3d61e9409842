#!/usr/bin/env python3
"""The DiT training tables of docs/dit.md and docs/training.md from bench/dit_train.sh's JSON lines.

Usage: bench/dit_train_table.py FILE.jsonl --video    (docs/dit.md: the 240-step run)
       bench/dit_train_table.py FILE.jsonl --packed   (docs/training.md: packed against whole clips)
"""
import json
import sys


def load(path):
    return {r["run"]: r for r in (json.loads(l) for l in open(path) if l.strip())}


def by_step(run):
    return {m["step"]: m for m in run["metrics"]}


def fail(msg):
    sys.exit(f"dit_train_table.py: {msg}")


def speed(run):
    """Mean tokens/s over the steps, minutes of the run, the load averages before and after."""
    ms = run["metrics"]
    return (sum(m["tokens_per_s"] for m in ms) / len(ms), ms[-1]["elapsed_s"] / 60, run["load"])


def video(runs):
    if "video" not in runs:
        fail("no run 'video'")
    run = runs["video"]
    steps = by_step(run)
    last = max(steps)
    print("| step | train loss | val loss |")
    print("|-----:|-----------:|---------:|")
    for s in [1, 25, 50, 100, 150, 200, last]:
        if s not in steps:
            fail(f"the video run has no step {s}")
        m = steps[s]
        val = f"{m['val_loss']:.3f}" if "val_loss" in m else ""
        print(f"| {s} | {m['loss']:.3f} | {val} |")
    tps, minutes, ld = speed(run)
    print()
    print(f"{last} steps in {minutes:.0f} minutes, mean {tps:,.0f} tokens/s (load average "
          f"{ld[0]:.0f} before, {ld[1]:.0f} after, with other jobs on the cores).")


def packed(runs):
    for name in ("packed", "whole"):
        if name not in runs:
            fail(f"no run '{name}'")
    p, w = by_step(runs["packed"]), by_step(runs["whole"])

    def cell(m):
        return f"{m['loss']:.3f}" + (f" / {m['val_loss']:.3f}" if "val_loss" in m else "")

    print("| step | packed train / val | whole clips train / val |")
    print("|-----:|-------------------:|------------------------:|")
    for s in [1, 25, 50]:
        if s not in p or s not in w:
            fail(f"step {s} missing")
        print(f"| {s} | {cell(p[s])} | {cell(w[s])} |")
    (tp, mp, lp), (tw, mw, lw) = speed(runs["packed"]), speed(runs["whole"])
    print()
    print(f"Mean {tp:,.0f} tokens/s packed ({mp:.0f} minutes) and {tw:,.0f} whole ({mw:.0f} "
          f"minutes); load average {min(lp + lw):.0f} to {max(lp + lw):.0f} during the runs, so "
          "the speeds say little.")


def main():
    if len(sys.argv) != 3 or sys.argv[2] not in ("--video", "--packed"):
        fail("usage: bench/dit_train_table.py FILE.jsonl {--video,--packed}")
    runs = load(sys.argv[1])
    if sys.argv[2] == "--video":
        video(runs)
    else:
        packed(runs)


if __name__ == "__main__":
    main()
