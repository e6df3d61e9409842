#!/usr/bin/env bash
# The DiT training runs of docs/dit.md and docs/training.md ("Packed clips"), on 2 ranks.
#
#   bench/dit_train.sh [--out runs/dit-train] [--only RUN] > docs/data/dit-train.jsonl
#
# Three runs of configs/dit-video.toml in fp32 (train.dtype = "fp32", so that the losses do not
# depend on the CPU): "video" (240 steps, the config otherwise as it is), "packed" (50
# steps, sequences of 16 frames packed with clips of 2 to 8 frames) and "whole" (50 steps, whole
# clips of 8 frames, batch 8: the same tokens per step as packed). Prints one JSON line per run:
# the command, the commit, the load average before and after, and every line of the run's
# metrics.jsonl. bench/dit_train_table.py prints the tables from it. --only RUN runs one of the
# three (several instances with different runs may run at once).
set -euo pipefail
cd "$(dirname "$0")/.."
out=runs/dit-train only=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --out) out=$2; shift 2 ;;
    --only) only=$2; shift 2 ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "dit_train.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
done
case "$only" in
  "" | video | packed | whole) ;;
  *) echo "dit_train.sh: --only takes video, packed or whole, not '$only'" >&2; exit 2 ;;
esac
wf=${WALLFACER:-build/wallfacer}
[[ -x $wf ]] || { echo "dit_train.sh: $wf not found: run make build" >&2; exit 2; }
mkdir -p "$out"
commit=$(git rev-parse --short HEAD)

run() {
  local name=$1
  shift
  [[ -z $only || $only == "$name" ]] || return 0
  local cmd="scripts/wallfacer-mpirun 2 train --config configs/dit-video.toml --out $out/$name --overwrite --set train.dtype=fp32 $*"
  local load0
  load0=$(cut -d' ' -f1 /proc/loadavg)
  echo "== $name: $cmd" >&2
  # shellcheck disable=SC2086
  scripts/wallfacer-mpirun 2 train --config configs/dit-video.toml --out "$out/$name" --overwrite \
    --set train.dtype=fp32 "$@" >&2
  python3 - "$name" "$cmd" "$commit" "$load0" "$(cut -d' ' -f1 /proc/loadavg)" \
    "$out/$name/metrics.jsonl" <<'PY'
import json, sys
name, cmd, commit, load0, load1, metrics = sys.argv[1:]
rows = [json.loads(l) for l in open(metrics) if l.strip()]
print(json.dumps({"run": name, "command": cmd, "commit": commit,
                  "load": [float(load0), float(load1)], "metrics": rows}, sort_keys=True))
PY
}

run video --steps 240
run packed --steps 50 --set train.packing=documents --set train.seq=1024 \
  --set data.min_frames=2 --set train.eval_every=25 --set train.ckpt_every=0
run whole --steps 50 --set train.batch=8 --set train.eval_every=25 --set train.ckpt_every=0
