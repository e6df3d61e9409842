#!/usr/bin/env python3
"""Checks a trace file of `wallfacer attn|train|plan --trace` against docs/trace.md.

Usage: check_trace.py FILE [--steps A B] [--layers L]
Always: valid JSON; traceEvents, displayTimeUnit and otherData.alignment_error_us; a process_name
per pid and a thread_name per tid; X events with name, cat, ts, dur >= 0, pid, tid, args.rank; the
sequential spans of a rank (its thread tid = 100 * rank, phases aside) never overlap; every send
pairs with a receive (same bytes, the receive ends after the send starts within the alignment
error). --steps: a training trace of steps A..B: one "step" span per traced step and rank, and in
each the forward, backward, optimizer and gradient all-reduce, with every layer's forward and
backward span (--layers L), every other span inside a step.
"""
import collections
import json
import sys


def fail(msg):
    print("FAIL:", msg)
    sys.exit(1)


args = sys.argv[1:]
path = args.pop(0)
steps = layers = None
while args:
    a = args.pop(0)
    if a == "--steps":
        steps = (int(args.pop(0)), int(args.pop(0)))
    elif a == "--layers":
        layers = int(args.pop(0))
try:
    d = json.load(open(path))
except Exception as e:  # noqa: BLE001
    fail(f"not valid JSON: {e}")
for key in ("traceEvents", "displayTimeUnit", "otherData"):
    if key not in d:
        fail(f"no {key}")
meta = d["otherData"]
if not isinstance(meta.get("alignment_error_us"), (int, float)) or meta["alignment_error_us"] < 0:
    fail("otherData.alignment_error_us missing or negative")
err = meta["alignment_error_us"]
if meta.get("dropped_spans", 0) != 0:
    fail(f"{meta['dropped_spans']} spans dropped")
names = collections.defaultdict(set)
spans = []
for e in d["traceEvents"]:
    if e.get("ph") == "M":
        names[e["name"]].add((e["pid"], e.get("tid")))
    elif e.get("ph") == "X":
        for k in ("name", "cat", "ts", "dur", "pid", "tid", "args"):
            if k not in e:
                fail(f"X event without {k}: {e}")
        if e["dur"] < 0 or "rank" not in e["args"]:
            fail(f"bad X event: {e}")
        spans.append(e)
    else:
        fail(f"unexpected event phase {e.get('ph')}")
if not spans:
    fail("no spans")
pids = {e["pid"] for e in spans}
tids = {(e["pid"], e["tid"]) for e in spans}
if not pids <= {p for p, _ in names["process_name"]}:
    fail("a pid without process_name")
if not tids <= names["thread_name"]:
    fail("a tid without thread_name")
ranks = sorted({e["args"]["rank"] for e in spans})
if ranks != list(range(meta.get("ranks", len(ranks)))):
    fail(f"ranks {ranks} against otherData.ranks {meta.get('ranks')}")

by_rank = collections.defaultdict(list)
for e in spans:
    if e["tid"] % 100 != 0 and e["name"] not in ("send", "recv"):
        fail(f"a sequential span on a transfer thread: {e}")
    if e["cat"] != "phase" and e["tid"] % 100 == 0:
        by_rank[e["args"]["rank"]].append(e)
for r, ev in by_rank.items():
    ev.sort(key=lambda e: e["ts"])
    for a, b in zip(ev, ev[1:]):
        if b["ts"] < a["ts"] + a["dur"] - 1e-3:
            fail(f"rank {r}: {b['name']} at {b['ts']} overlaps {a['name']} ending {a['ts'] + a['dur']}")

sends, recvs = collections.defaultdict(list), collections.defaultdict(list)
for e in spans:
    a = e["args"]
    if e["name"] == "send":
        sends[(a["rank"], a["peer"], a.get("tag"), a.get("schedule"))].append(e)
    elif e["name"] == "recv":
        recvs[(a["peer"], a["rank"], a.get("tag"), a.get("schedule"))].append(e)
if set(sends) != set(recvs):
    fail("send and receive channels differ")
for key, ss in sends.items():
    rs = recvs[key]
    if len(ss) != len(rs):
        fail(f"{len(ss)} sends and {len(rs)} receives on {key}")
    for s, r in zip(sorted(ss, key=lambda e: e["ts"]), sorted(rs, key=lambda e: e["ts"])):
        if s["args"]["bytes"] != r["args"]["bytes"]:
            fail(f"bytes differ on {key}")
        if r["ts"] + r["dur"] < s["ts"] - err - 1e-3:
            fail(f"a receive ends before its send starts on {key}")

if steps:
    want = list(range(steps[0], steps[1] + 1))
    for r in ranks:
        mine = [e for e in spans if e["args"]["rank"] == r]
        got = sorted(e["args"]["step"] for e in mine if e["name"] == "step")
        if got != want:
            fail(f"rank {r}: step spans {got}, expected {want}")
        boxes = [(e["ts"], e["ts"] + e["dur"]) for e in mine if e["name"] == "step"]
        for e in mine:
            if e["name"] == "step":
                continue
            if not any(t0 - 1e-3 <= e["ts"] and e["ts"] + e["dur"] <= t1 + 1e-3 for t0, t1 in boxes):
                fail(f"rank {r}: {e['name']} lies outside every step")
        count = collections.Counter(e["name"] for e in mine)
        for name in ("forward", "backward", "optimizer", "all_reduce"):
            if count[name] != len(want):
                fail(f"rank {r}: {count[name]} {name} spans for {len(want)} steps")
        if not any(e["args"].get("phase") == "gradient all-reduce" for e in mine):
            fail(f"rank {r}: no gradient all-reduce")
        if layers:
            for name in ("layer forward", "layer backward"):
                got = collections.Counter(e["args"]["layer"] for e in mine if e["name"] == name)
                if got != {l: len(want) for l in range(layers)}:
                    fail(f"rank {r}: {name} spans per layer {dict(got)}")
print(f"ok: {len(spans)} spans, {len(ranks)} ranks, alignment error {err} us")
