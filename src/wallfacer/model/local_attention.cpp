#include "wallfacer/model/local_attention.h"

#include <cmath>

#include "wallfacer/core/error.h"
#include "wallfacer/kernels/attention_params.h"
#include "wallfacer/kernels/doc_mask.h"

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
                        int64_t window, const T* q, const T* k, const T* v) {
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
  t.window = window;
  return t;
}

void LocalAttention::set_documents(const std::vector<std::vector<int64_t>>& lengths) {
  WF_USAGE_CHECK(int(lengths.size()) == batch_,
                 "LocalAttention::set_documents: {} lists of lengths for a batch of {}",
                 lengths.size(), batch_);
  docs_.clear();
  bool any = false;
  for (const auto& l : lengths) any = any || l.size() > 1;
  if (!any) return;
  for (const auto& l : lengths) {
    docs_.push_back(l.size() > 1 ? k::doc_of_pos(k::doc_bounds_from_lengths(l, seq_))
                                 : std::vector<int32_t>{});
  }
}

void LocalAttention::set_window(int64_t window) {
  WF_USAGE_CHECK(window >= 0 && (window == 0 || causal_),
                 "LocalAttention::set_window: window {} must be >= 0, and 0 without causal",
                 window);
  window_ = window;
}

// Runs call(t, b, rows) once for the whole batch without documents, else once per sequence b
// (batch 1, its documents, the tensors offset to sequence b: rows q rows, krows k rows).
template <typename T, typename F>
void LocalAttention::each_sequence(const T* q, const T* k, const T* v, F call) {
  auto t = inputs(batch_, seq_, heads_, kv_heads_, head_dim_, causal_, window_, q, k, v);
  if (docs_.empty()) {
    call(t, int64_t(0), int64_t(0), int64_t(0));
    return;
  }
  t.dims.batch = 1;
  const int64_t qn = int64_t(seq_) * heads_ * head_dim_, kn = int64_t(seq_) * kv_heads_ * head_dim_,
                sn = int64_t(seq_) * heads_;
  for (int b = 0; b < batch_; ++b) {
    t.q = q + b * qn;
    t.k = k + b * kn;
    t.v = v + b * kn;
    t.doc_of_pos = docs_[size_t(b)].empty() ? nullptr : docs_[size_t(b)].data();
    call(t, b * qn, b * kn, b * sn);
  }
}

void LocalAttention::forward(const Act& q, const Act& k, const Act& v, const Act& o, float* lse) {
  with_element_type(
      [&](auto x) {
        using T = decltype(x);
        T* out = data_of<T>(o);
        each_sequence(data_of<T>(q), data_of<T>(k), data_of<T>(v),
                      [&](const auto& t, int64_t qo, int64_t, int64_t so) {
                        k::run_attn_fwd(k::fwd_params(t, out + qo, lse + so));
                      });
      },
      q, k, v, o);
}

void LocalAttention::backward(const Act& q, const Act& k, const Act& v, const Act& o,
                              const float* lse, const Act& dout, const Act& dq, const Act& dk,
                              const Act& dv) {
  with_element_type(
      [&](auto x) {
        using T = decltype(x);
        const T *po = data_of<T>(o), *pdout = data_of<T>(dout);
        T *pdq = data_of<T>(dq), *pdk = data_of<T>(dk), *pdv = data_of<T>(dv);
        each_sequence(
            data_of<T>(q), data_of<T>(k), data_of<T>(v),
            [&](const auto& t, int64_t qo, int64_t ko, int64_t so) {
              float* delta = delta_.data() + so;
              k::run_attn_bwd_preprocess(t.dims, po + qo, t.q_stride, pdout + qo, t.q_stride, delta,
                                         t.stat_stride);
              k::run_attn_bwd(k::bwd_params(t, k::AttnGrads<T, T>{pdout + qo, lse + so, delta,
                                                                  pdq + qo, pdk + ko, pdv + ko}));
            });
      },
      q, k, v, o, dout, dq, dk, dv);
}

}  // namespace wallfacer::model
