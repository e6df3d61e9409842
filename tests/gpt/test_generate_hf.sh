#!/usr/bin/env bash
# wallfacer generate on the transformers fixtures (tests/golden/hf, greedy.json): a greedy
# generation of the fixture prompt on P = 1 and 2 ranks (ring and zigzag) of an imported llama3,
# qwen2 and mistral (sliding window 8 on every layer, prompt and answer past it) fixture gives the
# ids transformers' greedy generate gave.
set -u
source "$(dirname "$0")/common.sh"
hf=$4/tests/golden/hf
py=${5:-python3}
source "$(dirname "$0")/generate_models.sh"

for f in llama3 qwen2 mistral; do
  "$wf" import-hf "$hf/$f" --out "$work/$f" >"$work/$f.log" 2>&1 || { err "import $f"; cat "$work/$f.log"; }
  # The prompt as a 1-D .npy, and the expected ids.
  read -r -a prompt <<<"$("$py" -c 'import json, sys; print(*json.load(open(sys.argv[1]))["prompt"])' "$hf/$f/greedy.json")"
  want=$("$py" -c 'import json, sys; print(*json.load(open(sys.argv[1]))["new_tokens"])' "$hf/$f/greedy.json")
  [ ${#prompt[@]} -gt 0 ] && [ -n "$want" ] || { err "$f: greedy.json"; continue; }
  ids "" "$work/$f-prompt.npy" "${prompt[@]}"
  n=$(echo "$want" | wc -w)
  for r in "1 ring" "2 ring" "2 zigzag"; do
    read -r np strat <<<"$r"
    got=$(mpi "$np" generate --ckpt "$work/$f" --prompt-tokens "$work/$f-prompt.npy" --max-new $n \
      --temperature 0 --strategy "$strat" 2>"$work/err") || { err "$f P=$np $strat: $(cat "$work/err")"; continue; }
    [ "$got" = "$want" ] || err "$f P=$np $strat: tokens '$got', transformers '$want'"
    echo "$f P=$np $strat: $got (transformers: $want)"
  done
done

[ $fail -eq 0 ] && echo "generate against transformers: all checks passed"
exit $fail
