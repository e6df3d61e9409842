#include "wallfacer/model/local_attention.h"

#include <cmath>

#include "wallfacer/kernels/attention.h"
#include "wallfacer/kernels/attention_bf16.h"

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

// Fills the fields the forward and backward parameters share (contiguous tensors).
template <typename Params, typename T>
void set_common(Params& p, int batch, int seq, int heads, int kv_heads, int head_dim, bool causal,
                const T* q, const T* k, const T* v) {
  p.dims = {batch, seq, seq, heads, kv_heads, head_dim};
  p.q = q;
  p.q_stride = k::Strides3::contiguous(seq, heads, head_dim);
  p.k = k;
  p.k_stride = k::Strides3::contiguous(seq, kv_heads, head_dim);
  p.v = v;
  p.v_stride = p.k_stride;
  p.lse_stride = k::Strides2::contiguous(heads, seq);
  p.scale = 1.0f / std::sqrt(float(head_dim));
  p.causal = causal;
}

void LocalAttention::forward(const float* q, const float* k, const float* v, float* o, float* lse) {
  k::AttnFwdParams p;
  set_common(p, batch_, seq_, heads_, kv_heads_, head_dim_, causal_, q, k, v);
  p.lse = lse;
  p.o = o;
  p.o_stride = p.q_stride;
  k::attn_fwd(p);
}

void LocalAttention::backward(const float* q, const float* k, const float* v, const float* o,
                              const float* lse, const float* dout, float* dq, float* dk,
                              float* dv) {
  k::AttnBwdParams p;
  set_common(p, batch_, seq_, heads_, kv_heads_, head_dim_, causal_, q, k, v);
  p.lse = lse;
  k::attn_bwd_preprocess(p.dims, o, p.q_stride, dout, p.q_stride, delta_.data(), p.lse_stride);
  p.dout = dout;
  p.dout_stride = p.q_stride;
  p.delta = delta_.data();
  p.delta_stride = p.lse_stride;
  p.dq = dq;
  p.dq_stride = p.q_stride;
  p.dk = dk;
  p.dk_stride = p.k_stride;
  p.dv = dv;
  p.dv_stride = p.k_stride;
  k::attn_bwd(p);
}

void LocalAttention::forward(const bf16* q, const bf16* k, const bf16* v, bf16* o, float* lse) {
  k::AttnFwdBf16Params p;
  set_common(p, batch_, seq_, heads_, kv_heads_, head_dim_, causal_, q, k, v);
  p.lse = lse;
  p.o.bf16_data = o;
  p.o.stride = p.q_stride;
  k::attn_fwd_bf16(p);
}

void LocalAttention::backward(const bf16* q, const bf16* k, const bf16* v, const bf16* o,
                              const float* lse, const bf16* dout, bf16* dq, bf16* dk, bf16* dv) {
  k::AttnBwdBf16Params p;
  set_common(p, batch_, seq_, heads_, kv_heads_, head_dim_, causal_, q, k, v);
  p.lse = lse;
  k::attn_bwd_preprocess_bf16(p.dims, o, p.q_stride, dout, p.q_stride, delta_.data(), p.lse_stride);
  p.dout = dout;
  p.dout_stride = p.q_stride;
  p.delta = delta_.data();
  p.delta_stride = p.lse_stride;
  p.dq.bf16_data = dq;
  p.dq.stride = p.q_stride;
  p.dk.bf16_data = dk;
  p.dk.stride = p.k_stride;
  p.dv.bf16_data = dv;
  p.dv.stride = p.k_stride;
  k::attn_bwd_bf16(p);
}

}  // namespace wallfacer::model
