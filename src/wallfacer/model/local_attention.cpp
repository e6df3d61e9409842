#include "wallfacer/model/local_attention.h"

#include <cmath>

#include "wallfacer/kernels/attention.h"

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
template <typename Params>
void set_common(Params& p, int batch, int seq, int heads, int kv_heads, int head_dim, bool causal,
                const float* q, const float* k, const float* v) {
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

}  // namespace wallfacer::model
