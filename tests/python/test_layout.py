"""wallfacer.local_positions against the layouts' definitions (docs/seqpar.md, "Layouts") written
out here, and its errors against the CLI's messages for the same arguments.

    python3 tests/python/test_layout.py WALLFACER_CLI
"""

import sys

import numpy as np

import wallfacer
from checks import error_of, expect, failures, cli_message

cli = sys.argv[1]

def contiguous(seq, P, r):
    n = seq // P
    return list(range(r * n, (r + 1) * n))


def zigzag(seq, P, r):
    c = seq // (2 * P)
    return list(range(r * c, (r + 1) * c)) + list(range((2 * P - 1 - r) * c, (2 * P - r) * c))


def definition(seq, P, r, strategy, causal, ulysses):
    zig = strategy == "zigzag" or (strategy in ("wallfacer", "double-ring") and causal)
    if ulysses > 1:  # member a of team j: rows [a n, (a + 1) n) of ring rank j's rows
        j, a, n = r // ulysses, r % ulysses, seq // P
        ring = definition(seq, P // ulysses, j, strategy, causal, 1)
        return ring[a * n:(a + 1) * n]
    return zigzag(seq, P, r) if zig else contiguous(seq, P, r)


checked = 0
for P in (1, 2, 4, 8):
    for strategy in ("ring", "zigzag", "ulysses", "wallfacer"):
        for causal in (False, True):
            for teams in ((1, 2) if strategy == "wallfacer" and P % 4 == 0 else (1,)):
                # Ulysses 2 x ring, zigzag, and x WallFacer-2 (C^2 = 4 divides P / 2).
                hybrid = (strategy in ("ring", "zigzag") and P % 2 == 0 or
                          strategy == "wallfacer" and teams == 2 and P % 8 == 0)
                for u in ((1, 2) if hybrid else (1,)):
                    seq = 16 * P
                    for r in range(P):
                        got = wallfacer.local_positions(seq, P, r, strategy, teams, u,
                                                        causal=causal)
                        want = definition(seq, P, r, strategy, causal, u)
                        expect(got.dtype == np.int64 and got.tolist() == want,
                               f"{strategy} C={teams} u={u} causal={causal} P={P} rank {r}: "
                               f"{got.tolist()} != {want}")
                        checked += 1

# The double ring lays out as ring (contiguous), or zigzag when causal, whatever its inner rings.
for P in (1, 2, 4, 8):
    for W in (w for w in (1, 2, 4, 8) if P % w == 0):
        for causal in (False, True):
            for r in range(P):
                got = wallfacer.local_positions(16 * P, P, r, "double-ring", causal=causal, inner=W)
                want = definition(16 * P, P, r, "double-ring", causal, 1)
                expect(got.tolist() == want, f"double-ring W={W} causal={causal} P={P} rank {r}")
                checked += 1
message = error_of(lambda: wallfacer.local_positions(48, 6, 0, "double-ring", inner=4))
expect(message is not None and "dividing the 6 ranks" in message,
       f"double-ring with W = 4 on 6 ranks: {message}")

# The documented default: strategy zigzag.
expect(wallfacer.local_positions(32, 2, 1).tolist() == zigzag(32, 2, 1), "default strategy")

# Balanced layout of documents: seq/P rows per rank, ascending runs, every token once.
docs = [50, 6, 40, 24, 8]
for P in (1, 2, 4):
    rows = []
    for r in range(P):
        got = wallfacer.local_positions(128, P, r, "wallfacer", docs=docs, causal=True,
                                        layout="balanced")
        expect(len(got) == 128 // P, f"balanced P={P} rank {r}: {len(got)} rows")
        rows += got.tolist()
        checked += 1
    expect(sorted(rows) == list(range(128)), f"balanced P={P}: not a permutation")


def cli_error(*args):
    """The CLI's one-line message for `wallfacer attn ARGS` (one process)."""
    rc, message = cli_message(cli, "attn", *args)
    expect(rc == 2, f"attn {args}: exit {rc}, not 2")
    return message


shape = ["--heads", "2", "--head-dim", "8"]
cases = [
    (["--strategy", "zigzag", "--seq", "63"], lambda: wallfacer.local_positions(63, 1, 0)),
    (["--strategy", "wallfacer", "--teams", "2", "--seq", "64"],
     lambda: wallfacer.local_positions(64, 1, 0, "wallfacer", 2)),
    (["--strategy", "ring", "--teams", "2", "--seq", "64"],
     lambda: wallfacer.local_positions(64, 1, 0, "ring", 2)),
    (["--strategy", "ring", "--seq", "64", "--docs", "30,30"],
     lambda: wallfacer.local_positions(64, 1, 0, "ring", docs=[30, 30])),
    (["--strategy", "ring", "--seq", "64", "--docs", "64,0"],
     lambda: wallfacer.local_positions(64, 1, 0, "ring", docs=[64, 0])),
]
for args, f in cases:
    want, got = cli_error(*args, *shape), error_of(f)
    expect(got == want, f"attn {' '.join(args)}: Python says {got!r}, the CLI {want!r}")
    checked += 1
# The library's message (the CLI's option parser refuses unknown names before the library sees them).
expect(error_of(lambda: wallfacer.local_positions(64, 1, 0, "spiral")) ==
       "unknown strategy 'spiral': use one of ring, zigzag, ulysses, wallfacer, double-ring",
       "unknown strategy")
for f in (lambda: wallfacer.local_positions("64", 1, 0), lambda: wallfacer.local_positions(64.0, 1, 0),
          lambda: wallfacer.local_positions(64, 1, 0, docs="1,2")):
    expect(error_of(f, TypeError) is not None, "TypeError")
expect(error_of(lambda: wallfacer.local_positions(64, 2, 2)) ==
       "rank 2 is outside a group of 2 ranks (0..1)", "rank outside")

for f in failures:
    print("FAIL:", f)
print(f"layout: {checked} checks, {len(failures)} failures" if failures else
      f"layout: all {checked} checks ok")
sys.exit(1 if failures else 0)
