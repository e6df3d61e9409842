#!/usr/bin/env bash
# Two jobs, one run folder: the first `train` holds an advisory lock on its --out (the file
# train.lock, with its host and pid) until it ends; a second job on the same --out (--resume,
# --overwrite, or a fresh run) exits 2 naming the holder and touches nothing; a lock left by a
# killed job is taken over, and said; a clean end removes the lock. An empty config is refused.
set -u
source "$(dirname "$0")/../gpt/common.sh"
t=(--config "$work/tiny.toml" --progress none)
host=$(hostname)

# Job A: one rank, many steps, in the background; it holds the lock once metrics.jsonl exists.
"$wf" train "${t[@]}" --out "$work/run" --steps 1000000 --set train.ckpt_every=20 \
  >"$work/a.log" 2>&1 &
a=$!
for _ in $(seq 1 600); do [ -s "$work/run/metrics.jsonl" ] && break; sleep 0.05; done
[ -s "$work/run/metrics.jsonl" ] || err "job A wrote no metrics: $(cat "$work/a.log")"
[ "$(cat "$work/run/train.lock")" == "host $host pid $a" ] ||
  err "train.lock of job A holds '$(cat "$work/run/train.lock")', expected 'host $host pid $a'"

# Job B on the same --out, while A runs: refused with exit 2, one error line naming A; A's files
# stay (even with --overwrite, which would remove them).
for how in "--resume" "--overwrite" ""; do
  out=$(mpi 2 train "${t[@]}" --set parallel.sp=2 --out "$work/run" $how --steps 3 2>&1); rc=$?
  [ $rc -eq 2 ] || err "job B ($how) on A's --out: exit $rc, expected 2: $out"
  [ "$(echo "$out" | grep -c "error:")" -eq 1 ] || err "job B ($how): not one error line: $out"
  echo "$out" | grep -qE "error: (rank 0: )?--out '$work/run' is in use by another job \(host $host pid $a;" ||
    err "job B ($how) does not name the holder: $out"
  [ -s "$work/run/metrics.jsonl" ] || err "job B ($how) removed A's metrics"
  kill -0 $a 2>/dev/null || err "job A ended while B ($how) was refused: $(cat "$work/a.log")"
done
n=$(wc -l <"$work/run/metrics.jsonl")

# Job A killed: its lock file stays behind; the kernel released the lock.
for _ in $(seq 1 600); do [ -d "$work/run/ckpt/step-20" ] && break; sleep 0.05; done
kill -KILL $a
wait $a 2>/dev/null
[ "$(cat "$work/run/train.lock")" == "host $host pid $a" ] || err "the killed job's lock file: $(
  cat "$work/run/train.lock" 2>&1)"
[ "$(wc -l <"$work/run/metrics.jsonl")" -ge "$n" ] || err "metrics shrank"

# Job C resumes: takes the stale lock over and says whose it was; its own lock goes at the end.
# (the newest finished checkpoint: A may have been killed while it wrote step-N.tmp)
newest=$(ls "$work/run/ckpt" | grep -E '^step-[0-9]+$' | sed 's/step-//' | sort -n | tail -1)
out=$(mpi 2 train "${t[@]}" --set parallel.sp=2 --out "$work/run" --resume --steps $((newest + 2)) \
  2>&1); rc=$?
[ $rc -eq 0 ] || err "job C after the killed A: exit $rc: $out"
echo "$out" | grep -q "warning: took over $work/run/train.lock from a job that is gone (host $host pid $a)" ||
  err "job C does not say it took over A's lock: $out"
echo "$out" | grep -q "resumed from .*step-$newest (step $newest)" || err "job C did not resume: $out"
[ ! -e "$work/run/train.lock" ] || err "job C left its lock: $(cat "$work/run/train.lock")"
[ "$(losses "$work/run" | wc -l)" -eq $((newest + 2)) ] || err "job C: metrics of $((newest + 2)) steps expected"

# Two jobs started together on a fresh --out: exactly one runs, the other is refused naming it.
mpi 1 train "${t[@]}" --out "$work/two" --steps 40 >"$work/two-1.log" 2>&1 &
p1=$!
mpi 1 train "${t[@]}" --out "$work/two" --steps 40 >"$work/two-2.log" 2>&1 &
p2=$!
wait $p1; r1=$?
wait $p2; r2=$?
codes="$(echo -e "$r1\n$r2" | sort | tr '\n' ' ')"
# The second may also start after the first ended (then it finds a run there): exit 2 either way.
[ "$codes" == "0 2 " ] || err "two jobs on one --out: exits $r1 and $r2, expected 0 and 2: $(
  cat "$work/two-1.log" "$work/two-2.log")"
refused=$([ $r1 -eq 2 ] && echo "$work/two-1.log" || echo "$work/two-2.log")
# The holder may not have written its name yet ("starting").
grep -qE "error: (rank 0: )?(--out '$work/two' is in use by another job \((host $host pid [0-9]+|starting);|'$work/two' already holds a training run)" \
  "$refused" || err "the refused job's message: $(cat "$refused")"
[ "$(losses "$work/two" | wc -l)" -eq 40 ] || err "two jobs: metrics hold $(losses "$work/two" | wc -l) lines, expected 40"
[ ! -e "$work/two/train.lock" ] || err "a lock left after both jobs ended"

# An empty config file (or comments only) is refused, not trained with every default.
for text in "" "# nothing yet"; do
  echo -n "$text" >"$work/empty.toml"
  out=$("$wf" train --config "$work/empty.toml" --out "$work/e" 2>&1); rc=$?
  [ $rc -eq 2 ] && echo "$out" | grep -q "error: $work/empty.toml is empty" ||
    err "empty config '$text': exit $rc: $out"
  [ ! -e "$work/e" ] || err "empty config: --out was created"
done

[ $fail -eq 0 ] && echo "ok: one job per run folder, a killed job's lock taken over, empty config refused"
exit $fail
