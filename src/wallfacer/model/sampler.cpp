#include "wallfacer/model/sampler.h"

#include <algorithm>
#include <cmath>

#include "wallfacer/core/error.h"
#include "wallfacer/kernels/attention.h"
#include "wallfacer/kernels/attention_params.h"
#include "wallfacer/kernels/llama_ops.h"
#include "wallfacer/kernels/ops.h"

namespace wallfacer::model {

namespace k = wallfacer::kernels;

GptDecoder::GptDecoder(const GptConfig& cfg, const float* params, int max_tokens)
    : cfg_(cfg), p_(gpt_param_view(cfg, const_cast<float*>(params))), max_tokens_(max_tokens) {
  cfg_.validate();
  const int C = cfg.dim, D = cfg.head_dim(), F = cfg.fc_dim();
  inv_freq_ = cfg.rope_inv_freq();
  const size_t kv = size_t(max_tokens) * size_t(cfg.kv_heads) * size_t(D);
  k_cache_.resize(kv * size_t(cfg.layers));
  v_cache_.resize(kv * size_t(cfg.layers));
  x_.resize(size_t(C));
  ln_.resize(size_t(C));
  mean_.resize(1);
  rstd_.resize(1);
  qkv_.resize(size_t(cfg.qkv_dim()));
  q_.resize(size_t(cfg.heads) * size_t(D));
  o_.resize(size_t(cfg.heads) * size_t(D));
  lse_.resize(size_t(cfg.heads));
  tmp_.resize(size_t(C));
  h_.resize(size_t(F));
  logits_.resize(size_t(cfg.vocab));
  cos_.resize(size_t(D / 2));
  sin_.resize(size_t(D / 2));
}

void GptDecoder::norm(const float* w, const float* b) {
  if (cfg_.rmsnorm()) {
    k::rmsnorm_fwd(ln_.data(), rstd_.data(), x_.data(), w, 1, cfg_.dim, float(cfg_.norm_eps));
  } else {
    k::layernorm_fwd(ln_.data(), mean_.data(), rstd_.data(), x_.data(), w, b, 1, cfg_.dim);
  }
}

// x (1, C) flows through the blocks like Gpt::forward, with keys and values of earlier positions
// read from the cache.
const float* GptDecoder::step(int32_t token) {
  WF_CHECK(pos_ < max_tokens_, "decoder cache full ({} tokens)", max_tokens_);
  const int C = cfg_.dim, D = cfg_.head_dim(), H = cfg_.heads, Hkv = cfg_.kv_heads;
  const int Q = cfg_.qkv_dim(), M = cfg_.mlp_hidden(), F = cfg_.fc_dim();
  const int64_t pos = pos_;
  k::rope_tables_freq(&pos, 1, D, inv_freq_.data(), cos_.data(), sin_.data());
  k::embedding_fwd(x_.data(), &token, p_.wte, 1, C, cfg_.vocab);
  const size_t layer_kv = size_t(max_tokens_) * size_t(Hkv) * size_t(D);
  for (int l = 0; l < cfg_.layers; ++l) {
    const LayerParams& w = p_.layers[size_t(l)];
    float* kc = k_cache_.data() + size_t(l) * layer_kv;
    float* vc = v_cache_.data() + size_t(l) * layer_kv;
    norm(w.ln1_w, w.ln1_b);
    k::matmul_fwd(qkv_.data(), ln_.data(), w.qkv_w, w.qkv_b, 1, C, Q);
    k::rope_fwd(q_.data(), qkv_.data(), Q, cos_.data(), sin_.data(), 1, 1, H, D);
    k::rope_fwd(kc + size_t(pos) * Hkv * D, qkv_.data() + H * D, Q, cos_.data(), sin_.data(), 1, 1,
                Hkv, D);
    std::copy_n(qkv_.data() + (H + Hkv) * D, Hkv * D, vc + size_t(pos) * Hkv * D);
    k::AttnInputs<float> a;
    a.dims = {1, 1, int(pos) + 1, H, Hkv, D};
    a.q = q_.data();
    a.q_stride = k::Strides3::contiguous(1, H, D);
    a.k = kc;
    a.v = vc;
    a.kv_stride = k::Strides3::contiguous(max_tokens_, Hkv, D);
    a.stat_stride = k::Strides2::contiguous(H, 1);
    a.scale = 1.0f / std::sqrt(float(D));
    a.causal = true;
    a.window = cfg_.layer_window(l);
    a.q_pos0 = pos;
    k::attn_fwd(k::fwd_params(a, o_.data(), lse_.data()));
    k::matmul_fwd(tmp_.data(), o_.data(), w.proj_w, nullptr, 1, C, C);
    for (int c = 0; c < C; ++c) x_[size_t(c)] += tmp_[size_t(c)];
    norm(w.ln2_w, w.ln2_b);
    k::matmul_fwd(h_.data(), ln_.data(), w.fc_w, nullptr, 1, C, F);
    if (cfg_.swiglu()) {
      k::swiglu_fwd(h_.data(), h_.data(), 1, M);  // row by row: out[i] after reading in[i], in[M+i]
    } else {
      k::gelu_fwd(h_.data(), h_.data(), M);
    }
    k::matmul_fwd(tmp_.data(), h_.data(), w.fcproj_w, nullptr, 1, M, C);
    for (int c = 0; c < C; ++c) x_[size_t(c)] += tmp_[size_t(c)];
  }
  norm(p_.lnf_w, p_.lnf_b);
  k::matmul_fwd(logits_.data(), ln_.data(), p_.lm_head, nullptr, 1, C, cfg_.vocab);
  ++pos_;
  return logits_.data();
}

int32_t sample_token(const float* logits, int V, double temperature, double uniform01) {
  if (temperature <= 0) return int32_t(std::max_element(logits, logits + V) - logits);
  const float mx = *std::max_element(logits, logits + V);
  std::vector<double> p(static_cast<size_t>(V));
  double sum = 0;
  for (int i = 0; i < V; ++i) sum += p[size_t(i)] = std::exp((logits[i] - mx) / temperature);
  double r = uniform01 * sum;
  for (int i = 0; i < V; ++i) {
    r -= p[size_t(i)];
    if (r < 0) return i;
  }
  return V - 1;
}

}  // namespace wallfacer::model
