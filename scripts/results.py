#!/usr/bin/env python3
"""Generated tables: every block

    <!-- generated: CMD -->
    ...
    <!-- end generated -->

in README.md and docs/*.md holds exactly what CMD prints (CMD runs in a shell from the repository
root and reads committed raw data under docs/data/).

  scripts/results.py            rewrite every block with its command's output (`make results`)
  scripts/results.py --check    change nothing; name each block that differs from its command's
                                output (or whose command fails) and exit 1 (ctest docs_generated)
  scripts/results.py --tables   list the markdown tables with numbers that are neither inside a
                                block nor marked descriptive
  scripts/results.py --check-tables
                                change nothing; name each such table and each misplaced marker
                                and exit 1 (ctest docs_tables)

A table whose numbers are not measurements (flags, keys, formulas, schedules derived by hand) is
marked by the line

    <!-- table: descriptive -->

right before it (blank lines between are allowed). A table with a digit in its body must be either
inside a generated block or marked so; a marker with no table after it, or before a table inside a
generated block, is an error.

Files: the markdown files to look at (default: README.md and docs/*.md).
"""

import argparse
import difflib
import glob
import os
import re
import subprocess
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
BEGIN = re.compile(r"^<!-- generated: (.+?) -->\s*$")
END = re.compile(r"^<!-- end generated -->\s*$")
DESCRIPTIVE = re.compile(r"^<!-- table: descriptive -->\s*$")
TIMEOUT_S = 120


class Block:
    def __init__(self, path, line, cmd, first, last):
        # lines[first:last] is the body: between the two marker lines
        self.path, self.line, self.cmd, self.first, self.last = path, line, cmd, first, last

    def where(self):
        return f"{os.path.relpath(self.path, ROOT)}:{self.line}"


def blocks(path, lines):
    """The generated blocks of a file; raises ValueError for markers that do not pair up."""
    out, open_ = [], None
    for i, text in enumerate(lines):
        m = BEGIN.match(text)
        if m:
            if open_:
                raise ValueError(f"{path}:{i + 1}: a generated block inside the one of line "
                                 f"{open_.line}; close it with <!-- end generated -->")
            open_ = Block(path, i + 1, m.group(1).strip(), i + 1, None)
        elif END.match(text):
            if not open_:
                raise ValueError(f"{path}:{i + 1}: <!-- end generated --> without a "
                                 "<!-- generated: CMD --> before it")
            open_.last = i
            out.append(open_)
            open_ = None
    if open_:
        raise ValueError(f"{path}:{open_.line}: <!-- generated: {open_.cmd} --> is never closed "
                         "by <!-- end generated -->")
    return out


def run(cmd):
    """CMD's stdout as lines (each ending in a newline), or raises RuntimeError."""
    try:
        p = subprocess.run(cmd, shell=True, cwd=ROOT, capture_output=True, text=True,
                           timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"no output after {TIMEOUT_S} s")
    if p.returncode != 0:
        err = (p.stderr.strip().splitlines() or [""])[-1]
        raise RuntimeError(f"exit {p.returncode}: {err}")
    text = p.stdout
    if text and not text.endswith("\n"):
        text += "\n"
    return text.splitlines(True)


def tables(lines):
    """(first, end, has_digit) of each markdown table: lines[first:end], header first."""
    found, i = [], 0
    while i < len(lines) - 1:
        if lines[i].lstrip().startswith("|") and re.match(r"^\s*\|?\s*:?-{3,}", lines[i + 1]):
            j = i + 2
            while j < len(lines) and lines[j].lstrip().startswith("|"):
                j += 1
            found.append((i, j, any(re.search(r"\d", l) for l in lines[i + 2:j])))
            i = j
        else:
            i += 1
    return found


def unbacked_tables(path, lines, inside):
    """Error lines for the tables with numbers that are neither inside a generated block nor
    marked descriptive, and for markers that mark nothing (no table after them, or a generated
    one)."""
    rel = os.path.relpath(path, ROOT)
    errors = []
    starts = {first: (end, digit) for first, end, digit in tables(lines)}
    marked = set()
    for i, text in enumerate(lines):
        if not DESCRIPTIVE.match(text):
            continue
        j = i + 1
        while j < len(lines) and not lines[j].strip():
            j += 1
        if j not in starts:
            errors.append(f"{rel}:{i + 1}: <!-- table: descriptive --> is not followed by a "
                          "table; remove the marker or move it right before its table")
        elif j in inside:
            errors.append(f"{rel}:{i + 1}: <!-- table: descriptive --> marks a generated table; "
                          "remove the marker")
        else:
            marked.add(j)
    for first, (end, digit) in sorted(starts.items()):
        if digit and first not in inside and first not in marked:
            errors.append(f"{rel}:{first + 1}: a table with numbers, neither generated nor "
                          f"marked descriptive: {lines[first].strip()[:80]}")
    return errors


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="change nothing; exit 1 on a difference")
    ap.add_argument("--tables", action="store_true",
                    help="list tables with numbers, neither generated nor marked descriptive")
    ap.add_argument("--check-tables", action="store_true",
                    help="change nothing; exit 1 on a table with numbers that is neither "
                    "generated nor marked descriptive, or on a misplaced marker")
    ap.add_argument("files", nargs="*", help="markdown files (default README.md, docs/*.md)")
    args = ap.parse_args()
    files = [os.path.abspath(f) for f in args.files] or \
        [os.path.join(ROOT, "README.md")] + sorted(glob.glob(os.path.join(ROOT, "docs", "*.md")))
    bad = 0
    count = 0
    for path in files:
        with open(path) as f:
            lines = f.read().splitlines(True)
        try:
            bs = blocks(os.path.relpath(path, ROOT), lines)
        except ValueError as e:
            print(f"error: {e}")
            bad += 1
            continue
        if args.tables or args.check_tables:
            inside = {i for b in bs for i in range(b.first, b.last)}
            errors = unbacked_tables(path, lines, inside)
            for e in errors:
                print(f"error: {e}" if args.check_tables else e)
            count += len(tables(lines))
            bad += len(errors)
            continue
        new = list(lines)
        for b in reversed(bs):
            count += 1
            try:
                body = run(b.cmd)
            except RuntimeError as e:
                print(f"error: {b.where()}: `{b.cmd}` failed: {e}")
                bad += 1
                continue
            if body == lines[b.first:b.last]:
                continue
            if args.check:
                diff = list(difflib.unified_diff(lines[b.first:b.last], body, "in the file",
                                                 f"printed by {b.cmd}", n=0))
                print(f"error: {b.where()}: the block differs from what `{b.cmd}` prints "
                      f"(rewrite it with `make results`):")
                sys.stdout.writelines("    " + d if d.endswith("\n") else "    " + d + "\n"
                                      for d in diff[:12])
                bad += 1
            else:
                new[b.first:b.last] = body
                print(f"rewrote {b.where()} ({b.cmd})")
        if not args.check and new != lines:
            with open(path + ".tmp", "w") as f:
                f.writelines(new)
            os.replace(path + ".tmp", path)
    if args.check_tables:
        if bad:
            print("fix: generate a table of measurements from docs/data/ (<!-- generated: CMD -->); "
                  "put <!-- table: descriptive --> right before a table that holds none")
        print(f"{count} tables, {bad} neither generated nor marked descriptive (or misplaced "
              "markers)")
        return 1 if bad else 0
    if args.tables:
        return 0
    print(f"{count} generated blocks, {bad} {'differ or fail' if args.check else 'failed'}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
