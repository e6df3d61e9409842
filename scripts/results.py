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
  scripts/results.py --tables   list the markdown tables with numbers outside any block (tables
                                that are not generated from data; some are not measurements)

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


def tables_outside(path, lines, inside):
    """(line, header) of each markdown table with a digit in its body outside the blocks."""
    found, i = [], 0
    while i < len(lines) - 1:
        if (i not in inside and lines[i].lstrip().startswith("|") and
                re.match(r"^\s*\|?\s*:?-{3,}", lines[i + 1])):
            j = i + 2
            while j < len(lines) and lines[j].lstrip().startswith("|"):
                j += 1
            if any(re.search(r"\d", l) for l in lines[i + 2:j]):
                found.append((i + 1, lines[i].strip()[:100]))
            i = j
        else:
            i += 1
    return found


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="change nothing; exit 1 on a difference")
    ap.add_argument("--tables", action="store_true", help="list tables outside generated blocks")
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
        if args.tables:
            inside = {i for b in bs for i in range(b.first, b.last)}
            for line, head in tables_outside(path, lines, inside):
                print(f"{os.path.relpath(path, ROOT)}:{line}: {head}")
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
    if not args.tables:
        print(f"{count} generated blocks, {bad} {'differ or fail' if args.check else 'failed'}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
