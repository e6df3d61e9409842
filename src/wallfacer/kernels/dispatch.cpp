// The public kernel entry points: each calls its twin of the instruction-set level chosen at run
// time (kernels/isa.h).

#include "wallfacer/kernels/attention.h"
#include "wallfacer/kernels/attention_bf16.h"
#include "wallfacer/kernels/dense_bf16.h"
#include "wallfacer/kernels/isa.h"
#include "wallfacer/kernels/llama_ops.h"
#include "wallfacer/kernels/ops.h"

namespace wallfacer::kernels {

WALLFACER_ISA_DECLARE(attn_fwd)
WALLFACER_ISA_DECLARE(attn_fwd_init_output)
WALLFACER_ISA_DECLARE(attn_bwd_preprocess)
WALLFACER_ISA_DECLARE(attn_bwd)
WALLFACER_ISA_DECLARE(lse_merge_rows)
WALLFACER_ISA_DECLARE(lse_merge)
WALLFACER_ISA_DECLARE(attn_fwd_tiling)
WALLFACER_ISA_DECLARE(attn_bwd_tiling)
WALLFACER_ISA_DECLARE(attn_fwd_workspace_bytes)
WALLFACER_ISA_DECLARE(attn_bwd_workspace_bytes)
WALLFACER_ISA_DECLARE(attn_fwd_bf16)
WALLFACER_ISA_DECLARE(attn_bwd_preprocess_bf16)
WALLFACER_ISA_DECLARE(attn_bwd_bf16)
WALLFACER_ISA_DECLARE(attn_fwd_bf16_tiling)
WALLFACER_ISA_DECLARE(attn_bwd_bf16_tiling)
WALLFACER_ISA_DECLARE(attn_fwd_bf16_workspace_bytes)
WALLFACER_ISA_DECLARE(attn_bwd_bf16_workspace_bytes)
WALLFACER_ISA_DECLARE(matmul_fwd)
WALLFACER_ISA_DECLARE(matmul_bwd)
WALLFACER_ISA_DECLARE(layernorm_fwd)
WALLFACER_ISA_DECLARE(layernorm_bwd)
WALLFACER_ISA_DECLARE(gelu_fwd)
WALLFACER_ISA_DECLARE(gelu_bwd)
WALLFACER_ISA_DECLARE(gelu_fwd_bf16)
WALLFACER_ISA_DECLARE(gelu_bwd_bf16)
WALLFACER_ISA_DECLARE(rmsnorm_fwd)
WALLFACER_ISA_DECLARE(rmsnorm_bwd)
WALLFACER_ISA_DECLARE(swiglu_fwd)
WALLFACER_ISA_DECLARE(swiglu_bwd)
WALLFACER_ISA_DECLARE(swiglu_fwd_bf16)
WALLFACER_ISA_DECLARE(swiglu_bwd_bf16)
WALLFACER_ISA_DECLARE(rope_tables)
WALLFACER_ISA_DECLARE(rope_fwd)
WALLFACER_ISA_DECLARE(rope_bwd)
WALLFACER_ISA_DECLARE(embedding_fwd)
WALLFACER_ISA_DECLARE(embedding_bwd)
WALLFACER_ISA_DECLARE(softmax_xent_fwd)
WALLFACER_ISA_DECLARE(softmax_xent_bwd)
WALLFACER_ISA_DECLARE(adamw)
WALLFACER_ISA_DECLARE(sum_squares)
WALLFACER_ISA_DECLARE(scale)
WALLFACER_ISA_DECLARE(widen_bf16)
WALLFACER_ISA_DECLARE(round_bf16)

// kernels/attention.h

void attn_fwd(const AttnFwdParams& p) { WALLFACER_ISA_CALL(attn_fwd, p); }

void attn_fwd_init_output(const AttnDims& dims, float* o, Strides3 o_stride, float* lse,
                          Strides2 lse_stride) {
  WALLFACER_ISA_CALL(attn_fwd_init_output, dims, o, o_stride, lse, lse_stride);
}

void attn_bwd_preprocess(const AttnDims& dims, const float* o, Strides3 o_stride, const float* dout,
                         Strides3 dout_stride, float* delta, Strides2 delta_stride) {
  WALLFACER_ISA_CALL(attn_bwd_preprocess, dims, o, o_stride, dout, dout_stride, delta,
                     delta_stride);
}

void attn_bwd(const AttnBwdParams& p) { WALLFACER_ISA_CALL(attn_bwd, p); }

void lse_merge_rows(int rows, int head_dim, float* o, int64_t o_row_stride, float* lse,
                    int64_t lse_row_stride, const float* o2, int64_t o2_row_stride,
                    const float* lse2, int64_t lse2_row_stride) {
  WALLFACER_ISA_CALL(lse_merge_rows, rows, head_dim, o, o_row_stride, lse, lse_row_stride, o2,
                     o2_row_stride, lse2, lse2_row_stride);
}

void lse_merge(const AttnDims& dims, float* o, Strides3 o_stride, float* lse, Strides2 lse_stride,
               const float* o2, Strides3 o2_stride, const float* lse2, Strides2 lse2_stride) {
  WALLFACER_ISA_CALL(lse_merge, dims, o, o_stride, lse, lse_stride, o2, o2_stride, lse2,
                     lse2_stride);
}

AttnTiling attn_fwd_tiling(const AttnDims& dims) { WALLFACER_ISA_CALL(attn_fwd_tiling, dims); }

AttnTiling attn_bwd_tiling(const AttnDims& dims) { WALLFACER_ISA_CALL(attn_bwd_tiling, dims); }

int64_t attn_fwd_workspace_bytes(const AttnDims& dims, int threads) {
  WALLFACER_ISA_CALL(attn_fwd_workspace_bytes, dims, threads);
}

int64_t attn_bwd_workspace_bytes(const AttnDims& dims, int threads) {
  WALLFACER_ISA_CALL(attn_bwd_workspace_bytes, dims, threads);
}

// kernels/attention_bf16.h

void attn_fwd_bf16(const AttnFwdBf16Params& p) { WALLFACER_ISA_CALL(attn_fwd_bf16, p); }

void attn_bwd_preprocess_bf16(const AttnDims& dims, const bf16* o, Strides3 o_stride,
                              const bf16* dout, Strides3 dout_stride, float* delta,
                              Strides2 delta_stride) {
  WALLFACER_ISA_CALL(attn_bwd_preprocess_bf16, dims, o, o_stride, dout, dout_stride, delta,
                     delta_stride);
}

void attn_bwd_bf16(const AttnBwdBf16Params& p) { WALLFACER_ISA_CALL(attn_bwd_bf16, p); }

AttnTiling attn_fwd_bf16_tiling(const AttnDims& dims) {
  WALLFACER_ISA_CALL(attn_fwd_bf16_tiling, dims);
}

AttnTiling attn_bwd_bf16_tiling(const AttnDims& dims) {
  WALLFACER_ISA_CALL(attn_bwd_bf16_tiling, dims);
}

int64_t attn_fwd_bf16_workspace_bytes(const AttnDims& dims, int threads) {
  WALLFACER_ISA_CALL(attn_fwd_bf16_workspace_bytes, dims, threads);
}

int64_t attn_bwd_bf16_workspace_bytes(const AttnDims& dims, int threads, bool dq_is_bf16) {
  WALLFACER_ISA_CALL(attn_bwd_bf16_workspace_bytes, dims, threads, dq_is_bf16);
}

// kernels/ops.h

void matmul_fwd(float* out, const float* inp, const float* weight, const float* bias, int64_t N,
                int C, int OC) {
  WALLFACER_ISA_CALL(matmul_fwd, out, inp, weight, bias, N, C, OC);
}

void matmul_bwd(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                const float* weight, int64_t N, int C, int OC, bool accumulate_dinp) {
  WALLFACER_ISA_CALL(matmul_bwd, dinp, dweight, dbias, dout, inp, weight, N, C, OC,
                     accumulate_dinp);
}

void layernorm_fwd(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                   const float* bias, int64_t N, int C) {
  WALLFACER_ISA_CALL(layernorm_fwd, out, mean, rstd, inp, weight, bias, N, C);
}

void layernorm_bwd(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                   const float* weight, const float* mean, const float* rstd, int64_t N, int C) {
  WALLFACER_ISA_CALL(layernorm_bwd, dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C);
}

void gelu_fwd(float* out, const float* inp, int64_t n) {
  WALLFACER_ISA_CALL(gelu_fwd, out, inp, n);
}

void gelu_bwd(float* dinp, const float* inp, const float* dout, int64_t n) {
  WALLFACER_ISA_CALL(gelu_bwd, dinp, inp, dout, n);
}

// kernels/dense_bf16.h

void gelu_fwd_bf16(bf16* out, const bf16* inp, int64_t n) {
  WALLFACER_ISA_CALL(gelu_fwd_bf16, out, inp, n);
}

void gelu_bwd_bf16(bf16* dinp, const bf16* inp, const bf16* dout, int64_t n) {
  WALLFACER_ISA_CALL(gelu_bwd_bf16, dinp, inp, dout, n);
}

// kernels/llama_ops.h
void rmsnorm_fwd(float* out, float* rstd, const float* inp, const float* weight, int64_t N, int C,
                 float eps) {
  WALLFACER_ISA_CALL(rmsnorm_fwd, out, rstd, inp, weight, N, C, eps);
}

void rmsnorm_bwd(float* dinp, float* dweight, const float* dout, const float* inp,
                 const float* weight, const float* rstd, int64_t N, int C) {
  WALLFACER_ISA_CALL(rmsnorm_bwd, dinp, dweight, dout, inp, weight, rstd, N, C);
}

void swiglu_fwd(float* out, const float* inp, int64_t N, int I) {
  WALLFACER_ISA_CALL(swiglu_fwd, out, inp, N, I);
}

void swiglu_bwd(float* dinp, const float* inp, const float* dout, int64_t N, int I) {
  WALLFACER_ISA_CALL(swiglu_bwd, dinp, inp, dout, N, I);
}

void swiglu_fwd_bf16(bf16* out, const bf16* inp, int64_t N, int I) {
  WALLFACER_ISA_CALL(swiglu_fwd_bf16, out, inp, N, I);
}

void swiglu_bwd_bf16(bf16* dinp, const bf16* inp, const bf16* dout, int64_t N, int I) {
  WALLFACER_ISA_CALL(swiglu_bwd_bf16, dinp, inp, dout, N, I);
}

void rope_tables(const int64_t* pos, int T, int D, double theta, float* cos, float* sin) {
  WALLFACER_ISA_CALL(rope_tables, pos, T, D, theta, cos, sin);
}

void rope_fwd(float* out, const float* inp, int64_t inp_stride, const float* cos, const float* sin,
              int B, int T, int H, int D) {
  WALLFACER_ISA_CALL(rope_fwd, out, inp, inp_stride, cos, sin, B, T, H, D);
}

void rope_bwd(float* din, int64_t din_stride, const float* dout, const float* cos, const float* sin,
              int B, int T, int H, int D) {
  WALLFACER_ISA_CALL(rope_bwd, din, din_stride, dout, cos, sin, B, T, H, D);
}

void embedding_fwd(float* out, const int32_t* tokens, const float* wte, int64_t N, int C, int V) {
  WALLFACER_ISA_CALL(embedding_fwd, out, tokens, wte, N, C, V);
}

void embedding_bwd(float* dwte, const int32_t* tokens, const float* dout, int64_t N, int C) {
  WALLFACER_ISA_CALL(embedding_bwd, dwte, tokens, dout, N, C);
}

void softmax_xent_fwd(float* losses, const float* logits, const int32_t* targets, int64_t N,
                      int V) {
  WALLFACER_ISA_CALL(softmax_xent_fwd, losses, logits, targets, N, V);
}

void softmax_xent_bwd(float* dlogits, const float* logits, const int32_t* targets, float dloss,
                      int64_t N, int V) {
  WALLFACER_ISA_CALL(softmax_xent_bwd, dlogits, logits, targets, dloss, N, V);
}

void adamw(float* params, const float* grads, float* m, float* v, int64_t n, const AdamWParams& p) {
  WALLFACER_ISA_CALL(adamw, params, grads, m, v, n, p);
}

double sum_squares(const float* x, int64_t n) { WALLFACER_ISA_CALL(sum_squares, x, n); }

void scale(float* x, int64_t n, float s) { WALLFACER_ISA_CALL(scale, x, n, s); }

void widen_bf16(const bf16* in, float* out, int64_t n) {
  WALLFACER_ISA_CALL(widen_bf16, in, out, n);
}

void round_bf16(const float* in, bf16* out, int64_t n) {
  WALLFACER_ISA_CALL(round_bf16, in, out, n);
}

}  // namespace wallfacer::kernels
