#!/usr/bin/env bash
# Ulysses 2 x WallFacer-2 (parallel.ulysses = 2, parallel.strategy = "wallfacer", parallel.teams = 2)
# on 8 ranks gives the losses of one rank over 5 steps: with grouped-query heads (kv_heads = U) and
# keep_kv, and with packed documents in the balanced layout.
set -u
source "$(dirname "$0")/common.sh"

uw=(parallel.sp=8 parallel.strategy=wallfacer parallel.teams=2 parallel.ulysses=2)
run p1_gqa 1 model.kv_heads=2
run p8_gqa_keep_kv 8 model.kv_heads=2 "${uw[@]}" parallel.keep_kv=true
within p1_gqa p8_gqa_keep_kv 1e-4 5

prepare_doc_corpus
d=(data.dir="$work/docs" train.packing=documents)
run p1_docs 1 "${d[@]}"
run p8_docs 8 "${d[@]}" "${uw[@]}"
grep -q "packing documents, balanced layout" "$work/p8_docs.log" ||
  err "p8_docs does not say it runs the balanced layout: $(cat "$work/p8_docs.log")"
within p1_docs p8_docs 1e-4 5
exit $fail
