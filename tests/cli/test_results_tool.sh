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
$tool --tables "$work/t.md" | grep -q "t.md:1: a table with numbers, .*| n |" ||
  err "--tables does not list a table"

# --check-tables: a table with numbers must be generated or marked descriptive.
out=$($tool --check-tables "$work/t.md" 2>&1); rc=$?
[ $rc -eq 1 ] && echo "$out" | grep -q "error: .*t.md:1: a table with numbers, neither generated nor marked descriptive: | n |" ||
  err "a table neither generated nor marked: exit $rc: $out"
printf 'text\n<!-- table: descriptive -->\n\n| n |\n|---|\n| 3.5 |\n\n| words |\n|---|\n| none |\n' \
  >"$work/marked.md"
out=$($tool --check-tables "$work/marked.md" 2>&1) || err "a marked table and one without numbers: $out"
echo "$out" | grep -q "2 tables, 0 neither" || err "marked table count: $out"
cp "$work/page.md" "$work/gen.md"
out=$($tool --check-tables "$work/gen.md" 2>&1) || err "a generated table: $out"
# The marker marks the next table only: a second table after it is not covered.
printf '<!-- table: descriptive -->\n| a |\n|---|\n| 1 |\n\n| b |\n|---|\n| 2 |\n' >"$work/two.md"
out=$($tool --check-tables "$work/two.md" 2>&1); rc=$?
[ $rc -eq 1 ] && echo "$out" | grep -q "two.md:6: a table with numbers" &&
  ! echo "$out" | grep -q "two.md:2:" || err "the marker covers only its table: exit $rc: $out"
# A marker with text (not a table) after it, and a marker on a generated table, are errors.
printf '<!-- table: descriptive -->\nwords\n| a |\n|---|\n| 1 |\n' >"$work/stray.md"
out=$($tool --check-tables "$work/stray.md" 2>&1); rc=$?
[ $rc -eq 1 ] && echo "$out" | grep -q "stray.md:1: <!-- table: descriptive --> is not followed by a table" &&
  echo "$out" | grep -q "stray.md:3: a table with numbers" || err "a stray marker: exit $rc: $out"
printf '<!-- generated: printf "| a |\\n|---|\\n| 1 |\\n" -->\n<!-- table: descriptive -->\n| a |\n|---|\n| 1 |\n<!-- end generated -->\n' \
  >"$work/both.md"
out=$($tool --check-tables "$work/both.md" 2>&1); rc=$?
[ $rc -eq 1 ] && echo "$out" | grep -q "both.md:2: <!-- table: descriptive --> marks a generated table" ||
  err "a marker inside a generated block: exit $rc: $out"
# --check-tables changes nothing.
cmp -s "$work/t.md" <(printf '| n |\n|---|\n| 3.5 |\n') || err "--check-tables changed a file"

[ $fail -eq 0 ] && echo "ok: generated blocks checked and rewritten, unbacked tables found"
exit $fail
