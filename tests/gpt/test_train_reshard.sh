#!/usr/bin/env bash
# A checkpoint holds the replicated training state once (state.bin) and resumes on another number of
# ranks and another parallel layout: 4 ranks -> 2, 1 and 8, 2 -> 4, dp x sp changed. The first
# resumed step starts from bit-identical parameters, so its loss equals the uninterrupted run's up
# to the summation order of the distributed arithmetic (TIGHT); later steps drift apart slowly
# (LOOSE). Resuming twice the same way is bit-identical. A format-1 checkpoint (one shard per rank,
# made here from a format-2 one by a script) still loads: on its own number of ranks it continues
# bit for bit, on another it equals a resume of the same state. An invalid new layout gets the
# normal validation error.
set -u
source "$(dirname "$0")/common.sh"
# Measured here: the first resumed step differs from the uninterrupted run by at most 9.7e-9
# (relative), the next steps (up to 6) by at most 1.2e-8; the bounds leave a margin of 10x and 80x.
TIGHT=1e-7
LOOSE=1e-6
t=(train --config "$work/tiny.toml" --progress plain --set train.ckpt_every=4
   --set train.eval_every=0 --set train.keep_checkpoints=0)

run() {  # run NAME NP ARGS...: train into $work/NAME on NP ranks
  local name=$1 np=$2
  shift 2
  mpi "$np" "${t[@]}" --out "$work/$name" "$@" >"$work/$name.log" 2>&1 ||
    err "$name exited $?: $(cat "$work/$name.log")"
}
from() {  # from SRC STEP NAME: NAME holds SRC's run up to its checkpoint of step STEP
  mkdir -p "$work/$3/ckpt"
  cp "$work/$1/metrics.jsonl" "$work/$3/"
  cp -r "$work/$1/ckpt/step-$2" "$work/$3/ckpt/"
}
close() {  # close A B FIRST LAST TOL: the losses of steps FIRST..LAST of B within TOL of A's
  paste <(losses "$work/$1") <(losses "$work/$2") | awk -v a="$1" -v b="$2" -v f="$3" -v l="$4" \
    -v tol="$5" '
    NR >= f && NR <= l { n++; d = $1 - $2; if (d < 0) d = -d; r = d / ($1 < 0 ? -$1 : $1)
                         if (r > worst) worst = r; if (r > tol) bad++ }
    END { if (n != l - f + 1 || bad) {
            printf "FAIL: %s vs %s, steps %d..%d: %d steps, %d beyond %g (worst %.3g)\n", a, b, f, l,
                   n, bad, tol, worst; exit 1 }
          printf "ok: %s vs %s, steps %d..%d: worst relative difference %.3g (bound %g)\n", a, b, f,
                 l, worst, tol }' || fail=1
}
same() {  # same A B: identical losses (every step of both files)
  if [ -s "$work/$1/metrics.jsonl" ] && [ "$(losses "$work/$1")" == "$(losses "$work/$2")" ]; then
    echo "ok: $2 has the losses of $1 bit for bit"
  else
    err "$2 differs from $1: $(diff <(losses "$work/$1") <(losses "$work/$2") | head -4)"
  fi
}
said() {  # said NAME TEXT: the log of NAME holds TEXT
  grep -qF "$2" "$work/$1.log" || err "$1: no line '$2': $(cat "$work/$1.log")"
}

# The uninterrupted run: 4 ranks, dp 1 x sp 4, checkpoints at 4, 8 and 10, each one state.bin.
run a4 4 --steps 10 --set parallel.sp=4 --set parallel.strategy=zigzag
for d in "$work"/a4/ckpt/step-{4,8,10}; do
  [ "$(ls "$d" | tr '\n' ' ')" == "manifest.json state.bin " ] || err "$d holds: $(ls "$d")"
done

# 4 -> 2 ranks (dp 1 x sp 2, ring), twice.
for name in b2 b2again; do
  from a4 4 $name
  run $name 2 --steps 10 --set parallel.sp=2 --resume
done
said b2 "resuming step 4 written by 4 ranks (dp 1 x sp 4) on 2 ranks (dp 1 x sp 2)"
close a4 b2 5 5 $TIGHT
close a4 b2 6 10 $LOOSE
same b2 b2again
[ "$(ls "$work/b2/ckpt/step-8" | tr '\n' ' ')" == "manifest.json state.bin " ] ||
  err "b2's step-8 holds: $(ls "$work/b2/ckpt/step-8")"

# 4 -> 1 rank; 4 -> 2 ranks as dp 2 x sp 1; 4 -> 8 ranks as dp 2 x sp 4 (WallFacer, 2 teams).
from a4 4 c1
run c1 1 --steps 10 --resume
said c1 "resuming step 4 written by 4 ranks (dp 1 x sp 4) on 1 rank (dp 1 x sp 1)"
from a4 4 d2
run d2 2 --steps 10 --resume
said d2 "on 2 ranks (dp 2 x sp 1)"
from a4 4 h8
run h8 8 --steps 10 --set parallel.sp=4 --set parallel.strategy=wallfacer --set parallel.teams=2 \
  --resume
said h8 "on 8 ranks (dp 2 x sp 4)"
for name in c1 d2 h8; do
  close a4 $name 5 5 $TIGHT
  close a4 $name 6 10 $LOOSE
done

# 2 -> 4 ranks: b2's checkpoint of step 8 (written by 2 ranks) against b2's own continuation.
from b2 8 e4
run e4 4 --steps 10 --set parallel.sp=4 --set parallel.strategy=ulysses --resume
said e4 "resuming step 8 written by 2 ranks (dp 1 x sp 2) on 4 ranks (dp 1 x sp 4)"
close b2 e4 9 9 $TIGHT
close b2 e4 10 10 $LOOSE

# An invalid new layout: the normal validation error, exit 2.
from a4 4 bad
out=$(mpi 3 "${t[@]}" --out "$work/bad" --steps 10 --set parallel.sp=2 --resume 2>&1); rc=$?
[ $rc -eq 2 ] || err "3 ranks with sp 2: exit $rc, expected 2: $out"
echo "$out" | grep -q "parallel.sp = 2 must divide the number of ranks 3" || err "message: $out"

# Format 1: a checkpoint with one shard per rank (rank-RRRRR.bin, 64-byte header whose checksum
# covers the payload only; the manifest lists every shard with the checksum of the whole file).
to_v1() {
  python3 - "$1" <<'PY'
import json, struct, sys
d = sys.argv[1]
m = json.load(open(d + "/manifest.json"))
b = open(d + "/state.bin", "rb").read()
_, version, hbytes, _, _, world, _, step, n, _, _, rng, _ = struct.unpack_from("<8s6I6Q", b)
assert version == 2 and hbytes == 96 and len(b) == 96 + 12 * n
payload = b[96:]
def fnv(data, h=0xcbf29ce484222325):
    for c in data:
        h = ((h ^ c) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return h
payload_sum = fnv(payload)
shards = []
for r in range(world):
    head = struct.pack("<8s4I4Q8x", b"WFCKPT01", 1, 64, r, world, step, n, rng, payload_sum)
    name = "rank-%05d.bin" % r
    open(d + "/" + name, "wb").write(head + payload)
    shards.append({"file": name, "bytes": len(head) + len(payload),
                   "fnv1a64": "%016x" % fnv(payload, fnv(head))})
v1 = {"format": "wallfacer-checkpoint", "version": 1, "step": step, "world": world,
      "layout": m["layout"], "config": m["config"], "shards": shards}
open(d + "/manifest.json", "w").write(json.dumps(v1, indent=1) + "\n")
PY
  rm "$1/state.bin"
}
from a4 4 v1same
to_v1 "$work/v1same/ckpt/step-4" || err "could not write the format-1 checkpoint"
cp -r "$work/v1same" "$work/v1other"
[ "$(ls "$work/v1same/ckpt/step-4" | tr '\n' ' ')" == \
  "manifest.json rank-00000.bin rank-00001.bin rank-00002.bin rank-00003.bin " ] ||
  err "format-1 fixture: $(ls "$work/v1same/ckpt/step-4")"
run v1same 4 --steps 10 --set parallel.sp=4 --set parallel.strategy=zigzag --resume
same a4 v1same
run v1other 2 --steps 10 --set parallel.sp=2 --resume
said v1other "resuming step 4 written by 4 ranks (dp 1 x sp 4) on 2 ranks (dp 1 x sp 2)"
same b2 v1other

[ $fail -eq 0 ] && echo "ok: checkpoints resume on another number of ranks"
exit $fail
