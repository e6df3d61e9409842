#!/usr/bin/env bash
# examples/python/torch_gpt.py: 20 steps on 4 ranks of WallFacer C = 2 against one process with
# plain PyTorch attention (--reference), on token shards prepared from the repository's docs; the
# losses of every step agree to 1e-4. Then bad input: one line with the library's message, exit 2.
# Usage: test_example.sh PYTHON WALLFACER MPIRUN REPO_ROOT
set -u
python=$1 wf=$2 mpirun=$3 root=$4
tmp=$(mktemp -d "${TMPDIR:-/tmp}/wallfacer-torch-gpt.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
example=$root/examples/python/torch_gpt.py
fail=0

cat "$root"/README.md "$root"/docs/*.md > "$tmp/text.txt"
"$wf" prepare --input "$tmp/text.txt" --out "$tmp/data" > /dev/null || { echo "FAIL: prepare"; exit 1; }
args=(--data "$tmp/data" --steps 20 --seq 128 --batch 2 --layers 2 --dim 64 --heads 4 --kv-heads 2)
"$python" "$example" "${args[@]}" --reference > "$tmp/ref.txt" || { echo "FAIL: --reference"; cat "$tmp/ref.txt"; exit 1; }
"$mpirun" --oversubscribe --bind-to none -np 4 "$python" "$example" "${args[@]}" \
  --strategy wallfacer --teams 2 > "$tmp/wf.txt" || { echo "FAIL: 4 ranks"; cat "$tmp/wf.txt"; exit 1; }
"$python" - "$tmp/ref.txt" "$tmp/wf.txt" <<'PY' || fail=1
import sys
def losses(path):
    return {int(w[1]): float(w[3]) for w in (l.split() for l in open(path)) if w and w[0] == "step"}
ref, got = losses(sys.argv[1]), losses(sys.argv[2])
assert sorted(ref) == list(range(1, 21)) and sorted(got) == sorted(ref), (ref, got)
worst = max(abs(ref[s] - got[s]) for s in ref)
print(f"losses of 20 steps, 4 ranks wallfacer C=2 against 1 process --reference: "
      f"first {ref[1]:.6f} / {got[1]:.6f}, last {ref[20]:.6f} / {got[20]:.6f}, "
      f"largest difference {worst:.2e}")
assert ref[20] < ref[1] - 0.5, "the loss did not fall"
sys.exit(0 if worst <= 1e-4 else 1)
PY

# Bad input on every rank: --teams 3 on 4 ranks.
"$mpirun" --oversubscribe --bind-to none -np 4 "$python" "$example" "${args[@]}" --strategy wallfacer \
  --teams 3 > "$tmp/bad.out" 2> "$tmp/bad.err"
rc=$?
want="torch_gpt: error: --teams 3: wallfacer needs C^2 = 9 to divide the 4 ranks; choose --teams C with C^2 dividing P"
if [ "$rc" -ne 2 ] || [ "$(grep -c 'error:' "$tmp/bad.err")" -ne 1 ] || ! grep -qxF "$want" "$tmp/bad.err"; then
  echo "FAIL: --teams 3: exit $rc, stderr:"; cat "$tmp/bad.err"; fail=1
fi
[ $fail -eq 0 ] && echo "torch_gpt: ok"
exit $fail
