#include "wallfacer/model/gpt.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <initializer_list>
#include <optional>
#include <utility>

#include "wallfacer/core/error.h"
#include "wallfacer/core/rng.h"
#include "wallfacer/core/trace.h"
#include "wallfacer/kernels/ops.h"

namespace wallfacer::model {

namespace k = wallfacer::kernels;

void GptConfig::validate() const {
  WF_USAGE_CHECK(layers >= 1, "model.layers must be at least 1 (got {})", layers);
  WF_USAGE_CHECK(dim >= 2 && heads >= 1 && dim % heads == 0,
                 "model.dim ({}) must be a multiple of model.heads ({})", dim, heads);
  WF_USAGE_CHECK(head_dim() % 2 == 0, "head dim model.dim / model.heads = {} must be even (RoPE)",
                 head_dim());
  WF_USAGE_CHECK(kv_heads >= 1 && heads % kv_heads == 0,
                 "model.kv_heads ({}) must divide model.heads ({})", kv_heads, heads);
  WF_USAGE_CHECK(mlp_ratio >= 1, "model.mlp_ratio must be at least 1 (got {})", mlp_ratio);
  WF_USAGE_CHECK(vocab >= 2, "model.vocab must be at least 2 (got {})", vocab);
  WF_USAGE_CHECK(rope_theta > 0, "model.rope_theta must be > 0 (got {})", rope_theta);
}

Checkpointing parse_checkpointing(std::string_view name) {
  if (name == "none") return Checkpointing::None;
  if (name == "attention") return Checkpointing::Attention;
  throw UsageError(fmt::format("parallel.checkpointing must be 'none' or 'attention' (got '{}')",
                               std::string(name)));
}

std::vector<ParamTensor> gpt_param_tensors(const GptConfig& cfg) {
  const int64_t C = cfg.dim, M = int64_t(cfg.mlp_ratio) * C, Q = cfg.qkv_dim();
  std::vector<ParamTensor> t;
  int64_t off = 0;
  auto add = [&](std::string name, int64_t n, bool decay) {
    t.push_back({std::move(name), off, n, decay});
    off += n;
  };
  add("wte", int64_t(cfg.vocab) * C, true);
  for (int l = 0; l < cfg.layers; ++l) {
    const std::string p = fmt::format("h{}.", l);
    add(p + "ln1_w", C, false);
    add(p + "ln1_b", C, false);
    add(p + "qkv_w", Q * C, true);
    add(p + "proj_w", C * C, true);
    add(p + "ln2_w", C, false);
    add(p + "ln2_b", C, false);
    add(p + "fc_w", M * C, true);
    add(p + "fcproj_w", C * M, true);
  }
  add("lnf_w", C, false);
  add("lnf_b", C, false);
  return t;
}

int64_t gpt_num_params(const GptConfig& cfg) {
  const int64_t C = cfg.dim, M = int64_t(cfg.mlp_ratio) * C, Q = cfg.qkv_dim();
  return int64_t(cfg.vocab) * C + cfg.layers * (4 * C + Q * C + C * C + 2 * M * C) + 2 * C;
}

GptParams gpt_param_view(const GptConfig& cfg, float* arena) {
  auto t = gpt_param_tensors(cfg);
  size_t i = 0;
  auto next = [&]() { return arena + t[i++].offset; };
  GptParams p;
  p.wte = next();
  p.layers.resize(size_t(cfg.layers));
  for (auto& L : p.layers) {
    L.ln1_w = next();
    L.ln1_b = next();
    L.qkv_w = next();
    L.proj_w = next();
    L.ln2_w = next();
    L.ln2_b = next();
    L.fc_w = next();
    L.fcproj_w = next();
  }
  p.lnf_w = next();
  p.lnf_b = next();
  return p;
}

void gpt_init_params(const GptConfig& cfg, float* arena, uint64_t seed) {
  Rng rng(seed);
  const double proj_std = 0.02 / std::sqrt(2.0 * cfg.layers);
  for (const auto& t : gpt_param_tensors(cfg)) {
    float* p = arena + t.offset;
    const bool is_w = t.name.ends_with("_w"), is_norm = t.name.find("ln") != std::string::npos;
    if (is_norm) {
      std::fill(p, p + t.size, is_w ? 1.0f : 0.0f);
      continue;
    }
    const bool is_proj = t.name.ends_with("proj_w");
    const double sd = is_proj ? proj_std : 0.02;
    for (int64_t i = 0; i < t.size; ++i) p[i] = float(sd * rng.normal());
  }
}

// Activations. Each block has a view; `kept` tensors have storage per block, the others point into
// one shared set (with checkpointing) or have storage per block (without).
struct BlockActs {
  float* x;         // (N, C) block input (always kept)
  float* ln1;       // (N, C)
  float* ln1_mean;  // (N)
  float* ln1_rstd;  // (N)
  float* qkv;       // (N, Q)
  float* q;         // (B, T, H, D) rotated
  float* k;         // (B, T, Hkv, D) rotated
  float* v;         // (B, T, Hkv, D)
  float* o;         // (B, T, H, D) attention output (always kept)
  float* lse;       // (B, H, T) (always kept)
  float* res2;      // (N, C) x + proj(o)
  float* ln2;       // (N, C)
  float* ln2_mean;  // (N)
  float* ln2_rstd;  // (N)
  float* fch;       // (N, M)
  float* fch_gelu;  // (N, M)
};

struct Gpt::Acts {
  std::vector<float> arena;
  std::vector<BlockActs> blocks;
  float* x_final;   // (N, C) output of the last block
  float* lnf;       // (N, C)
  float* lnf_mean;  // (N)
  float* lnf_rstd;  // (N)
  float* logits;    // (N, V); the backward turns it into dlogits
  float* losses;    // (N)
  float* tmp;       // (N, C) projection outputs before the residual add
  // gradients of one block at a time
  float* dx;     // (N, C) running gradient of the residual stream
  float* dln;    // (N, C)
  float* dfch;   // (N, M)
  float* dqkv;   // (N, Q)
  float* dq;     // (N, H D)
  float* dk;     // (N, Hkv D)
  float* dv;     // (N, Hkv D)
  float* dattn;  // (N, C)
};

namespace {
// Collects (pointer slot, size) requests, then allocates one arena and points every slot into it.
class ArenaPlan {
 public:
  void add(float** slot, int64_t n) { req_.push_back({slot, (n + 15) / 16 * 16}); }
  void add(std::initializer_list<std::pair<float**, int64_t>> list) {
    for (auto [slot, n] : list) add(slot, n);
  }
  int64_t total() const {
    int64_t t = 0;
    for (auto& r : req_) t += r.n;
    return t;
  }
  void allocate(std::vector<float>& arena) {
    arena.assign(size_t(total()), 0.0f);
    int64_t off = 0;
    for (auto& r : req_) {
      *r.slot = arena.data() + off;
      off += r.n;
    }
  }

 private:
  struct Req {
    float** slot;
    int64_t n;
  };
  std::vector<Req> req_;
};
}  // namespace

Gpt::Gpt(const GptConfig& cfg, int batch, std::vector<int64_t> positions, Checkpointing ckpt,
         AttentionOp& attention)
    : cfg_(cfg),
      B_(batch),
      T_(int(positions.size())),
      N_(int64_t(batch) * int64_t(positions.size())),
      positions_(std::move(positions)),
      ckpt_(ckpt),
      attn_(attention) {
  cfg_.validate();
  WF_CHECK(B_ >= 1 && T_ >= 1, "Gpt: batch {} and tokens {} must be positive", B_, T_);
  num_params_ = gpt_num_params(cfg_);
  tensors_ = gpt_param_tensors(cfg_);
  params_.assign(size_t(num_params_), 0.0f);
  grads_.assign(size_t(num_params_), 0.0f);
  p_ = gpt_param_view(cfg_, params_.data());
  g_ = gpt_param_view(cfg_, grads_.data());

  const int D = cfg_.head_dim();
  rope_cos_.resize(size_t(T_) * D / 2);
  rope_sin_.resize(size_t(T_) * D / 2);
  k::rope_tables(positions_.data(), T_, D, cfg_.rope_theta, rope_cos_.data(), rope_sin_.data());

  a_ = std::make_unique<Acts>();
  auto& a = *a_;
  const int64_t N = N_, C = cfg_.dim, M = int64_t(cfg_.mlp_ratio) * C, Q = cfg_.qkv_dim();
  const int64_t HD = int64_t(cfg_.heads) * D, KD = int64_t(cfg_.kv_heads) * D;
  const int L = cfg_.layers;
  ArenaPlan plan;
  a.blocks.resize(size_t(L));
  BlockActs shared{};
  auto add_recomputed = [&](BlockActs& b, bool own) {
    BlockActs& s = own ? b : shared;
    if (own || &b == &a.blocks[0]) {
      plan.add({{&s.ln1, N * C},
                {&s.ln1_mean, N},
                {&s.ln1_rstd, N},
                {&s.qkv, N * Q},
                {&s.q, N * HD},
                {&s.k, N * KD},
                {&s.v, N * KD},
                {&s.res2, N * C},
                {&s.ln2, N * C},
                {&s.ln2_mean, N},
                {&s.ln2_rstd, N},
                {&s.fch, N * M},
                {&s.fch_gelu, N * M}});
    }
  };
  const bool own = ckpt_ == Checkpointing::None;
  for (auto& b : a.blocks) {
    plan.add(&b.x, N * C);
    plan.add(&b.o, N * HD);
    plan.add(&b.lse, int64_t(B_) * cfg_.heads * T_);
    add_recomputed(b, own);
  }
  plan.add({{&a.x_final, N * C},
            {&a.lnf, N * C},
            {&a.lnf_mean, N},
            {&a.lnf_rstd, N},
            {&a.logits, N * cfg_.vocab},
            {&a.losses, N},
            {&a.tmp, N * C},
            {&a.dx, N * C},
            {&a.dln, N * C},
            {&a.dfch, N * M},
            {&a.dqkv, N * Q},
            {&a.dq, N * HD},
            {&a.dk, N * KD},
            {&a.dv, N * KD},
            {&a.dattn, N * HD}});
  act_floats_ = plan.total();
  plan.allocate(a.arena);
  if (!own) {
    for (auto& b : a.blocks) {
      float* x = b.x;
      float* o = b.o;
      float* lse = b.lse;
      b = shared;
      b.x = x;
      b.o = o;
      b.lse = lse;
    }
  }
}

Gpt::~Gpt() = default;

const float* Gpt::logits() const { return a_->logits; }
const float* Gpt::losses() const { return a_->losses; }

void Gpt::zero_grads() { std::fill(grads_.begin(), grads_.end(), 0.0f); }

// Forward of block l from its input b.x: everything up to the next block's input. With
// run_attention false (checkpoint recompute for the backward), o and lse are taken as already
// computed and the block output is not written.
void Gpt::block_forward(int l, bool run_attention) {
  auto& a = *a_;
  const BlockActs& b = a.blocks[size_t(l)];
  const LayerParams& w = p_.layers[size_t(l)];
  const int64_t N = N_;
  const int C = cfg_.dim, M = cfg_.mlp_ratio * C, Q = cfg_.qkv_dim(), D = cfg_.head_dim();
  const int H = cfg_.heads, Hkv = cfg_.kv_heads;
  float* x_out = l + 1 < cfg_.layers ? a.blocks[size_t(l) + 1].x : a.x_final;

  std::optional<trace::Span> dense(std::in_place, "dense", trace::Cat::Compute,
                                   std::initializer_list<trace::Arg>{{"layer", l}});
  k::layernorm_fwd(b.ln1, b.ln1_mean, b.ln1_rstd, b.x, w.ln1_w, w.ln1_b, N, C);  // (N, C)
  k::matmul_fwd(b.qkv, b.ln1, w.qkv_w, nullptr, N, C, Q);                        // (N, Q)
  k::rope_fwd(b.q, b.qkv, Q, rope_cos_.data(), rope_sin_.data(), B_, T_, H, D);  // (B,T,H,D)
  k::rope_fwd(b.k, b.qkv + H * D, Q, rope_cos_.data(), rope_sin_.data(), B_, T_, Hkv, D);
  const int64_t KD = int64_t(Hkv) * D;
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {  // v (B, T, Hkv, D)
    std::memcpy(b.v + n * KD, b.qkv + n * Q + (H + Hkv) * D, size_t(KD) * sizeof(float));
  }
  dense.reset();
  if (run_attention) attn_.forward(b.q, b.k, b.v, b.o, b.lse);  // o (B,T,H,D), lse (B,H,T)
  dense.emplace("dense", trace::Cat::Compute, std::initializer_list<trace::Arg>{{"layer", l}});
  k::matmul_fwd(a.tmp, b.o, w.proj_w, nullptr, N, C, C);  // (N, C)
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < N * C; ++i) b.res2[i] = b.x[i] + a.tmp[i];
  k::layernorm_fwd(b.ln2, b.ln2_mean, b.ln2_rstd, b.res2, w.ln2_w, w.ln2_b, N, C);
  k::matmul_fwd(b.fch, b.ln2, w.fc_w, nullptr, N, C, M);  // (N, M)
  k::gelu_fwd(b.fch_gelu, b.fch, N * M);
  if (!run_attention) return;  // recompute for the backward: the block output is not needed
  k::matmul_fwd(a.tmp, b.fch_gelu, w.fcproj_w, nullptr, N, M, C);  // (N, C)
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < N * C; ++i) x_out[i] = b.res2[i] + a.tmp[i];
}

double Gpt::forward(const int32_t* tokens, const int32_t* targets) {
  auto& a = *a_;
  tokens_ = tokens;
  targets_ = targets;
  const int64_t N = N_;
  const int C = cfg_.dim, V = cfg_.vocab;
  k::embedding_fwd(a.blocks[0].x, tokens, p_.wte, N, C, V);  // (N, C)
  for (int l = 0; l < cfg_.layers; ++l) {
    trace::Span layer("layer forward", trace::Cat::Phase, {{"layer", l}});
    block_forward(l, true);
  }
  trace::Span head("lm head", trace::Cat::Compute);
  k::layernorm_fwd(a.lnf, a.lnf_mean, a.lnf_rstd, a.x_final, p_.lnf_w, p_.lnf_b, N, C);
  k::matmul_fwd(a.logits, a.lnf, p_.wte, nullptr, N, C, V);  // (N, V)
  k::softmax_xent_fwd(a.losses, a.logits, targets, N, V);
  double s = 0.0;
  for (int64_t n = 0; n < N; ++n) s += a.losses[n];
  return s;
}

void Gpt::backward(float dloss) {
  WF_CHECK(tokens_ && targets_, "Gpt::backward called before forward");
  auto& a = *a_;
  const int64_t N = N_;
  const int C = cfg_.dim, M = cfg_.mlp_ratio * C, Q = cfg_.qkv_dim(), D = cfg_.head_dim();
  const int H = cfg_.heads, Hkv = cfg_.kv_heads, V = cfg_.vocab;
  const int64_t KD = int64_t(Hkv) * D;

  // Head: logits -> dlogits in place; tied weight gets the LM-head gradient.
  std::optional<trace::Span> dense(std::in_place, "lm head", trace::Cat::Compute,
                                   std::initializer_list<trace::Arg>{});
  k::softmax_xent_bwd(a.logits, a.logits, targets_, dloss, N, V);                  // (N, V)
  k::matmul_bwd(a.dln, g_.wte, nullptr, a.logits, a.lnf, p_.wte, N, C, V, false);  // (N, C)
  std::fill(a.dx, a.dx + N * C, 0.0f);
  k::layernorm_bwd(a.dx, g_.lnf_w, g_.lnf_b, a.dln, a.x_final, p_.lnf_w, a.lnf_mean, a.lnf_rstd, N,
                   C);

  dense.reset();
  for (int l = cfg_.layers - 1; l >= 0; --l) {
    const BlockActs& b = a.blocks[size_t(l)];
    const LayerParams& w = p_.layers[size_t(l)];
    const LayerParams& gw = g_.layers[size_t(l)];
    trace::Span layer("layer backward", trace::Cat::Phase, {{"layer", l}});
    if (ckpt_ == Checkpointing::Attention) {
      trace::Span recompute("recompute", trace::Cat::Phase, {{"layer", l}});
      block_forward(l, false);
    }
    dense.emplace("dense", trace::Cat::Compute, std::initializer_list<trace::Arg>{{"layer", l}});

    // MLP: x_out = res2 + fcproj(gelu(fc(ln2(res2)))); a.dx holds d x_out.
    k::matmul_bwd(a.dfch, gw.fcproj_w, nullptr, a.dx, b.fch_gelu, w.fcproj_w, N, M, C, false);
    k::gelu_bwd(a.dfch, b.fch, a.dfch, N * M);                                      // (N, M)
    k::matmul_bwd(a.dln, gw.fc_w, nullptr, a.dfch, b.ln2, w.fc_w, N, C, M, false);  // (N, C)
    k::layernorm_bwd(a.dx, gw.ln2_w, gw.ln2_b, a.dln, b.res2, w.ln2_w, b.ln2_mean, b.ln2_rstd, N,
                     C);  // a.dx: d res2

    // Attention: res2 = x + proj(o).
    k::matmul_bwd(a.dattn, gw.proj_w, nullptr, a.dx, b.o, w.proj_w, N, C, C, false);  // (N, C)
    dense.reset();
    attn_.backward(b.q, b.k, b.v, b.o, b.lse, a.dattn, a.dq, a.dk, a.dv);
    dense.emplace("dense", trace::Cat::Compute, std::initializer_list<trace::Arg>{{"layer", l}});
    k::rope_bwd(a.dqkv, Q, a.dq, rope_cos_.data(), rope_sin_.data(), B_, T_, H, D);
    k::rope_bwd(a.dqkv + H * D, Q, a.dk, rope_cos_.data(), rope_sin_.data(), B_, T_, Hkv, D);
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < N; ++n) {
      std::memcpy(a.dqkv + n * Q + (H + Hkv) * D, a.dv + n * KD, size_t(KD) * sizeof(float));
    }
    k::matmul_bwd(a.dln, gw.qkv_w, nullptr, a.dqkv, b.ln1, w.qkv_w, N, C, Q, false);  // (N, C)
    k::layernorm_bwd(a.dx, gw.ln1_w, gw.ln1_b, a.dln, b.x, w.ln1_w, b.ln1_mean, b.ln1_rstd, N,
                     C);  // a.dx: d x
    dense.reset();
  }
  k::embedding_bwd(g_.wte, tokens_, a.dx, N, C);
  tokens_ = targets_ = nullptr;  // logits now hold gradients: a new forward is needed
}

}  // namespace wallfacer::model
