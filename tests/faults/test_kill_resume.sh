#!/usr/bin/env bash
# Fault injection: a 4-rank training run loses one rank to SIGKILL mid-run; the job must end (non-zero)
# promptly, and --resume must continue from the newest complete checkpoint and reproduce the losses
# of an uninterrupted run bit for bit. The same for SIGTERM sent to mpirun.
set -u
source "$(dirname "$0")/../gpt/common.sh"
now() { date +%s.%N; }
steps=1200  # long enough that the faults (after step 10) land before the end, also on a busy machine
t=(train --config "$work/tiny.toml" --progress none --set parallel.sp=2 --set train.batch=2
   --set train.steps=$steps --set train.ckpt_every=5 --set train.eval_every=0)

mpi 4 "${t[@]}" --out "$work/full" >"$work/full.log" 2>&1 || err "uninterrupted run failed: $(cat "$work/full.log")"

# The step of the newest complete checkpoint of the run into $1 (0 when there is none).
newest_checkpoint() {
  ls "$1/ckpt" 2>/dev/null | sed -n 's/^step-\([0-9][0-9]*\)$/\1/p' | sort -n | tail -1 | grep . || echo 0
}

# interrupt NAME WHAT: start a run into $work/NAME, after a few checkpoints deliver the fault
# (WHAT = "kill RANK" or "term"), and check that the job ends within 10 s, non-zero.
interrupt() {
  local name=$1 what=$2 out=$work/$1 job victim="" t0 rc
  # exec: $! is mpirun itself. The ranks run at a lower priority (nice 10), so that on 2 cores
  # this script still gets to watch the checkpoints and deliver the fault mid-run.
  (exec nice -n 10 "$mpirun_bin" --oversubscribe --bind-to none -np 4 "$wf" "${t[@]}" --out "$out") \
    >"$out.log" 2>&1 &
  job=$!
  # Wait for a complete checkpoint at step 10 or later (older ones are removed as newer ones land,
  # train.keep_checkpoints, so a busy machine may never show step-10 itself to this loop).
  for _ in $(seq 1 600); do [ "$(newest_checkpoint "$out")" -ge 10 ] && break; sleep 0.05; done
  [ "$(newest_checkpoint "$out")" -ge 10 ] || err "$name: no checkpoint at step 10 or later"
  if [ "$what" == term ]; then
    victim=$job
    t0=$(now); kill -TERM "$job"
  else
    for p in $(pgrep -f "$wf train"); do
      grep -qz "^OMPI_COMM_WORLD_RANK=${what#kill }\$" "/proc/$p/environ" 2>/dev/null && victim=$p
    done
    [ -n "$victim" ] || { err "$name: rank not found"; kill "$job"; }
    t0=$(now); kill -KILL "$victim"
  fi
  wait "$job"; rc=$?
  local dt
  dt=$(echo "$(now) - $t0" | bc)
  echo "$name: job exited $rc, $dt s after the fault; metrics reached step $(losses "$out" | wc -l)"
  [ "$rc" -ne 0 ] || err "$name: the job exited 0"
  [ "$(losses "$out" | wc -l)" -lt $steps ] || err "$name: the run was not interrupted"
  [ "$(echo "$dt < 10" | bc)" -eq 1 ] || err "$name: the job took $dt s to end"
  sleep 1
  pgrep -f -- "--out $out\$" >/dev/null && err "$name: ranks still running after the job ended"
  # Resume (the newest checkpoint may be a .tmp of the interrupted save: it is not complete).
  mpi 4 "${t[@]}" --out "$out" --resume >"$out.resume.log" 2>&1 ||
    err "$name: resume failed: $(cat "$out.resume.log")"
  ls "$out/ckpt" | grep -q tmp && err "$name: a .tmp folder was left after the resumed run"
  if [ "$(losses "$out")" == "$(losses "$work/full")" ]; then
    echo "$name: resumed losses equal the uninterrupted run's ($steps steps)"
  else
    err "$name: losses differ from the uninterrupted run: $(diff <(losses "$out") <(losses "$work/full") | head -5)"
  fi
}
interrupt kill "kill 2"
interrupt term term

[ $fail -eq 0 ] && echo "ok: killed runs end promptly and resume exactly"
exit $fail
