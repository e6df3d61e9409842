#!/usr/bin/env bash
# scripts/results.py on made-up pages: --check names a block that differs from its command's
# output and exits 1; the rewrite makes it equal and touches nothing outside the blocks; a command
# that fails and markers that do not pair up are errors naming the line.
set -u
src=$1
tool="python3 $src/scripts/results.py"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail=0
err() { echo "FAIL: $*"; fail=1; }

printf 'intro\n<!-- generated: printf "| a |\\n|---|\\n| 1 |\\n" -->\n| a |\n|---|\n| 2 |\n<!-- end generated -->\noutro\n' \
  >"$work/page.md"
cp "$work/page.md" "$work/before.md"
out=$($tool --check "$work/page.md" 2>&1); rc=$?
[ $rc -eq 1 ] || err "--check on a stale block: exit $rc, expected 1: $out"
echo "$out" | grep -q "error: .*page.md:2: the block differs from what \`printf" ||
  err "--check does not name the block: $out"
cmp -s "$work/page.md" "$work/before.md" || err "--check changed the file"
out=$($tool "$work/page.md" 2>&1) || err "rewrite failed: $out"
[ "$(cat "$work/page.md")" == "$(printf 'intro\n<!-- generated: printf "| a |\\n|---|\\n| 1 |\\n" -->\n| a |\n|---|\n| 1 |\n<!-- end generated -->\noutro')" ] ||
  err "rewritten page: $(cat "$work/page.md")"
out=$($tool --check "$work/page.md" 2>&1) || err "--check after the rewrite: $out"

printf '<!-- generated: exit 3 -->\nx\n<!-- end generated -->\n' >"$work/bad.md"
out=$($tool --check "$work/bad.md" 2>&1); rc=$?
[ $rc -eq 1 ] && echo "$out" | grep -q "bad.md:1: \`exit 3\` failed: exit 3" ||
  err "a failing command: exit $rc: $out"
printf 'a\n<!-- generated: echo x -->\nx\n' >"$work/open.md"
out=$($tool --check "$work/open.md" 2>&1); rc=$?
[ $rc -eq 1 ] && echo "$out" | grep -q "open.md:2: .* is never closed" ||
  err "an unclosed block: exit $rc: $out"

# The tables outside any block are listed.
printf '| n |\n|---|\n| 3.5 |\n' >"$work/t.md"
$tool --tables "$work/t.md" | grep -q "t.md:1: | n |" || err "--tables does not list a table"

[ $fail -eq 0 ] && echo "ok: generated blocks checked and rewritten"
exit $fail
