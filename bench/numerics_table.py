#!/usr/bin/env python3
"""The measured-error tables of docs/numerics.md from bench/numerics_errors.sh's JSON lines.

Usage: bench/numerics_table.py FILE.jsonl TABLE
  attention_fp32   fp32 attention kernels against the fp64 reference (unit tests)
  attention_bf16   bf16 attention kernels, bf16 and fp32 outputs (unit tests)
  dense_bf16       bf16 dense layers (unit tests)
  mpi_bf16         distributed bf16 attention, every strategy, P = 1..8 (MPI tests)
  gradients        dQ, dK, dV of distributed bf16 attention at P = 8 (wallfacer attn --check)

The tolerance column is the tests' constant (the script stops when a recorded tolerance differs
from it); the measured column is the largest error over every recorded check of the row.
"""
import json
import sys

EPS = 2.0**-23
U = 2.0**-8
GRADS = ["dQ", "dK", "dV"]

# table -> rows: (label, quantities, tolerance text, tolerance value)
UNIT_ROWS = {
    "attention_fp32": [
        ("O", ["O"], "32 eps ≈ 3.8e-6", 32 * EPS),
        ("LSE", ["LSE"], " 8 eps ≈ 9.5e-7", 8 * EPS),
        ("dQ, dK, dV", GRADS, "32 eps ≈ 3.8e-6", 32 * EPS),
    ],
    "attention_bf16": [
        ("O, bf16 output", ["O bf16"], "3u ≈ 1.2e-2", 3 * U),
        ("dQ, dK, dV, bf16 outputs", [g + " bf16" for g in GRADS], "3u ≈ 1.2e-2", 3 * U),
        ("O, fp32 output", ["O fp32"], "1.5u ≈ 5.9e-3", 1.5 * U),
        ("dQ, dK, dV, fp32 outputs", [g + " fp32" for g in GRADS], "1.5u ≈ 5.9e-3", 1.5 * U),
        ("LSE", ["LSE"], "u/2 ≈ 2.0e-3", U / 2),
    ],
    "dense_bf16": [
        ("out, dinp (bf16)", ["out", "dinp"], "1.5u ≈ 5.9e-3", 1.5 * U),
        ("dweight, dbias (fp32)", ["dweight", "dbias"], "2^-18 ≈ 3.8e-6", 2.0**-18),
    ],
}
MPI_ROWS = [("O", ["O"], "3u ≈ 1.2e-2"), ("dQ, dK, dV", GRADS, "3u ≈ 1.2e-2"),
            ("LSE", ["LSE"], "u/2 ≈ 2.0e-3")]


def fail(msg):
    sys.exit(f"numerics_table.py: {msg}")


def paths_text(paths, avx):
    """The code paths measured, in words."""
    names = sorted(paths)
    if not avx:
        return f"{', '.join(names)}: the portable path (the CPU has no AVX512-BF16)"
    return ", ".join(names)


def unit_table(lines, table):
    rows = UNIT_ROWS[table]
    runs = [l for l in lines if l["kind"] == "unit"]
    if not runs:
        fail("no unit-test run in the file")
    recs = [r for l in runs for r in l["records"] if r["table"] == table]
    if not recs:
        fail(f"no records of table {table}")
    known = {q for _, qs, _, _ in rows for q in qs}
    unknown = {r["quantity"] for r in recs} - known
    if unknown:
        fail(f"{table}: quantities {sorted(unknown)} belong to no row")
    cases = {(r["test"], r["case"]) for r in recs}
    if table == "attention_fp32":
        head = f"measured in tests (max over {len(cases)} cases)"
    else:
        head = (f"measured in tests (max over {len(cases)} cases; paths "
                f"{paths_text({r['path'] for r in recs}, any(l['avx512_bf16'] for l in runs))})")
    print(f"| quantity | tolerance | {head} |")
    print("|---|---|---|")
    for label, qs, tol_text, tol in rows:
        sel = [r for r in recs if r["quantity"] in qs]
        if not sel:
            fail(f"{table}: no records for {label}")
        for r in sel:
            if abs(r["tol"] - tol) > 1e-12 * tol:
                fail(f"{table}: {r['test']} {r['case']} {r['quantity']} has tolerance {r['tol']}, "
                     f"the table says {tol_text}: update the table")
        print(f"| {label} | {tol_text.strip()} | {max(r['err'] for r in sel):.1e} |")


def mpi_table(lines):
    runs = [l for l in lines if l["kind"] == "mpi"]
    if not runs:
        fail("no MPI-test run in the file")
    procs = sorted({int(l["command"].split("wallfacer-mpirun ")[1].split()[0]) for l in runs})
    paths = {l["bf16_path"] for l in runs}
    avx = any(l["avx512_bf16"] for l in runs)
    recs = [r for l in runs for r in l["records"]]
    fp64 = [r for r in recs if r["against"] == "fp64"]
    alone = [r for r in recs if r["against"] == "P=1"]
    print(f"| quantity | tolerance | measured in the MPI tests (max over {len(fp64)} runs: every "
          f"strategy, P = {', '.join(map(str, procs))}; WALLFACER_BF16_PATH "
          f"{' and '.join(sorted(paths))}{'' if avx else ', both portable on this CPU'}) | "
          "largest difference from the same attention on one rank |")
    print("|---|---|---|---|")
    for label, qs, tol_text in MPI_ROWS:
        print(f"| {label} | {tol_text} | {max(r[q] for r in fp64 for q in qs):.1e} | "
              f"{max(r[q] for r in alone for q in qs):.1e} |")


def gradients_table(lines):
    runs = [l for l in lines if l["kind"] == "attn"]
    if not runs:
        fail("no attn run in the file")
    print("| configuration (what travels) | O | dQ | dK | dV |")
    print("|---|---:|---:|---:|---:|")
    for l in runs:
        o = l["output"]
        wf = o["strategy"] == "wallfacer"
        name = f"WallFacer C = {o['C']}" if wf else o["strategy"]
        name += f", Hkv = {o['kv_heads']}" + (", causal" if o["causal"] else "")
        # Query packages (with dQ) circulate when H = Hkv, else K,V (with dK,dV).
        travels = "dQ" if o["kv_heads"] == o["heads"] else "dK,dV"
        name += f" ({travels}{'; reduce-scatters' if wf else ''})"
        e = o["max_err"]
        print(f"| {name} | " + " | ".join(f"{e[k] * 1e3:.2f}" for k in ["out", "dq", "dk", "dv"])
              + " |")


def main():
    if len(sys.argv) != 3:
        fail("usage: bench/numerics_table.py FILE.jsonl "
             "{attention_fp32,attention_bf16,dense_bf16,mpi_bf16,gradients}")
    lines = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
    table = sys.argv[2]
    if table in UNIT_ROWS:
        unit_table(lines, table)
    elif table == "mpi_bf16":
        mpi_table(lines)
    elif table == "gradients":
        gradients_table(lines)
    else:
        fail(f"unknown table '{table}'")


if __name__ == "__main__":
    main()
