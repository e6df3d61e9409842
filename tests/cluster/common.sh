# Shared by the tests of the emulated cluster: sourced with the wallfacer binary and the source
# folder as $1 and $2. Skips (exit 77) without root; gives err, $tmp, $log and emu, which runs
# scripts/emulate-cluster with its stderr also kept in $log (each run names its namespaces there),
# and check_namespaces_gone, which fails the test when a run left any of them behind.
wf=$1
src=$2
fail=0
err() { echo "FAIL: $*"; fail=1; }
if [[ $(id -u) -ne 0 ]]; then
  echo "SKIP: the emulated cluster needs root"
  exit 77
fi
tmp=$(mktemp -d)
log=$(mktemp)
trap 'rm -rf "$tmp" "$log"' EXIT
export WALLFACER=$wf
emu() { "$src/scripts/emulate-cluster" "$@" 2> >(tee -a "$log" >&2); }
check_namespaces_gone() {
  local id left
  for id in $(grep -ho 'namespaces wfc[0-9]*' "$log" | awk '{print $2}' | sort -u); do
    left=$(ip netns list | awk '{print $1}' | grep "^$id-" || true)
    [[ -z "$left" ]] || err "namespaces left behind: $left"
  done
}
