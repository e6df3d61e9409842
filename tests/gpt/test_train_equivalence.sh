#!/usr/bin/env bash
# P = 1 and P = 4 (every strategy, a double ring of inner rings of 2, Ulysses 2 x zigzag 2,
# dp x sp, GQA, attention checkpointing) give the same losses over 5 steps: the loss is the mean over the global batch and the gradients are summed over sp and
# averaged over dp, so the result does not depend on the layout.
set -u
source "$(dirname "$0")/common.sh"

# close A B: every loss of run B within 1e-4 (relative) of run A.
close() {
  paste <(losses "$work/$1") <(losses "$work/$2") | awk -v a="$1" -v b="$2" '
    { n++; d = $1 - $2; if (d < 0) d = -d; if (d > 1e-4 * ($1 < 0 ? -$1 : $1)) bad++ }
    END { if (n != 5 || bad) { printf "FAIL: %s vs %s: %d steps, %d differ\n", a, b, n, bad; exit 1 }
          printf "ok: %s matches %s over %d steps\n", b, a, n }' || fail=1
}

run p1 1
run p4_ring 4 parallel.sp=4 parallel.strategy=ring
run p4_zigzag 4 parallel.sp=4 parallel.strategy=zigzag parallel.checkpointing=attention
run p4_ulysses 4 parallel.sp=4 parallel.strategy=ulysses
run p4_wallfacer 4 parallel.sp=4 parallel.strategy=wallfacer parallel.teams=2
run p4_dp2_sp2 4 parallel.sp=2 parallel.strategy=zigzag
run p4_hybrid 4 parallel.sp=4 parallel.strategy=zigzag parallel.ulysses=2
run p4_keep_kv 4 parallel.sp=4 parallel.strategy=wallfacer parallel.teams=2 parallel.keep_kv=true \
  parallel.checkpointing=attention
run p4_double_ring 4 parallel.sp=4 parallel.strategy=double-ring parallel.inner=2
for r in p4_ring p4_zigzag p4_ulysses p4_wallfacer p4_dp2_sp2 p4_hybrid p4_keep_kv p4_double_ring; do
  close p1 $r
done
grep -q 'double-ring W=2' "$work/p4_double_ring.log" || err "the double ring's startup line lacks W=2"
# parallel.inner left at 0: the ranks per node (nodes of 2 ranks pretended).
WALLFACER_NODE_SIZE=2 run p4_double_ring_nodes 4 parallel.sp=4 parallel.strategy=double-ring
close p1 p4_double_ring_nodes
grep -q 'double-ring W=2' "$work/p4_double_ring_nodes.log" ||
  err "parallel.inner = 0 on nodes of 2 ranks did not run inner rings of 2"

run p1_gqa 1 model.kv_heads=2
run p4_gqa 4 model.kv_heads=2 parallel.sp=4 parallel.strategy=wallfacer parallel.teams=2
run p4_gqa_keep_kv 4 model.kv_heads=2 parallel.sp=4 parallel.strategy=wallfacer parallel.teams=2 \
  parallel.keep_kv=true
close p1_gqa p4_gqa
close p1_gqa p4_gqa_keep_kv

# model.arch = "llama" (RMSNorm, SwiGLU, untied head, q/k/v biases, llama3 rope scaling, GQA, a
# windowed layer): the same losses on 1 and 4 ranks for every strategy.
LLAMA=(model.arch=llama model.intermediate=48 model.norm_eps=1e-6 model.tie_embeddings=false
  model.qkv_bias=true model.rope_theta=500 model.rope_scaling.type=llama3 model.rope_scaling.factor=4
  model.rope_scaling.original_max_position_embeddings=32 model.window=24 model.window_layers=1)
run p1_llama 1 "${LLAMA[@]}" model.kv_heads=2 train.ckpt_every=5
run p4_llama_ring 4 "${LLAMA[@]}" model.kv_heads=2 parallel.sp=4 parallel.strategy=ring
run p4_llama_zigzag 4 "${LLAMA[@]}" model.kv_heads=2 parallel.sp=4 parallel.strategy=zigzag \
  parallel.checkpointing=attention
run p4_llama_wallfacer 4 "${LLAMA[@]}" model.kv_heads=2 parallel.sp=4 parallel.strategy=wallfacer \
  parallel.teams=2
run p4_llama_hybrid 4 "${LLAMA[@]}" model.kv_heads=2 parallel.sp=4 parallel.strategy=zigzag \
  parallel.ulysses=2
run p4_llama_double_ring 4 "${LLAMA[@]}" model.kv_heads=2 parallel.sp=4 \
  parallel.strategy=double-ring parallel.inner=2
run p1_llama_mha 1 "${LLAMA[@]}"
run p4_llama_ulysses 4 "${LLAMA[@]}" parallel.sp=4 parallel.strategy=ulysses
for r in p4_llama_ring p4_llama_zigzag p4_llama_wallfacer p4_llama_hybrid p4_llama_double_ring; do
  close p1_llama $r
done
close p1_llama_mha p4_llama_ulysses
losses "$work/p1_llama" | awk 'NR==1{a=$1} NR==5{b=$1} END{exit !(b < a)}' ||
  err "llama loss did not drop"
grep -q 'arch = .*llama' "$work/p1_llama/ckpt/step-5/manifest.json" ||
  err "the llama checkpoint does not record model.arch"

# Training moves: the loss of step 5 is below that of step 1.
losses "$work/p1" | awk 'NR==1{a=$1} NR==5{b=$1} END{exit !(b < a)}' || err "loss did not drop"
grep -q '"val_loss"' "$work/p1/metrics.jsonl" || err "no val_loss in metrics"
for k in step loss lr grad_norm tokens_per_s; do
  grep -q "\"$k\"" "$work/p1/metrics.jsonl" || err "metrics.jsonl lacks $k"
done
exit $fail
