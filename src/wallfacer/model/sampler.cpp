#include "wallfacer/model/sampler.h"

#include <omp.h>

#include <algorithm>
#include <cmath>

#include "wallfacer/core/error.h"
#include "wallfacer/kernels/attention.h"
#include "wallfacer/kernels/attention_params.h"
#include "wallfacer/kernels/llama_ops.h"
#include "wallfacer/kernels/ops.h"

namespace wallfacer::model {

namespace k = wallfacer::kernels;

namespace {

// The cache of one process: every position's keys and values, per layer (max_tokens, Hkv, D).
class LocalCache : public DecoderCache {
 public:
  LocalCache(const GptConfig& cfg, int max_tokens) : cfg_(cfg), max_tokens_(max_tokens) {
    const size_t kv = size_t(max_tokens) * size_t(cfg.kv_heads) * size_t(cfg.head_dim());
    k_.resize(kv * size_t(cfg.layers));
    v_.resize(kv * size_t(cfg.layers));
    lse_.resize(size_t(cfg.heads));
  }
  void attend(int layer, int64_t pos, const float* q, const float* k, const float* v,
              float* o) override {
    WF_CHECK(pos < max_tokens_, "decoder cache full ({} tokens)", max_tokens_);
    const int D = cfg_.head_dim(), Hkv = cfg_.kv_heads;
    const size_t layer_kv = size_t(max_tokens_) * size_t(Hkv) * size_t(D);
    float* kc = k_.data() + size_t(layer) * layer_kv;
    float* vc = v_.data() + size_t(layer) * layer_kv;
    std::copy_n(k, Hkv * D, kc + size_t(pos) * size_t(Hkv * D));
    std::copy_n(v, Hkv * D, vc + size_t(pos) * size_t(Hkv * D));
    k::AttnInputs<float> a = cached_token_attention(cfg_, q, kc, vc, max_tokens_, pos + 1);
    a.causal = true;
    a.window = cfg_.layer_window(layer);
    a.q_pos0 = pos;
    k::attn_fwd(k::fwd_params(a, o, lse_.data()));
  }

 private:
  GptConfig cfg_;
  int max_tokens_;
  std::vector<float> k_, v_, lse_;
};

}  // namespace

kernels::AttnInputs<float> cached_token_attention(const GptConfig& cfg, const float* q,
                                                  const float* kc, const float* vc,
                                                  int64_t capacity, int64_t keys) {
  const int H = cfg.heads, Hkv = cfg.kv_heads, D = cfg.head_dim();
  kernels::AttnInputs<float> a;
  a.dims = {1, 1, int(keys), H, Hkv, D};
  a.q = q;
  a.q_stride = kernels::Strides3::contiguous(1, H, D);
  a.k = kc;
  a.v = vc;
  a.kv_stride = kernels::Strides3::contiguous(capacity, Hkv, D);
  a.stat_stride = kernels::Strides2::contiguous(H, 1);
  a.scale = 1.0f / std::sqrt(float(D));
  return a;
}

GptDecoder::GptDecoder(const GptConfig& cfg, const float* params, int max_tokens)
    : cfg_(cfg),
      p_(gpt_param_view(cfg, const_cast<float*>(params))),
      own_cache_(std::make_unique<LocalCache>(cfg, max_tokens)),
      cache_(own_cache_.get()) {
  allocate();
}

GptDecoder::GptDecoder(const GptConfig& cfg, const float* params, DecoderCache& cache,
                       int64_t first_pos)
    : cfg_(cfg),
      p_(gpt_param_view(cfg, const_cast<float*>(params))),
      pos_(first_pos),
      cache_(&cache) {
  allocate();
}

GptDecoder::~GptDecoder() = default;

void GptDecoder::allocate() {
  cfg_.validate();
  const int C = cfg_.dim, D = cfg_.head_dim(), F = cfg_.fc_dim();
  inv_freq_ = cfg_.rope_inv_freq();
  x_.resize(size_t(C));
  ln_.resize(size_t(C));
  mean_.resize(1);
  rstd_.resize(1);
  qkv_.resize(size_t(cfg_.qkv_dim()));
  q_.resize(size_t(cfg_.heads) * size_t(D));
  k_.resize(size_t(cfg_.kv_heads) * size_t(D));
  o_.resize(size_t(cfg_.heads) * size_t(D));
  tmp_.resize(size_t(C));
  h_.resize(size_t(F));
  logits_.resize(size_t(cfg_.vocab));
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

namespace {
// The OpenMP threads of one decode step. A step's norms, rotary embedding and activations are one
// row each: a team of threads costs more than it saves there (each region's start and barrier;
// on a busy machine a thread waits for its team's descheduled threads), so they run on one
// thread; the attention over a cache of at least kTeamKeys positions (work in every head) takes
// the caller's threads.
constexpr int64_t kTeamKeys = 4096;
class OneThread {
 public:
  OneThread() : saved_(omp_get_max_threads()) { omp_set_num_threads(1); }
  ~OneThread() { omp_set_num_threads(saved_); }
  OneThread(const OneThread&) = delete;
  OneThread& operator=(const OneThread&) = delete;
  int saved() const { return saved_; }

 private:
  int saved_;
};
}  // namespace

// x (1, C) flows through the blocks like Gpt::forward; the cache keeps the keys and values and
// runs the attention over earlier positions.
const float* GptDecoder::step(int32_t token) {
  const OneThread one;
  const int C = cfg_.dim, D = cfg_.head_dim(), H = cfg_.heads, Hkv = cfg_.kv_heads;
  const int Q = cfg_.qkv_dim(), M = cfg_.mlp_hidden(), F = cfg_.fc_dim();
  const int64_t pos = pos_;
  k::rope_tables_freq(&pos, 1, D, inv_freq_.data(), cos_.data(), sin_.data());
  k::embedding_fwd(x_.data(), &token, p_.wte, 1, C, cfg_.vocab);
  for (int l = 0; l < cfg_.layers; ++l) {
    const LayerParams& w = p_.layers[size_t(l)];
    norm(w.ln1_w, w.ln1_b);
    k::matmul_fwd(qkv_.data(), ln_.data(), w.qkv_w, w.qkv_b, 1, C, Q);
    k::rope_fwd(q_.data(), qkv_.data(), Q, cos_.data(), sin_.data(), 1, 1, H, D);
    k::rope_fwd(k_.data(), qkv_.data() + H * D, Q, cos_.data(), sin_.data(), 1, 1, Hkv, D);
    if (pos >= kTeamKeys) omp_set_num_threads(one.saved());
    cache_->attend(l, pos, q_.data(), k_.data(), qkv_.data() + (H + Hkv) * D, o_.data());
    omp_set_num_threads(1);
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

int32_t sample_token(const float* logits, int V, const Sampling& s, double uniform01) {
  if (s.temperature <= 0 || s.top_k == 1) return sample_token(logits, V, 0.0, uniform01);
  // Ids by decreasing logit (ties: lower id first), cut to top_k, then to top_p of the mass.
  std::vector<int32_t> ids(static_cast<size_t>(V));
  for (int i = 0; i < V; ++i) ids[size_t(i)] = i;
  const size_t keep = s.top_k > 0 ? std::min(size_t(s.top_k), ids.size()) : ids.size();
  auto by_logit = [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  };
  std::partial_sort(ids.begin(), ids.begin() + std::ptrdiff_t(keep), ids.end(), by_logit);
  ids.resize(keep);
  const float mx = logits[ids[0]];
  std::vector<double> p(ids.size());
  double sum = 0;
  for (size_t i = 0; i < ids.size(); ++i)
    sum += p[i] = std::exp((logits[ids[i]] - mx) / s.temperature);
  if (s.top_p < 1) {
    double mass = 0;
    size_t n = 0;
    while (n < p.size() && mass < s.top_p * sum) mass += p[n++];
    p.resize(std::max<size_t>(n, 1));
    sum = 0;
    for (double x : p) sum += x;
  }
  double r = uniform01 * sum;
  for (size_t i = 0; i < p.size(); ++i) {
    r -= p[i];
    if (r < 0) return ids[i];
  }
  return ids[p.size() - 1];
}

}  // namespace wallfacer::model
