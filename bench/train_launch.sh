# Sourced by the training benchmarks that run capped ranks or an emulated cluster
# (bench/documents_train.sh, bench/llama_sp.sh).
# train_launcher NAME RANKS CPU EMULATE COUNTERS sets
#   launch     the launcher with its options: scripts/wallfacer-mpirun [--cpu-per-rank CPU], or
#              with EMULATE (NxR:RATE, N x R = RANKS) scripts/emulate-cluster on N nodes of R
#              ranks with cards of RATE, writing the cards' bytes to COUNTERS
#              [--cpu-per-rank CPU] --
#   nranks     the rank count it takes before the program (none for emulate-cluster)
#   node_size  ranks per node (RANKS without EMULATE)
# and stops the script (exit 2, a line naming NAME) when EMULATE or CPU is not valid.
train_launcher() {
  local name=$1 ranks=$2 cpu=$3 emulate=$4 counters=$5
  launch=(scripts/wallfacer-mpirun) nranks=("$ranks") node_size=$ranks
  [[ -z "$cpu" ]] || scripts/cpu-per-rank check "$cpu"
  if [[ -n "$emulate" ]]; then
    [[ "$emulate" =~ ^([0-9]+)x([0-9]+):(.+)$ && $((BASH_REMATCH[1] * BASH_REMATCH[2])) -eq $ranks ]] ||
      { echo "$name: --emulate '$emulate' must be NxR:RATE with N x R = --ranks $ranks, e.g. 2x4:1gbit" >&2
        exit 2; }
    node_size=${BASH_REMATCH[2]} nranks=()
    launch=(scripts/emulate-cluster --nodes "${BASH_REMATCH[1]}" --ranks-per-node "$node_size"
            --rate "${BASH_REMATCH[3]}" --counters "$counters" ${cpu:+--cpu-per-rank "$cpu"} --)
  elif [[ -n "$cpu" ]]; then
    launch+=(--cpu-per-rank "$cpu")
  fi
}
