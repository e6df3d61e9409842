#!/usr/bin/env bash
# Checks the CLI contract for every subcommand listed by `wallfacer --help`:
# `--help` exits 0 and prints usage; an unknown flag exits 2 with a one-line error naming it.
set -u
wf=$1
fail=0
err() { echo "FAIL: $*"; fail=1; }

"$wf" --help >/dev/null || err "wallfacer --help exited $?"
"$wf" >/dev/null 2>&1; [ $? -eq 2 ] || err "wallfacer without a subcommand should exit 2"
# An unknown subcommand: the same one line and exit 2 with or without --help (or --version).
plain=$("$wf" NOSUCH 2>&1); rc=$?
[ $rc -eq 2 ] || err "wallfacer NOSUCH exited $rc, expected 2"
echo "$plain" | grep -q "unknown subcommand 'NOSUCH'" || err "wallfacer NOSUCH: $plain"
for args in "NOSUCH --help" "--help NOSUCH" "NOSUCH -h" "NOSUCH --version"; do
  # shellcheck disable=SC2086
  out=$("$wf" $args 2>&1); rc=$?
  [ $rc -eq 2 ] || err "wallfacer $args exited $rc, as wallfacer NOSUCH should 2"
  [ "$out" = "$plain" ] || err "wallfacer $args printed '$out', not wallfacer NOSUCH's '$plain'"
done

subs=$("$wf" --help | awk '/^Subcommands:/{on=1;next} on && NF{print $1}')
[ -n "$subs" ] || err "no subcommands listed by wallfacer --help"
for s in $subs; do
  out=$("$wf" "$s" --help 2>&1) || err "wallfacer $s --help exited $?"
  echo "$out" | grep -q "Usage" || err "wallfacer $s --help printed no usage"
  out=$("$wf" "$s" --no-such-flag 2>&1 </dev/null); rc=$?
  [ $rc -eq 2 ] || err "wallfacer $s --no-such-flag exited $rc, expected 2"
  [ "$(echo "$out" | wc -l)" -eq 1 ] || err "wallfacer $s --no-such-flag printed more than one line: $out"
  echo "$out" | grep -q -- "--no-such-flag" || err "wallfacer $s --no-such-flag: error does not name the flag: $out"
done
[ $fail -eq 0 ] && echo "cli contract: $(echo $subs | wc -w) subcommands checked"
exit $fail
