#!/usr/bin/env bash
# train.packing = "documents": P = 1 and P = 2, 4 (ring, zigzag, Ulysses, WallFacer, a Ulysses x
# zigzag hybrid, dp x sp, attention checkpointing; fp32, and bf16 with zigzag) give the same
# training and validation losses on a corpus of many short files, whose windows hold several
# documents, in the balanced layout (parallel.layout's default with packing) and in the
# strategy's; every step's work_imbalance in metrics.jsonl is >= 1 and at most the strategy
# layout's on the same data (below it on the sum over steps); an interrupted and resumed run in
# the balanced layout gives the same losses bit for bit; the documents differ from
# train.packing = "none"; and on a corpus whose windows hold no end-of-text token, "documents" is
# bit-identical to "none".
set -u
source "$(dirname "$0")/common.sh"

prepare_doc_corpus

val_losses() { grep -o '"val_loss":[^,}]*' "$1/metrics.jsonl" | cut -d: -f2; }

d=(data.dir="$work/docs" train.packing=documents)
run p1_docs 1 "${d[@]}"
run p1_none 1 data.dir="$work/docs"
run p2_ring 2 "${d[@]}" parallel.sp=2 parallel.strategy=ring
run p4_zigzag 4 "${d[@]}" parallel.sp=4 parallel.strategy=zigzag parallel.checkpointing=attention
run p4_ulysses 4 "${d[@]}" parallel.sp=4 parallel.strategy=ulysses
run p4_wallfacer 4 "${d[@]}" parallel.sp=4 parallel.strategy=wallfacer parallel.teams=2
run p4_dp2_sp2 4 "${d[@]}" parallel.sp=2 parallel.strategy=zigzag
run p4_hybrid 4 "${d[@]}" parallel.sp=4 parallel.strategy=zigzag parallel.ulysses=2
# The same in the strategy's layout.
strat=(parallel.layout=strategy)
run p2_ring_s 2 "${d[@]}" "${strat[@]}" parallel.sp=2 parallel.strategy=ring
run p4_zigzag_s 4 "${d[@]}" "${strat[@]}" parallel.sp=4 parallel.strategy=zigzag parallel.checkpointing=attention
run p4_wallfacer_s 4 "${d[@]}" "${strat[@]}" parallel.sp=4 parallel.strategy=wallfacer parallel.teams=2
run p4_dp2_sp2_s 4 "${d[@]}" "${strat[@]}" parallel.sp=2 parallel.strategy=zigzag
grep -q "packing documents, balanced layout" "$work/p4_zigzag.log" ||
  err "p4_zigzag does not say it runs the balanced layout: $(cat "$work/p4_zigzag.log")"
grep -q "packing documents, strategy layout" "$work/p4_zigzag_s.log" ||
  err "p4_zigzag_s does not say it runs the strategy layout: $(cat "$work/p4_zigzag_s.log")"
for r in p2_ring p4_zigzag p4_ulysses p4_wallfacer p4_dp2_sp2 p4_hybrid p2_ring_s p4_zigzag_s \
         p4_wallfacer_s p4_dp2_sp2_s; do
  within p1_docs $r 1e-4 5
  paste <(val_losses "$work/p1_docs") <(val_losses "$work/$r") | awk -v r=$r '
    { n++; d = ($2 - $1) / $1; if (d < 0) d = -d; if (d > 1e-4) bad++ }
    END { if (n != 1 || bad) { printf "FAIL: %s: val_loss differs from p1_docs\n", r; exit 1 } }' ||
    fail=1
done
# work_imbalance (max / mean over the ranks of the step's attention work): 1 on one rank; in the
# balanced layout >= 1 and at most the strategy layout's at every step, and below it in sum.
imbalances "$work/p1_docs" | awk '{ n++; if ($1 != 1) bad++ } END { exit !(n == 5 && !bad) }' ||
  err "p1_docs: work_imbalance is not 1 on one rank: $(imbalances "$work/p1_docs" | tr '\n' ' ')"
for r in p2_ring p4_zigzag p4_wallfacer p4_dp2_sp2; do imbalance_below $r ${r}_s 5 strict; done
# Interrupted after step 3 and resumed in the balanced layout: the same losses bit for bit.
resume_same resume 4 "${d[@]}" parallel.sp=4 parallel.strategy=zigzag
# bf16: P = 1 and P = 4 agree as without documents (test_train_bf16.sh).
run p1_bf16 1 "${d[@]}" train.dtype=bf16
run p4_bf16 4 "${d[@]}" train.dtype=bf16 parallel.sp=4 parallel.strategy=zigzag
within p1_bf16 p4_bf16 2e-4 5
# model.arch = "llama" with documents in the balanced layout: P = 1 against P = 4 (WallFacer C = 2
# and a Ulysses x zigzag hybrid).
llama=(model.arch=llama model.intermediate=48 model.tie_embeddings=false model.qkv_bias=true
  model.kv_heads=2 model.rope_scaling.type=llama3 model.rope_scaling.factor=4
  model.rope_scaling.original_max_position_embeddings=32)
run p1_llama 1 "${d[@]}" "${llama[@]}"
run p4_llama_wallfacer 4 "${d[@]}" "${llama[@]}" parallel.sp=4 parallel.strategy=wallfacer \
  parallel.teams=2
run p4_llama_hybrid 4 "${d[@]}" "${llama[@]}" parallel.sp=4 parallel.strategy=zigzag parallel.ulysses=2
within p1_llama p4_llama_wallfacer 1e-4 5
within p1_llama p4_llama_hybrid 1e-4 5
# The documents change the computation: step 1 (same parameters) differs from "none".
paste <(losses "$work/p1_none" | head -1) <(losses "$work/p1_docs" | head -1) |
  awk '{ d = ($2 - $1) / $1; if (d < 0) d = -d; exit !(d > 1e-6) }' ||
  err "packing = documents gave the loss of packing = none on windows with end-of-text tokens"

# One input file: its end-of-text token is the last token of the corpus (in val.bin, never inside an
# input window), so every window is one document.
run one_none 1 train.batch=1
run one_docs 1 train.batch=1 train.packing=documents
run one_docs_b2 1 train.packing=documents
run one_none_b2 1
for p in "one_none one_docs" "one_none_b2 one_docs_b2"; do
  set -- $p
  if [ "$(losses "$work/$1"; val_losses "$work/$1")" = "$(losses "$work/$2"; val_losses "$work/$2")" ]; then
    echo "ok: $2 bit-identical to $1"
  else
    err "$2 differs from $1"
  fi
done
exit $fail
