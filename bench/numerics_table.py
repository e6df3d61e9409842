#!/usr/bin/env python3
"""The measured-error table of docs/numerics.md from bench/numerics_errors.sh's JSON lines.

Usage: bench/numerics_table.py FILE.jsonl TABLE
  mpi_bf16         distributed bf16 attention, every strategy (MPI tests), with the tolerances

The measured column is the largest error over every recorded run of the row.
"""
import json
import sys

GRADS = ["dQ", "dK", "dV"]

MPI_ROWS = [("O", ["O"], "3u ≈ 1.2e-2"), ("dQ, dK, dV", GRADS, "3u ≈ 1.2e-2"),
            ("LSE", ["LSE"], "u/2 ≈ 2.0e-3")]


def sci(x):
    """1 significant decimal, exponent without a leading zero: 5.4e-3."""
    m, e = f"{x:.1e}".split("e")
    return f"{m}e{int(e)}"


def fail(msg):
    sys.exit(f"numerics_table.py: {msg}")


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
    print(f"| quantity | tolerance | measured in the MPI tests (max over {len(fp64)} configurations: every "
          f"strategy, P = {', '.join(map(str, procs))}; WALLFACER_BF16_PATH "
          f"{' and '.join(sorted(paths))}{'' if avx else ': the portable path, as the CPU has no AVX512-BF16'}) | "
          "largest difference from the same attention on one rank |")
    print("|---|---|---|---|")
    for label, qs, tol_text in MPI_ROWS:
        print(f"| {label} | {tol_text} | {sci(max(r[q] for r in fp64 for q in qs))} | "
              f"{sci(max(r[q] for r in alone for q in qs))} |")


def main():
    if len(sys.argv) != 3:
        fail("usage: bench/numerics_table.py FILE.jsonl mpi_bf16")
    lines = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
    table = sys.argv[2]
    if table == "mpi_bf16":
        mpi_table(lines)
    else:
        fail(f"unknown table '{table}'")


if __name__ == "__main__":
    main()
