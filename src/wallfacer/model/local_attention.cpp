#include "wallfacer/model/local_attention.h"

#include <cmath>

#include "wallfacer/kernels/attention.h"
#include "wallfacer/kernels/attention_bf16.h"
#include "wallfacer/kernels/attention_params.h"

namespace wallfacer::model {

namespace k = wallfacer::kernels;

LocalAttention::LocalAttention(int batch, int seq, int heads, int kv_heads, int head_dim,
                               bool causal)
    : batch_(batch),
      seq_(seq),
      heads_(heads),
      kv_heads_(kv_heads),
      head_dim_(head_dim),
      causal_(causal),
      delta_(size_t(batch) * heads * seq) {}

// The inputs of one call on this object's contiguous tensors (T: float or bf16).
template <typename T>
k::AttnInputs<T> inputs(int batch, int seq, int heads, int kv_heads, int head_dim, bool causal,
                        const T* q, const T* k, const T* v) {
  k::AttnInputs<T> t;
  t.dims = {batch, seq, seq, heads, kv_heads, head_dim};
  t.q = q;
  t.q_stride = k::Strides3::contiguous(seq, heads, head_dim);
  t.k = k;
  t.v = v;
  t.kv_stride = k::Strides3::contiguous(seq, kv_heads, head_dim);
  t.stat_stride = k::Strides2::contiguous(heads, seq);
  t.scale = 1.0f / std::sqrt(float(head_dim));
  t.causal = causal;
  return t;
}

void LocalAttention::forward(const float* q, const float* k, const float* v, float* o, float* lse) {
  const auto t = inputs(batch_, seq_, heads_, kv_heads_, head_dim_, causal_, q, k, v);
  k::attn_fwd(k::fwd_params(t, o, lse));
}

void LocalAttention::backward(const float* q, const float* k, const float* v, const float* o,
                              const float* lse, const float* dout, float* dq, float* dk,
                              float* dv) {
  const auto t = inputs(batch_, seq_, heads_, kv_heads_, head_dim_, causal_, q, k, v);
  k::attn_bwd_preprocess(t.dims, o, t.q_stride, dout, t.q_stride, delta_.data(), t.stat_stride);
  k::attn_bwd(k::bwd_params(t, {dout, lse, delta_.data(), dq, dk, dv}));
}

void LocalAttention::forward(const bf16* q, const bf16* k, const bf16* v, bf16* o, float* lse) {
  const auto t = inputs(batch_, seq_, heads_, kv_heads_, head_dim_, causal_, q, k, v);
  k::attn_fwd_bf16(k::fwd_params(t, o, lse));
}

void LocalAttention::backward(const bf16* q, const bf16* k, const bf16* v, const bf16* o,
                              const float* lse, const bf16* dout, bf16* dq, bf16* dk, bf16* dv) {
  const auto t = inputs(batch_, seq_, heads_, kv_heads_, head_dim_, causal_, q, k, v);
  k::attn_bwd_preprocess_bf16(t.dims, o, t.q_stride, dout, t.q_stride, delta_.data(),
                              t.stat_stride);
  k::attn_bwd_bf16(
      k::bwd_params(t, k::AttnGrads<bf16, bf16>{dout, lse, delta_.data(), dq, dk, dv}));
}

}  // namespace wallfacer::model
