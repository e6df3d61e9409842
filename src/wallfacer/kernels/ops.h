#pragma once
// The non-attention kernels of a Transformer (fp32, CPU): matmul, layernorm, GELU, rotary
// embedding, token embedding, softmax cross-entropy and AdamW. Each forward has a backward twin.
//
// Conventions (llm.c style): N is the number of token rows (batch * tokens), C the channels.
// Backward kernels ADD into parameter gradients (zeroed once per step by the caller); what they
// do with input gradients is stated per kernel. kernels/reference/ops_ref.h holds fp64 twins.

#include <cstdint>

#include "wallfacer/core/bf16.h"

namespace wallfacer::kernels {

// out (N, OC) = inp (N, C) @ weight (OC, C)^T  [+ bias (OC)]   (bias may be null)
void matmul_fwd(float* out, const float* inp, const float* weight, const float* bias, int64_t N,
                int C, int OC);

// dinp (N, C) = dout (N, OC) @ weight (OC, C)   (added to dinp when accumulate_dinp; skipped
// when dinp is null); dweight (OC, C) += dout^T @ inp; dbias (OC) += column sums of dout (if set).
void matmul_bwd(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                const float* weight, int64_t N, int C, int OC, bool accumulate_dinp);

// out (N, C) = (inp - mean) * rstd * weight + bias; mean, rstd (N) saved for the backward.
inline constexpr float kLayerNormEps = 1e-5f;
void layernorm_fwd(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                   const float* bias, int64_t N, int C);

// dinp (N, C) += d/dinp; dweight, dbias (C) += their gradients.
void layernorm_bwd(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                   const float* weight, const float* mean, const float* rstd, int64_t N, int C);

// out = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), n elements (out may alias inp).
void gelu_fwd(float* out, const float* inp, int64_t n);
// dinp = dout * gelu'(inp)  (overwrites; dinp may alias dout).
void gelu_bwd(float* dinp, const float* inp, const float* dout, int64_t n);

// Rotary embedding tables for T rows at global positions pos (T): cos, sin (T, D/2) with angle
// pos * theta^(-2i/D) for pair i. Computed in fp64, so every rank gets the same values.
void rope_tables(const int64_t* pos, int T, int D, double theta, float* cos, float* sin);

// Rotates the pairs (x[2i], x[2i+1]) of each head by the row's angles:
//   out (B, T, H, D) contiguous; inp element (b, t, h, d) at inp[(b*T + t) * inp_stride + h*D + d].
void rope_fwd(float* out, const float* inp, int64_t inp_stride, const float* cos, const float* sin,
              int B, int T, int H, int D);
// The transpose rotation: din (strided like inp above) = R^T dout (B, T, H, D) (overwrites).
void rope_bwd(float* din, int64_t din_stride, const float* dout, const float* cos, const float* sin,
              int B, int T, int H, int D);

// out (N, C) = wte[tokens[n]] (wte (V, C)); every token must be in [0, V).
void embedding_fwd(float* out, const int32_t* tokens, const float* wte, int64_t N, int C, int V);
// dwte[tokens[n]] += dout[n]
void embedding_bwd(float* dwte, const int32_t* tokens, const float* dout, int64_t N, int C);

// losses (N) = logsumexp(logits[n]) - logits[n, targets[n]]   (logits (N, V)).
void softmax_xent_fwd(float* losses, const float* logits, const int32_t* targets, int64_t N, int V);
// dlogits (N, V) = dloss * (softmax(logits[n]) - onehot(targets[n])); dlogits may alias logits.
void softmax_xent_bwd(float* dlogits, const float* logits, const int32_t* targets, float dloss,
                      int64_t N, int V);

struct AdamWParams {
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.95f;
  float eps = 1e-8f;
  float weight_decay = 0.0f;
  int64_t step = 1;  // 1-based, for the bias corrections
};
// Decoupled weight decay (Loshchilov & Hutter), PyTorch's AdamW order:
//   p *= 1 - lr wd;  m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2;
//   p -= lr (m / (1-b1^t)) / (sqrt(v / (1-b2^t)) + eps)
void adamw(float* params, const float* grads, float* m, float* v, int64_t n, const AdamWParams& p);

// sum of squares in fp64 (for global-norm clipping).
double sum_squares(const float* x, int64_t n);
// x *= s
void scale(float* x, int64_t n, float s);

// bf16 -> fp32 (exact) and fp32 -> bf16 (round to nearest even) over n elements on the calling
// thread: the results of core/bf16.h's bf16_to_fp32 / fp32_to_bf16, with the kernels' vectors
// (kernels/isa.h). For the hot paths that convert inside their own threads (the bf16 dense
// products' portable path).
void widen_bf16(const bf16* in, float* out, int64_t n);
void round_bf16(const float* in, bf16* out, int64_t n);

}  // namespace wallfacer::kernels
