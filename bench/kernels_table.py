#!/usr/bin/env python3
"""The kernel tables of docs/results.md and docs/library.md from the JSON lines of bench/kernels.sh
and bench/isa_levels.sh (bench/record.py's format):

  python3 bench/kernels_table.py docs/data/kernels.jsonl --attention   flash attention vs PyTorch
  python3 bench/kernels_table.py docs/data/kernels.jsonl --gemm        dense products bf16 vs fp32
  python3 bench/kernels_table.py docs/data/isa-levels.jsonl --isa      dispatched vs baseline code

Rates are medians over the rounds; a ratio is the median of the ratios measured within each round
(both sides timed in the same round), with the smallest and largest in the line below the table.
"""
import argparse
import collections
import json
import statistics


def med(xs):
    return statistics.median(xs) if xs else None


def fmt(x, spec=None):
    """A rate: one decimal from 10 on, two from 1, three below (the portable bf16 path is slow)."""
    if x is None:
        return ""
    return format(x, spec or (".1f" if x >= 10 else ".2f" if x >= 1 else ".3f"))


def times(x):
    return f"{x:.2f}x" if x >= 0.1 else f"{x:.3f}x"


def rounds_text(n):
    return f"{n} round" + ("" if n == 1 else "s")


def pair(a, b, spec=None):
    return "" if a is None else f"{fmt(a, spec)} / {fmt(b, spec)}"


def ratio(a, b):
    return "" if a is None else f"{times(a)} / {times(b)}"


def span(xs):
    return f"{times(min(xs))[:-1]}–{times(max(xs))}" if xs else "-"


def load_after(rows):
    """The load averages the runs recorded at their ends ("load_after"), as a context part."""
    after = [float(r["load_after"].split()[0]) for r in rows]
    return f"load average {min(after):.1f}–{max(after):.1f} (1 min) at the ends of the runs"


def context(rows, extra=()):
    """One line: the machine, the libraries and the load of the runs."""
    r0 = rows[0]
    flags = r0.get("cpu_flags", [])
    isa = ", ".join(flags) if flags else "none of AVX2 / AVX-512"
    if not any(f.startswith("avx512") for f in flags):
        isa += "; no AVX-512"
    loads = [float(r["loadavg"].split()[0]) for r in rows]
    commits = sorted({r["commit"] for r in rows})
    # "env": the settings bench/record.py records (a dict; a string is a run's own command prefix,
    # which its table shows per row).
    envs = sorted({" ".join(f"{k}={v}" for k, v in r["env"].items())
                   for r in rows if isinstance(r.get("env"), dict) and r["env"]})
    parts = [f"{r0.get('cpu', '?')}, {r0.get('cpus', '?')} cores ({isa})",
             *([f"run with {' / '.join(envs)}"] if envs else []),
             f"OpenBLAS core {r0.get('blas_core', '?')}",
             *([f"sgemm {r0['sgemm']}"] if r0.get("sgemm") else []), *extra,
             f"load average {min(loads):.1f}–{max(loads):.1f} (1 min) at the starts of the runs",
             f"commit {', '.join(commits)}"]
    return "; ".join(parts) + "."


def attention(rows):
    wf = [r for r in rows if r["run"] == "wallfacer_attn"]
    th = [r for r in rows if r["run"] == "torch_attn"]
    # (round, seq, causal) -> dtype -> result
    w, t = collections.defaultdict(dict), collections.defaultdict(dict)
    for r in wf:
        w[(r["round"], r["seq"], r["causal"])][r["dtype"]] = r
    for r in th:
        t[(r["round"], r["seq"], r["causal"])][r["dtype"]] = r
    cases = sorted({(k[1], k[2]) for k in w})
    rounds = sorted({k[0] for k in w})
    print("| S | mask | fp32 fwd / bwd GF/s | bf16 fwd / bwd GF/s | sgemm GF/s | "
          "PyTorch fp32 fwd / bwd | PyTorch bf16 fwd / bwd | bf16 / fp32 fwd / bwd | "
          "fp32 / PyTorch fp32 | bf16 / PyTorch bf16 | spot-check error fp32 / bf16 |")
    print("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    spans = collections.defaultdict(list)
    for seq, causal in cases:
        v = collections.defaultdict(list)
        err = {"fp32": 0.0, "bf16": 0.0}
        for rd in rounds:
            a, b = w.get((rd, seq, causal), {}), t.get((rd, seq, causal), {})
            for d in ("fp32", "bf16"):
                for x in ("fwd", "bwd"):
                    if d in a:
                        v[f"w{d}{x}"].append(a[d][f"{x}_gflops"])
                    if d in b:
                        v[f"t{d}{x}"].append(b[d][f"{x}_gflops"])
                    if d in a and d in b:
                        v[f"w/t{d}{x}"].append(a[d][f"{x}_gflops"] / b[d][f"{x}_gflops"])
                if d in a:
                    err[d] = max(err[d], a[d]["check_err"])
            if "fp32" in a:
                v["sgemm"].append(a["fp32"]["sgemm_gflops"])
            if "fp32" in a and "bf16" in a:
                for x in ("fwd", "bwd"):
                    v[f"b/f{x}"].append(a["bf16"][f"{x}_gflops"] / a["fp32"][f"{x}_gflops"])
        for key in ("b/ffwd", "b/fbwd", "w/tfp32fwd", "w/tfp32bwd", "w/tbf16fwd", "w/tbf16bwd"):
            spans[key] += v[key]
        m = {k: med(x) for k, x in v.items()}
        print(f"| {seq:,} | {'causal' if causal else 'full'} "
              f"| {pair(m.get('wfp32fwd'), m.get('wfp32bwd'))} "
              f"| {pair(m.get('wbf16fwd'), m.get('wbf16bwd'))} | {fmt(m.get('sgemm'))} "
              f"| {pair(m.get('tfp32fwd'), m.get('tfp32bwd'))} "
              f"| {pair(m.get('tbf16fwd'), m.get('tbf16bwd'))} "
              f"| {ratio(m.get('b/ffwd'), m.get('b/fbwd'))} "
              f"| {ratio(m.get('w/tfp32fwd'), m.get('w/tfp32bwd'))} "
              f"| {ratio(m.get('w/tbf16fwd'), m.get('w/tbf16bwd'))} "
              f"| {err['fp32']:.1e} / {err['bf16']:.1e} |")
    print()
    paths = sorted({r.get("bf16_path", "") for r in wf if r["dtype"] == "bf16"})
    tv = sorted({f"{r['torch_version']} (CPU capability {r['torch_cpu_capability']})" for r in th})
    print(f"{rounds_text(len(rounds))}. Per round: bf16 / fp32 forward {span(spans['b/ffwd'])}, backward "
          f"{span(spans['b/fbwd'])}; wallfacer fp32 / PyTorch fp32 forward "
          f"{span(spans['w/tfp32fwd'])}, backward {span(spans['w/tfp32bwd'])}; wallfacer bf16 / "
          f"PyTorch bf16 forward {span(spans['w/tbf16fwd'])}, backward "
          f"{span(spans['w/tbf16bwd'])}.")
    print(context(wf + th, [f"threads {wf[0]['threads']}", f"kernels {wf[0]['isa']}",
                            f"bf16 tile products {', '.join(paths)}",
                            f"PyTorch {', '.join(tv)}"]))


def gemm(rows):
    g = [r for r in rows if r["run"] == "wallfacer_gemm"]
    outs = sorted({r["out"] for r in g}, key=lambda oc: [r["out"] for r in g].index(oc))
    products = ("fwd", "dinp", "dweight")
    head = " | ".join(f"fp32 {p} GF/s | bf16 {p} GF/s | ratio" for p in products)
    print(f"| OC | {head} |")
    print("|---:|" + "---:|" * 9)
    ratios, e16, e32 = [], 0.0, 0.0
    for oc in outs:
        cells = []
        for p in products:
            rs = [r for r in g if r["out"] == oc and r["product"] == p]
            ratios += [r["ratio"] for r in rs]
            e16 = max([e16] + [r["check_err_bf16"] for r in rs])
            e32 = max([e32] + [r["check_err_fp32"] for r in rs])
            cells += [fmt(med([r["fp32_gflops"] for r in rs])),
                      fmt(med([r["bf16_gflops"] for r in rs])),
                      times(med([r['ratio'] for r in rs]))]
        print(f"| {oc:,} | " + " | ".join(cells) + " |")
    print()
    r0 = g[0]
    print(f"N = {r0['rows']:,} rows, C = {r0['channels']} channels, "
          f"{rounds_text(len({r['round'] for r in g}))}. Ratio bf16 / fp32 per round and "
          f"product {span(ratios)}. Spot checks (largest over the runs): bf16 outputs {e16:.1e} "
          f"(bound 5.9e-3), dweight {e32:.1e} (bound 1.5e-5).")
    paths = sorted({r["bf16_path"] for r in g})
    print(context(g, [f"threads {r0['threads']}", f"bf16 path {', '.join(paths)}"]))


def isa(rows):
    levels = {}
    for r in rows:
        levels[r["run"]] = r["isa"]
    auto = levels.get("auto", "?")
    runs = collections.defaultdict(list)  # (seq, causal, run) -> results
    by_round = {}
    for r in rows:
        runs[(r["seq"], r["causal"], r["run"])].append(r)
        by_round[(r["round"], r["seq"], r["causal"], r["run"])] = r
    cases = sorted({(r["seq"], r["causal"]) for r in rows}, key=lambda c: (c[0], not c[1]))
    print(f"| tokens, mask | fwd ms, {auto} | fwd ms, baseline | baseline / {auto} fwd "
          f"| bwd ms, {auto} | bwd ms, baseline | baseline / {auto} bwd |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    spans = collections.defaultdict(list)
    for seq, causal in cases:
        m = {x: {run: med([r[f"{x}_ms"] for r in runs[(seq, causal, run)]])
                 for run in ("auto", "baseline")} for x in ("fwd", "bwd")}
        q = {}
        for x in ("fwd", "bwd"):
            rs = [by_round[(rd, seq, causal, "baseline")][f"{x}_ms"] /
                  by_round[(rd, seq, causal, "auto")][f"{x}_ms"]
                  for rd in sorted({k[0] for k in by_round})
                  if (rd, seq, causal, "baseline") in by_round and (rd, seq, causal, "auto") in by_round]
            spans[x] += rs
            q[x] = med(rs)
        print(f"| {seq} {'causal' if causal else 'full'} | {m['fwd']['auto']:.1f} | "
              f"{m['fwd']['baseline']:.1f} | {q['fwd']:.2f}x | {m['bwd']['auto']:.1f} | "
              f"{m['bwd']['baseline']:.1f} | {q['bwd']:.2f}x |")
    print()
    print(f"{rounds_text(len({r['round'] for r in rows}))}. Per round, baseline / {auto}: forward "
          f"{span(spans['fwd'])}, backward "
          f"{span(spans['bwd'])}.")
    print(context(rows, [f"threads {rows[0]['threads']}"]))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("data")
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--attention", action="store_true")
    g.add_argument("--gemm", action="store_true")
    g.add_argument("--isa", action="store_true")
    a = ap.parse_args()
    rows = [json.loads(line) for line in open(a.data) if line.strip()]
    (attention if a.attention else gemm if a.gemm else isa)(rows)


if __name__ == "__main__":
    main()
