#!/usr/bin/env python3
"""The layouts' work imbalance on packed documents (docs/documents.md, "Imbalance (S = 65536)"):
the table that the unit test DocLayout.BalancedLayoutMeetsTheTarget prints, one JSON object per
row on stdout (mix, docs, longest, P, mask, contiguous, zigzag, balanced, runs), and one object
{"worst_balanced", "target"} for its last line.

    python3 bench/record.py docs/data/documents-imbalance.jsonl --run documents_imbalance -- \\
      python3 bench/documents_imbalance.py build/tests/wallfacer_unit_tests

The test computes the layouts (no timing, nothing random beyond its fixed seeds): the same build
prints the same table on any machine. bench/documents_imbalance_table.py prints the table of
docs/documents.md from the recorded lines."""
import json
import re
import subprocess
import sys

TEST = "DocLayout.BalancedLayoutMeetsTheTarget"
ROW = re.compile(r"^(.+?)\s+(\d+)\s+(\d+)\s+(\d+)\s+(causal|full)\s+([\d.]+)\s+([\d.]+)\s+"
                 r"([\d.]+)\s+(\d+)$")
WORST = re.compile(r"^worst balanced imbalance ([\d.]+) \(target ([\d.]+)\)$")


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: documents_imbalance.py UNIT_TEST_BINARY "
                 "(build/tests/wallfacer_unit_tests)")
    run = subprocess.run([sys.argv[1], f"--gtest_filter={TEST}"], capture_output=True, text=True)
    if run.returncode != 0:
        sys.exit(f"documents_imbalance.py: {TEST} failed:\n{run.stdout}{run.stderr}")
    rows, worst = 0, None
    for line in run.stdout.splitlines():
        m = ROW.match(line.strip())
        if m and m.group(1) != "mix":
            mix, docs, longest, p, mask, c, z, b, runs = m.groups()
            print(json.dumps({"mix": mix, "docs": int(docs), "longest": int(longest), "P": int(p),
                              "mask": mask, "contiguous": float(c), "zigzag": float(z),
                              "balanced": float(b), "runs": int(runs)}))
            rows += 1
        m = WORST.match(line.strip())
        if m:
            worst = {"worst_balanced": float(m.group(1)), "target": float(m.group(2))}
    if not rows or worst is None:
        sys.exit(f"documents_imbalance.py: no table in the output of {TEST}:\n{run.stdout}")
    print(json.dumps(worst))


if __name__ == "__main__":
    main()
