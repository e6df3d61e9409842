#!/usr/bin/env bash
# A core per rank, emulated (--cpu-per-rank of scripts/wallfacer-mpirun and scripts/emulate-cluster,
# scripts/cpu-per-rank): ranks that spin for 3 s of wall time (tests/cluster/cpu_spin.py) each use
# at most their cap of CPU time (cap x wall + 0.1 s) when capped at 0.1 of a core, and at least
# half of 0.5 x wall when capped at 0.5 (so the spinner could exceed the low cap: the cap, not the
# machine, holds it), each in its own group and with WALLFACER_WAIT_POLL_US=50 (waits sleep);
# uncapped they are in no such group. The groups are gone after a run, after SIGTERM to the
# launcher, and after `--cleanup` once the launcher was killed with SIGKILL. Bad input (a fraction
# out of range, no cpu controller, not root): one line, exit 2.
set -u
source "$(dirname "$0")/common.sh"
spin=$src/tests/cluster/cpu_spin.py
py=$(python3 -c 'import sys; print(sys.executable)')  # the interpreter itself, not a wrapper
cg=/sys/fs/cgroup/cpu
if [[ ! -f $cg/cpu.cfs_quota_us ]]; then
  echo "SKIP: no cgroup v1 cpu controller at $cg"
  exit 77
fi
mpirun_wrap() { WALLFACER=$py "$src/scripts/wallfacer-mpirun" "$@"; }
groups_left() { ls -d "$cg"/wf-cpu-* 2>/dev/null || true; }
[[ -z "$(groups_left)" ]] || "$src/scripts/wallfacer-mpirun" --cleanup

# check NAME CAP MIN_FRACTION LINES: every rank's line within the cap (CAP x wall + 0.1 s) and,
# with MIN_FRACTION > 0, at least MIN_FRACTION x CAP x wall; each rank in its own group.
check() {
  python3 - "$@" <<'PY' || err "$1"
import json, sys
name, cap, low, text = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
# Every JSON object in the output, wherever the launcher's forwarding put the line breaks.
dec, rows, i = json.JSONDecoder(), [], text.find("{")
while i >= 0:
    row, end = dec.raw_decode(text, i)
    rows.append(row)
    i = text.find("{", end)
assert len(rows) == 2, f"{name}: {len(rows)} rank lines, expected 2: {text}"
for r in rows:
    use = r["cpu_s"] / r["wall_s"]
    print(f"{name}: rank {r['rank']} used {r['cpu_s']:.3f} s of CPU in {r['wall_s']:.2f} s "
          f"({use:.3f} of a core) in {r['cgroup']}")
    if cap > 0:
        assert r["cgroup"].endswith(f"/rank{r['rank']}") and "/wf-cpu-" in r["cgroup"], \
            f"rank {r['rank']} is not in its own group: {r['cgroup']}"
        assert r["cpu_s"] <= cap * r["wall_s"] + 0.1, f"rank {r['rank']} exceeded its cap {cap}"
        assert r["cpu_s"] >= low * cap * r["wall_s"], \
            f"rank {r['rank']} got less than {low} of its cap {cap}"
        assert r["wait_poll_us"] == "50", \
            f"rank {r['rank']}: WALLFACER_WAIT_POLL_US is {r['wait_poll_us']!r}, not the default 50"
    else:
        assert "wf-cpu-" not in r["cgroup"], f"uncapped rank in {r['cgroup']}"
PY
}

out=$(mpirun_wrap --cpu-per-rank 0.1 2 "$spin" 3) || err "capped at 0.1 exited $?"
check "wallfacer-mpirun, cap 0.1" 0.1 0 "$out"
out=$(mpirun_wrap --cpu-per-rank 0.5 2 "$spin" 3) || err "capped at 0.5 exited $?"
check "wallfacer-mpirun, cap 0.5" 0.5 0.5 "$out"
out=$(mpirun_wrap 2 "$spin" 1) || err "uncapped exited $?"
check "wallfacer-mpirun, no cap" 0 0 "$out"
[[ -z "$(groups_left)" ]] || err "groups left after the runs: $(groups_left)"

out=$(emu --nodes 2 --ranks-per-node 1 --rate 100mbit --cpu-per-rank 0.1 -- "$py" "$spin" 3) ||
  err "emulate-cluster capped at 0.1 exited $?"
check "emulate-cluster 2 x 1, cap 0.1" 0.1 0 "$out"
check_namespaces_gone
[[ -z "$(groups_left)" ]] || err "groups left after emulate-cluster: $(groups_left)"

# SIGTERM to the launcher ends its ranks and removes the groups.
WALLFACER=$py "$src/scripts/wallfacer-mpirun" --cpu-per-rank 0.1 2 "$spin" 60 >/dev/null 2>&1 &
pid=$!
for _ in $(seq 1 100); do [[ -n "$(ls -d "$cg/wf-cpu-$pid"/rank1 2>/dev/null)" ]] && break; sleep 0.1; done
[[ -d $cg/wf-cpu-$pid/rank1 ]] || err "no rank group while the job runs"
kill -TERM "$pid"
wait "$pid"
echo "SIGTERM: the launcher exited $?"
[[ -z "$(groups_left)" ]] || err "groups left after SIGTERM: $(groups_left)"
# SIGKILL leaves them; --cleanup ends the ranks and removes them.
WALLFACER=$py "$src/scripts/wallfacer-mpirun" --cpu-per-rank 0.1 2 "$spin" 60 >/dev/null 2>&1 &
pid=$!
for _ in $(seq 1 100); do
  [[ -n "$(cat "$cg/wf-cpu-$pid"/rank0/cgroup.procs 2>/dev/null)" &&
     -n "$(cat "$cg/wf-cpu-$pid"/rank1/cgroup.procs 2>/dev/null)" ]] && break
  sleep 0.1
done
kill -KILL "$pid"
wait "$pid" 2>/dev/null
ranks=$(cat "$cg/wf-cpu-$pid"/rank*/cgroup.procs 2>/dev/null)
[[ -n "$ranks" ]] || err "no ranks in the groups after SIGKILL to the launcher"
"$src/scripts/wallfacer-mpirun" --cleanup || err "--cleanup exited $?"
[[ -z "$(groups_left)" ]] || err "groups left after --cleanup: $(groups_left)"
sleep 0.5
for p in $ranks; do  # gone, or a zombie that its orphaned mpirun has not reaped yet
  [[ -e /proc/$p && $(awk '{print $3}' "/proc/$p/stat" 2>/dev/null) != Z ]] &&
    err "rank process $p still runs after --cleanup"
done
echo "SIGKILL then --cleanup: ranks $(echo $ranks) ended, groups removed"

# Bad input: one line, exit 2, nothing made.
bad() {  # bad WHAT PATTERN command...
  local what=$1 pat=$2 out rc
  shift 2
  out=$("$@" 2>&1); rc=$?
  echo "$what: exit $rc: $out"
  [[ $rc -eq 2 ]] || err "$what: exit $rc, expected 2"
  [[ $(echo "$out" | wc -l) -eq 1 ]] || err "$what: not one line: $out"
  echo "$out" | grep -q -- "$pat" || err "$what: does not mention '$pat'"
}
bad "fraction 0" "to 64 cores per rank" mpirun_wrap --cpu-per-rank 0 2 "$spin" 1
bad "fraction abc" "number of cores per rank" mpirun_wrap --cpu-per-rank abc 2 "$spin" 1
bad "fraction 100" "to 64 cores per rank" emu --nodes 2 --ranks-per-node 1 --rate 100mbit --cpu-per-rank 100 -- "$py" "$spin" 1
bad "no controller" "no cgroup v1 cpu controller" env WALLFACER_CPU_CGROUP=/nonexistent \
  WALLFACER=$py "$src/scripts/wallfacer-mpirun" --cpu-per-rank 0.1 2 "$spin" 1
bad "not root" "needs root" setpriv --reuid=65534 --regid=65534 --clear-groups \
  "$src/scripts/cpu-per-rank" check 0.1
[[ -z "$(groups_left)" ]] || err "groups left after the bad input: $(groups_left)"
exit $fail
