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
#include "wallfacer/kernels/dense_bf16.h"
#include "wallfacer/kernels/ops.h"

namespace wallfacer::model {

namespace k = wallfacer::kernels;

Arch parse_arch(std::string_view name) {
  if (name == "gpt") return Arch::Gpt;
  if (name == "llama") return Arch::Llama;
  throw UsageError(fmt::format("model.arch must be 'gpt', 'llama' or 'dit' (got '{}')", name));
}

std::string_view arch_name(Arch a) { return a == Arch::Llama ? "llama" : "gpt"; }

std::vector<double> GptConfig::rope_inv_freq() const {
  return k::rope_inv_freq(head_dim(), rope_theta, rope_scaling);
}

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
  WF_USAGE_CHECK(intermediate >= 0,
                 "model.intermediate must be >= 0 (0: model.mlp_ratio x dim), got {}",
                 intermediate);
  WF_USAGE_CHECK(std::isfinite(norm_eps) && norm_eps > 0,
                 "model.norm_eps must be a finite number > 0 (got {})", norm_eps);
  WF_USAGE_CHECK(rmsnorm() || float(norm_eps) == k::kLayerNormEps,
                 "model.norm_eps = {} applies to model.arch = 'llama' (RMSNorm); the GPT's "
                 "layernorm uses 1e-5: drop model.norm_eps or set model.arch = 'llama'",
                 norm_eps);
  const kernels::RopeScaling& rs = rope_scaling;
  if (rs.type != kernels::RopeScalingType::None) {
    WF_USAGE_CHECK(std::isfinite(rs.factor) && rs.factor > 0,
                   "model.rope_scaling.factor must be a finite number > 0 (got {})", rs.factor);
  }
  if (rs.type == kernels::RopeScalingType::Llama3) {
    WF_USAGE_CHECK(std::isfinite(rs.low_freq_factor) && std::isfinite(rs.high_freq_factor) &&
                       rs.low_freq_factor > 0 && rs.low_freq_factor < rs.high_freq_factor,
                   "model.rope_scaling.low_freq_factor ({}) must be > 0 and below "
                   "model.rope_scaling.high_freq_factor ({})",
                   rs.low_freq_factor, rs.high_freq_factor);
    WF_USAGE_CHECK(rs.original_max_position_embeddings >= 1,
                   "model.rope_scaling.original_max_position_embeddings must be >= 1 (got {})",
                   rs.original_max_position_embeddings);
  }
  WF_USAGE_CHECK(window >= 0, "model.window is {}; it must be >= 0 (0: no window)", window);
  WF_USAGE_CHECK(window > 0 || window_layers.empty(),
                 "model.window_layers needs model.window > 0 (the window of those layers): set "
                 "model.window or drop model.window_layers");
  for (const int64_t l : window_layers) {
    WF_USAGE_CHECK(l >= 0 && l < layers,
                   "model.window_layers names layer {}, but the model has layers 0..{} "
                   "(model.layers = {})",
                   l, layers - 1, layers);
  }
}

int64_t GptConfig::layer_window(int l) const {
  if (window == 0 || window_layers.empty()) return window;
  return std::find(window_layers.begin(), window_layers.end(), int64_t(l)) != window_layers.end()
             ? window
             : 0;
}

Checkpointing parse_checkpointing(std::string_view name) {
  if (name == "none") return Checkpointing::None;
  if (name == "attention") return Checkpointing::Attention;
  throw UsageError(fmt::format("parallel.checkpointing must be 'none' or 'attention' (got '{}')",
                               std::string(name)));
}

std::string_view checkpointing_name(Checkpointing c) {
  return c == Checkpointing::Attention ? "attention" : "none";
}

std::vector<ParamTensor> gpt_param_tensors(const GptConfig& cfg) {
  const int64_t C = cfg.dim, M = cfg.mlp_hidden(), F = cfg.fc_dim(), Q = cfg.qkv_dim();
  const bool ln = !cfg.rmsnorm(), llama = cfg.arch == Arch::Llama;
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
    if (ln) add(p + "ln1_b", C, false);
    add(p + "qkv_w", Q * C, true);
    if (cfg.qkv_bias) add(p + "qkv_b", Q, false);
    add(p + "proj_w", C * C, true);
    add(p + "ln2_w", C, false);
    if (ln) add(p + "ln2_b", C, false);
    add(p + (llama ? "gate_up_w" : "fc_w"), F * C, true);
    add(p + (llama ? "down_w" : "fcproj_w"), C * M, true);
  }
  add("lnf_w", C, false);
  if (ln) add("lnf_b", C, false);
  if (!cfg.tie_embeddings) add("lm_head_w", int64_t(cfg.vocab) * C, true);
  return t;
}

int64_t gpt_num_params(const GptConfig& cfg) {
  const int64_t C = cfg.dim, M = cfg.mlp_hidden(), F = cfg.fc_dim(), Q = cfg.qkv_dim();
  const int64_t norm = cfg.rmsnorm() ? C : 2 * C, head = cfg.tie_embeddings ? 0 : cfg.vocab * C;
  return int64_t(cfg.vocab) * C + head +
         cfg.layers * (2 * norm + Q * C + (cfg.qkv_bias ? Q : 0) + C * C + (F + M) * C) + norm;
}

GptParams gpt_param_view(const GptConfig& cfg, float* arena) {
  GptParams p;
  p.layers.resize(size_t(cfg.layers));
  for (const ParamTensor& t : gpt_param_tensors(cfg)) {
    float* at = arena + t.offset;
    std::string_view name = t.name;
    if (name.starts_with("h")) {
      const size_t dot = name.find('.');
      LayerParams& L = p.layers[size_t(std::stoi(std::string(name.substr(1, dot - 1))))];
      name.remove_prefix(dot + 1);
      float** slot = name == "ln1_w"                          ? &L.ln1_w
                     : name == "ln1_b"                        ? &L.ln1_b
                     : name == "qkv_w"                        ? &L.qkv_w
                     : name == "qkv_b"                        ? &L.qkv_b
                     : name == "proj_w"                       ? &L.proj_w
                     : name == "ln2_w"                        ? &L.ln2_w
                     : name == "ln2_b"                        ? &L.ln2_b
                     : name == "fc_w" || name == "gate_up_w"  ? &L.fc_w
                     : name == "fcproj_w" || name == "down_w" ? &L.fcproj_w
                                                              : nullptr;
      WF_CHECK(slot, "gpt_param_view: unknown tensor {}", t.name);
      *slot = at;
    } else if (name == "wte") {
      p.wte = at;
    } else if (name == "lnf_w") {
      p.lnf_w = at;
    } else if (name == "lnf_b") {
      p.lnf_b = at;
    } else if (name == "lm_head_w") {
      p.lm_head = at;
    }
  }
  if (!p.lm_head) p.lm_head = p.wte;
  return p;
}

void gpt_init_params(const GptConfig& cfg, float* arena, uint64_t seed) {
  Rng rng(seed);
  const double proj_std = 0.02 / std::sqrt(2.0 * cfg.layers);
  for (const auto& t : gpt_param_tensors(cfg)) {
    float* p = arena + t.offset;
    const bool is_b = t.name.ends_with("_b"), is_norm = t.name.find("ln") != std::string::npos;
    if (is_norm || is_b) {  // norm weights 1, biases 0
      std::fill(p, p + t.size, is_b ? 0.0f : 1.0f);
      continue;
    }
    const bool is_proj = t.name.ends_with("proj_w") || t.name.ends_with("down_w");
    const double sd = is_proj ? proj_std : 0.02;
    for (int64_t i = 0; i < t.size; ++i) p[i] = float(sd * rng.normal());
  }
}

// Activations. Each block has a view; `kept` tensors have storage per block, the others point into
// one shared set (with checkpointing) or have storage per block (without). An Act is in the model's
// dtype (one buffer, fp32 or bf16); the float* tensors are fp32 in both. In bf16 the rotary
// embedding writes q, k, v in fp32 into the shared scratch dq, dk, dv before they are rounded, and
// qkv is one shared scratch.
struct Gpt::BlockActs {
  float* x;         // (N, C) block input (always kept)
  Act ln1;          // (N, C)
  float* ln1_mean;  // (N)
  float* ln1_rstd;  // (N)
  float* qkv;       // (N, Q)
  Act q;            // (B, T, H, D) rotated
  Act k;            // (B, T, Hkv, D) rotated
  Act v;            // (B, T, Hkv, D)
  Act o;            // (B, T, H, D) attention output (always kept)
  float* lse;       // (B, H, T) (always kept)
  float* res2;      // (N, C) x + proj(o)
  Act ln2;          // (N, C)
  float* ln2_mean;  // (N)
  float* ln2_rstd;  // (N)
  Act fch;          // (N, F) fc output (F = fc_dim: M, or 2 M with SwiGLU)
  Act fch_act;      // (N, M) its GELU or SwiGLU
};

struct Gpt::Acts {
  LargeVector<float> arena;
  LargeVector<bf16> arena16;
  std::vector<BlockActs> blocks;
  float* x_final;   // (N, C) output of the last block
  Act lnf;          // (N, C)
  float* lnf_mean;  // (N)
  float* lnf_rstd;  // (N)
  float* logits;    // (N, V); the backward turns it into dlogits
  float* losses;    // (N)
  float* tmp;       // (N, C) projection outputs before the residual add
  // gradients of one block at a time
  float* dx;     // (N, C) running gradient of the residual stream
  float* dln;    // (N, C)
  float* dfch;   // (N, F)
  float* dact;   // (N, M) SwiGLU only (GELU: dfch)
  float* dqkv;   // (N, Q)
  float* dq;     // (N, H D)
  float* dk;     // (N, Hkv D)
  float* dv;     // (N, Hkv D)
  float* dattn;  // (N, C)
  // bf16 only (dfch and dact are then not allocated)
  bf16* wide16;  // (N, max(V, Q, M)): dense outputs in the forward, output gradients backward
  bf16* x16;     // (N, max(F, C)): rounded inputs and input gradients
  bf16* y16;     // (N, max(M, C))
  bf16* dq16;    // (N, H D) attention input gradients
  bf16* dk16;    // (N, Hkv D)
  bf16* dv16;    // (N, Hkv D)
};

namespace {
// Collects (pointer slot, size) requests, then allocates one arena and points every slot into it.
template <typename T>
class ArenaPlan {
 public:
  void add(T** slot, int64_t n) { req_.push_back({slot, (n + 15) / 16 * 16}); }
  void add(std::initializer_list<std::pair<T**, int64_t>> list) {
    for (auto [slot, n] : list) add(slot, n);
  }
  int64_t total() const {
    int64_t t = 0;
    for (auto& r : req_) t += r.n;
    return t;
  }
  void allocate(LargeVector<T>& arena) {
    arena.assign(size_t(total()), T{});
    int64_t off = 0;
    for (auto& r : req_) {
      *r.slot = arena.data() + off;
      off += r.n;
    }
  }

 private:
  struct Req {
    T** slot;
    int64_t n;
  };
  std::vector<Req> req_;
};

// Requests of both dtypes: an Act gets its buffer in the model's dtype.
struct ActPlan {
  bool bf;
  ArenaPlan<float> f32;
  ArenaPlan<bf16> b16;
  void add(Act* x, int64_t n) {
    if (bf) {
      b16.add(&x->b16, n);
    } else {
      f32.add(&x->f32, n);
    }
  }
  void add(std::initializer_list<std::pair<Act*, int64_t>> list) {
    for (auto [x, n] : list) add(x, n);
  }
};

// out = a + widened b (a residual add of a bf16 layer output).
void add_bf16(float* out, const float* a, const bf16* b, int64_t n) {
  const auto* bits = reinterpret_cast<const uint16_t*>(b);
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) out[i] = a[i] + bits_to_float(bits[i]);
}

// out = x + y (the residual stream, fp32).
void add_residual(float* out, const float* x, const Act& y, int64_t n) {
  if (y.b16) {
    add_bf16(out, x, y.b16, n);
    return;
  }
  const float* yf = y.f32;
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) out[i] = x[i] + yf[i];
}
}  // namespace

void Gpt::dense_fwd(const Act& out, const Act& in, const float* w, int C, int OC,
                    const float* bias) {
  model::dense_fwd(out, in, w, weight16(w), bias, N_, C, OC);
}

void Gpt::dense_bwd(const Act& din, float* dw, const Act& dout, const Act& in, const float* w,
                    int C, int OC, float* dbias) {
  model::dense_bwd(din, dw, dbias, dout, in, w, weight16(w), N_, C, OC);
}

// The statistics are fp32; a bf16 output is computed into scratch, then rounded.
void Gpt::norm_fwd(const Act& out, float* scratch, float* mean, float* rstd, const float* x,
                   const float* w, const float* b, int64_t rows) {
  const int C = cfg_.dim;
  const int64_t n = rows < 0 ? N_ : rows;
  float* y = out.b16 ? scratch : out.f32;
  if (cfg_.rmsnorm()) {
    k::rmsnorm_fwd(y, rstd, x, w, n, C, float(cfg_.norm_eps));
  } else {
    k::layernorm_fwd(y, mean, rstd, x, w, b, n, C);
  }
  if (out.b16) round_to_bf16(scratch, out.b16, n * int64_t(C));
}

void Gpt::norm_bwd(float* dx, float* dw, float* db, const float* dout, const float* x,
                   const float* w, const float* mean, const float* rstd) {
  if (cfg_.rmsnorm()) {
    k::rmsnorm_bwd(dx, dw, dout, x, w, rstd, N_, cfg_.dim);
  } else {
    k::layernorm_bwd(dx, dw, db, dout, x, w, mean, rstd, N_, cfg_.dim);
  }
}

void Gpt::rope_tables(const int64_t* pos, int n) {
  const int D = cfg_.head_dim();
  rope_cos_.resize(size_t(n) * D / 2);
  rope_sin_.resize(size_t(n) * D / 2);
  k::rope_tables_freq(pos, n, D, inv_freq_.data(), rope_cos_.data(), rope_sin_.data());
}

Gpt::Gpt(const GptConfig& cfg, int batch, std::vector<int64_t> positions, Checkpointing ckpt,
         AttentionOp& attention, Dtype dtype, GptUse use)
    : cfg_(cfg),
      B_(batch),
      T_(int(positions.size())),
      N_(int64_t(batch) * int64_t(positions.size())),
      positions_(std::move(positions)),
      ckpt_(ckpt),
      attn_(attention),
      dtype_(dtype),
      use_(use) {
  cfg_.validate();
  WF_CHECK(B_ >= 1 && T_ >= 1, "Gpt: batch {} and tokens {} must be positive", B_, T_);
  num_params_ = gpt_num_params(cfg_);
  tensors_ = gpt_param_tensors(cfg_);
  const bool train = use_ == GptUse::Train;
  params_.assign(size_t(num_params_), 0.0f);
  p_ = gpt_param_view(cfg_, params_.data());
  if (train) {
    grads_.assign(size_t(num_params_), 0.0f);
    g_ = gpt_param_view(cfg_, grads_.data());
  }
  const bool bf = dtype_ == Dtype::bf16;
  if (bf) params16_.assign(size_t(num_params_), bf16{});

  const int D = cfg_.head_dim();
  inv_freq_ = cfg_.rope_inv_freq();
  rope_tables(positions_.data(), T_);

  a_ = std::make_unique<Acts>();
  auto& a = *a_;
  const int64_t N = N_, C = cfg_.dim, M = cfg_.mlp_hidden(), F = cfg_.fc_dim(), Q = cfg_.qkv_dim();
  const int64_t HD = int64_t(cfg_.heads) * D, KD = int64_t(cfg_.kv_heads) * D;
  const int L = cfg_.layers;
  ActPlan acts{bf, {}, {}};
  ArenaPlan<float>& plan = acts.f32;
  a.blocks.resize(size_t(L));
  BlockActs shared{};
  auto add_recomputed = [&](BlockActs& b, bool own) {
    BlockActs& s = own ? b : shared;
    if (!own && &b != &a.blocks[0]) return;
    acts.add(&s.ln1, N * C);
    plan.add({{&s.ln1_mean, N}, {&s.ln1_rstd, N}});
    if (!bf) plan.add(&s.qkv, N * Q);
    acts.add({{&s.q, N * HD}, {&s.k, N * KD}, {&s.v, N * KD}});
    plan.add(&s.res2, N * C);
    acts.add(&s.ln2, N * C);
    plan.add({{&s.ln2_mean, N}, {&s.ln2_rstd, N}});
    acts.add({{&s.fch, N * F}, {&s.fch_act, N * M}});
  };
  const bool own = train && ckpt_ == Checkpointing::None;
  // A block's input x, attention output o and lse: every block's in training (the backward reads
  // them); in inference kInferBlockSets that the blocks take in turn, at 32K tokens and 8 layers
  // 0.7 GiB less to allocate and touch.
  const int sets = train ? L : std::min(L, kInferBlockSets);
  for (int l = 0; l < L; ++l) {
    BlockActs& b = a.blocks[size_t(l)];
    if (l < sets) {
      plan.add(&b.x, N * C);
      acts.add(&b.o, N * HD);
      plan.add(&b.lse, int64_t(B_) * cfg_.heads * T_);
    }
    add_recomputed(b, own);
  }
  // In bf16, qkv is read only by the rotary embedding of the same forward: one buffer for all.
  if (bf) plan.add(&shared.qkv, N * Q);
  plan.add(&a.x_final, N * C);
  acts.add(&a.lnf, N * C);
  plan.add({{&a.lnf_mean, N}, {&a.lnf_rstd, N}, {&a.tmp, N * C}});
  if (train) {
    plan.add({{&a.logits, N * cfg_.vocab}, {&a.losses, N}, {&a.dx, N * C}, {&a.dln, N * C}});
    if (!bf) plan.add(&a.dfch, N * F);
    if (!bf && cfg_.swiglu()) plan.add(&a.dact, N * M);
    plan.add({{&a.dqkv, N * Q}, {&a.dattn, N * HD}});
  }
  // dq, dk, dv are also the fp32 scratch of a bf16 forward's rotary embedding (split_qkv).
  if (train || bf) plan.add({{&a.dq, N * HD}, {&a.dk, N * KD}, {&a.dv, N * KD}});
  if (bf) {
    // wide16 holds the dense outputs of a forward (the logits' too in training) and the output
    // gradients of a backward; the rest serve the backward only.
    acts.b16.add(&a.wide16, N * std::max({train ? int64_t(cfg_.vocab) : 0, Q, M, C}));
    if (train)
      acts.b16.add({{&a.x16, N * std::max(F, C)},
                    {&a.y16, N * std::max(M, C)},
                    {&a.dq16, N * HD},
                    {&a.dk16, N * KD},
                    {&a.dv16, N * KD}});
  }
  act_bytes_ = plan.total() * int64_t(sizeof(float)) + acts.b16.total() * int64_t(sizeof(bf16));
  plan.allocate(a.arena);
  acts.b16.allocate(a.arena16);
  for (int l = sets; l < L; ++l) {
    const BlockActs& from = a.blocks[size_t(l % sets)];
    BlockActs& b = a.blocks[size_t(l)];
    b.x = from.x;
    b.o = from.o;
    b.lse = from.lse;
  }
  if (!own) {
    for (auto& b : a.blocks) {
      float* x = b.x;
      const Act o = b.o;
      float* lse = b.lse;
      b = shared;
      b.x = x;
      b.o = o;
      b.lse = lse;
    }
  } else if (bf) {
    for (auto& b : a.blocks) b.qkv = shared.qkv;
  }
}

Gpt::~Gpt() = default;

const float* Gpt::logits() const { return a_->logits; }
const float* Gpt::losses() const { return a_->losses; }

void Gpt::set_positions(const std::vector<int64_t>& positions) {
  WF_CHECK(int64_t(positions.size()) == N_, "set_positions: {} positions for {} rows",
           positions.size(), N_);
  rope_tables(positions.data(), int(N_));
  rope_per_row_ = true;
}

void Gpt::zero_grads() { std::fill(grads_.begin(), grads_.end(), 0.0f); }

// q, k (rotated) and v of block b from its qkv.
void Gpt::split_qkv(const BlockActs& b) {
  const int64_t N = N_;
  const int Q = cfg_.qkv_dim(), D = cfg_.head_dim(), H = cfg_.heads, Hkv = cfg_.kv_heads;
  // With per-row angles (set_positions) the B sequences are one run of B * T rows.
  const int rb = rope_per_row_ ? 1 : B_, rt = rope_per_row_ ? int(N_) : T_;
  // fp32 q, k, v: themselves, or (bf16) the scratch dq, dk, dv, rounded at the end.
  const bool bf = dtype_ == Dtype::bf16;
  float* q = bf ? a_->dq : b.q.f32;
  float* kk = bf ? a_->dk : b.k.f32;
  float* v = bf ? a_->dv : b.v.f32;
  k::rope_fwd(q, b.qkv, Q, rope_cos_.data(), rope_sin_.data(), rb, rt, H, D);  // (B,T,H,D)
  k::rope_fwd(kk, b.qkv + H * D, Q, rope_cos_.data(), rope_sin_.data(), rb, rt, Hkv, D);
  const int64_t KD = int64_t(Hkv) * D;
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {  // v (B, T, Hkv, D)
    std::memcpy(v + n * KD, b.qkv + n * Q + (H + Hkv) * D, size_t(KD) * sizeof(float));
  }
  if (bf) {
    round_to_bf16(q, b.q.b16, N * H * D);
    round_to_bf16(kk, b.k.b16, N * KD);
    round_to_bf16(v, b.v.b16, N * KD);
  }
}

// a.dqkv from a.dq, a.dk (rotated back) and a.dv: the transpose of split_qkv.
void Gpt::merge_dqkv() {
  auto& a = *a_;
  const int64_t N = N_;
  const int Q = cfg_.qkv_dim(), D = cfg_.head_dim(), H = cfg_.heads, Hkv = cfg_.kv_heads;
  const int64_t KD = int64_t(Hkv) * D;
  if (dtype_ == Dtype::bf16) {
    widen_to_fp32(a.dq16, a.dq, N * H * D);
    widen_to_fp32(a.dk16, a.dk, N * KD);
    widen_to_fp32(a.dv16, a.dv, N * KD);
  }
  const int rb = rope_per_row_ ? 1 : B_, rt = rope_per_row_ ? int(N_) : T_;
  k::rope_bwd(a.dqkv, Q, a.dq, rope_cos_.data(), rope_sin_.data(), rb, rt, H, D);
  k::rope_bwd(a.dqkv + H * D, Q, a.dk, rope_cos_.data(), rope_sin_.data(), rb, rt, Hkv, D);
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    std::memcpy(a.dqkv + n * Q + (H + Hkv) * D, a.dv + n * KD, size_t(KD) * sizeof(float));
  }
}

// Forward of block l from its input b.x: everything up to the next block's input. With
// run_attention false (checkpoint recompute for the backward), o and lse are taken as already
// computed and the block output is not written. The products, GELU and the stored activations are
// in the model's dtype; the residual stream, layernorm statistics and the rotary embedding fp32.
void Gpt::block_forward(int l, bool run_attention) {
  auto& a = *a_;
  const BlockActs& b = a.blocks[size_t(l)];
  const LayerParams& w = p_.layers[size_t(l)];
  const int64_t N = N_;
  const int C = cfg_.dim, M = cfg_.mlp_hidden(), F = cfg_.fc_dim(), Q = cfg_.qkv_dim();
  const bool bf = dtype_ == Dtype::bf16;
  float* x_out = l + 1 < cfg_.layers ? a.blocks[size_t(l) + 1].x : a.x_final;
  const Act out = pick(bf, a.tmp, a.wide16);  // a dense output before its residual add

  std::optional<trace::Span> dense(std::in_place, "dense", trace::Cat::Compute,
                                   std::initializer_list<trace::Arg>{{"layer", l}});
  norm_fwd(b.ln1, a.tmp, b.ln1_mean, b.ln1_rstd, b.x, w.ln1_w, w.ln1_b);  // (N, C)
  dense_fwd(pick(bf, b.qkv, a.wide16), b.ln1, w.qkv_w, C, Q, w.qkv_b);    // (N, Q)
  if (bf) widen_to_fp32(a.wide16, b.qkv, N * Q);
  split_qkv(b);
  dense.reset();
  if (run_attention) {  // o (B,T,H,D), lse (B,H,T)
    attn_.set_window(cfg_.layer_window(l));
    attn_.forward(b.q, b.k, b.v, b.o, b.lse);
  }
  dense.emplace("dense", trace::Cat::Compute, std::initializer_list<trace::Arg>{{"layer", l}});
  dense_fwd(out, b.o, w.proj_w, C, C);  // (N, C)
  add_residual(b.res2, b.x, out, N * C);
  norm_fwd(b.ln2, a.tmp, b.ln2_mean, b.ln2_rstd, b.res2, w.ln2_w, w.ln2_b);
  dense_fwd(b.fch, b.ln2, w.fc_w, C, F);  // (N, F)
  if (cfg_.swiglu()) {
    swiglu_fwd(b.fch_act, b.fch, N, M);
  } else {
    gelu_fwd(b.fch_act, b.fch, N * M);
  }
  if (!run_attention) return;  // recompute for the backward: the block output is not needed
  dense_fwd(out, b.fch_act, w.fcproj_w, M, C);  // (N, C)
  add_residual(x_out, b.res2, out, N * C);
}

const bf16* Gpt::weight16(const float* master) const {
  return params16_.empty() ? nullptr : params16_.data() + (master - params_.data());
}

void Gpt::round_weights() {
  // The matrices (the tensors with weight decay): the embedding / LM head and the dense layers.
  for (const auto& t : tensors_) {
    if (t.decay) round_to_bf16(params_.data() + t.offset, params16_.data() + t.offset, t.size);
  }
}

void Gpt::blocks_forward(const int32_t* tokens) {
  if (dtype_ == Dtype::bf16) round_weights();
  k::embedding_fwd(a_->blocks[0].x, tokens, p_.wte, N_, cfg_.dim, cfg_.vocab);  // (N, C)
  for (int l = 0; l < cfg_.layers; ++l) {
    trace::Span layer("layer forward", trace::Cat::Phase, {{"layer", l}});
    block_forward(l, true);
  }
}

double Gpt::forward(const int32_t* tokens, const int32_t* targets) {
  WF_CHECK(use_ == GptUse::Train, "Gpt::forward on a model built for inference: forward_logits");
  auto& a = *a_;
  tokens_ = tokens;
  targets_ = targets;
  const int64_t N = N_;
  const int C = cfg_.dim, V = cfg_.vocab;
  const bool bf = dtype_ == Dtype::bf16;
  blocks_forward(tokens);
  trace::Span head("lm head", trace::Cat::Compute);
  norm_fwd(a.lnf, a.tmp, a.lnf_mean, a.lnf_rstd, a.x_final, p_.lnf_w, p_.lnf_b);
  dense_fwd(pick(bf, a.logits, a.wide16), a.lnf, p_.lm_head, C, V);  // (N, V)
  if (bf) widen_to_fp32(a.wide16, a.logits, N * V);
  k::softmax_xent_fwd(a.losses, a.logits, targets, N, V);
  double s = 0.0;
  for (int64_t n = 0; n < N; ++n) s += a.losses[n];
  return s;
}

void Gpt::forward_logits(const int32_t* tokens, const std::vector<int64_t>& rows, float* logits) {
  WF_CHECK(use_ == GptUse::Infer, "Gpt::forward_logits needs a model built with GptUse::Infer");
  auto& a = *a_;
  const int C = cfg_.dim, V = cfg_.vocab;
  const bool bf = dtype_ == Dtype::bf16;
  blocks_forward(tokens);
  // The final norm and the LM head of the asked rows only: the norm is per row, so the rows are
  // gathered first; the head is the training forward's product on n rows.
  trace::Span head("lm head", trace::Cat::Compute);
  const int64_t n = int64_t(rows.size());
  if (n == 0) return;
  std::vector<float> x(size_t(n * C)), y(size_t(n * C)), mean(static_cast<size_t>(n)),
      rstd(static_cast<size_t>(n));
  std::vector<bf16> y16(bf ? size_t(n * C) : 0), out16(bf ? size_t(n * V) : 0);
  for (int64_t i = 0; i < n; ++i) {
    WF_CHECK(rows[size_t(i)] >= 0 && rows[size_t(i)] < N_, "forward_logits: row {} of {}",
             rows[size_t(i)], N_);
    std::copy_n(a.x_final + rows[size_t(i)] * C, C, x.begin() + i * C);
  }
  const Act normed = pick(bf, y.data(), y16.data());
  norm_fwd(normed, y.data(), mean.data(), rstd.data(), x.data(), p_.lnf_w, p_.lnf_b, n);
  model::dense_fwd(pick(bf, logits, out16.data()), normed, p_.lm_head, weight16(p_.lm_head),
                   nullptr, n, C, V);
  if (bf) widen_to_fp32(out16.data(), logits, n * V);
}

void Gpt::backward(float dloss) {
  WF_CHECK(use_ == GptUse::Train, "Gpt::backward on a model built for inference");
  WF_CHECK(tokens_ && targets_, "Gpt::backward called before forward");
  auto& a = *a_;
  const int64_t N = N_;
  const int C = cfg_.dim, V = cfg_.vocab;
  const bool bf = dtype_ == Dtype::bf16;

  // Head: logits -> dlogits in place; a tied wte gets the LM-head gradient here.
  std::optional<trace::Span> head(std::in_place, "lm head", trace::Cat::Compute,
                                  std::initializer_list<trace::Arg>{});
  k::softmax_xent_bwd(a.logits, a.logits, targets_, dloss, N, V);  // (N, V)
  const Act dln = pick(bf, a.dln, a.x16);
  dense_bwd(dln, g_.lm_head, in_dtype(bf, a.logits, a.wide16, N * V), a.lnf, p_.lm_head, C,
            V);  // (N, C)
  std::fill(a.dx, a.dx + N * C, 0.0f);
  norm_bwd(a.dx, g_.lnf_w, g_.lnf_b, as_fp32(dln, a.dln, N * C), a.x_final, p_.lnf_w, a.lnf_mean,
           a.lnf_rstd);
  head.reset();

  for (int l = cfg_.layers - 1; l >= 0; --l) {
    trace::Span layer("layer backward", trace::Cat::Phase, {{"layer", l}});
    if (ckpt_ == Checkpointing::Attention) {
      trace::Span recompute("recompute", trace::Cat::Phase, {{"layer", l}});
      block_forward(l, false);
    }
    block_backward(l);
  }
  k::embedding_bwd(g_.wte, tokens_, a.dx, N, C);
  tokens_ = targets_ = nullptr;  // logits now hold gradients: a new forward is needed
}

// Backward of block l: a.dx holds the gradient of the block output on entry and of its input on
// return. Output gradients enter the products in the model's dtype (bf16: a.dx and dqkv rounded),
// input gradients are widened to fp32 for the layernorm backward and the rotary embedding.
void Gpt::block_backward(int l) {
  auto& a = *a_;
  const BlockActs& b = a.blocks[size_t(l)];
  const LayerParams& w = p_.layers[size_t(l)];
  const LayerParams& gw = g_.layers[size_t(l)];
  const int64_t N = N_;
  const int C = cfg_.dim, M = cfg_.mlp_hidden(), F = cfg_.fc_dim(), Q = cfg_.qkv_dim();
  const bool bf = dtype_ == Dtype::bf16;
  const Act dfch = pick(bf, a.dfch, a.x16), dln = pick(bf, a.dln, a.y16);
  // The gradient of the activation's output: dfch itself for GELU (in place), its own buffer for
  // SwiGLU (whose input is twice as wide).
  const Act dact = cfg_.swiglu() ? pick(bf, a.dact, a.y16) : dfch;
  std::optional<trace::Span> dense(std::in_place, "dense", trace::Cat::Compute,
                                   std::initializer_list<trace::Arg>{{"layer", l}});

  // MLP: x_out = res2 + fcproj(act(fc(ln2(res2)))); a.dx holds d x_out.
  dense_bwd(dact, gw.fcproj_w, in_dtype(bf, a.dx, a.wide16, N * C), b.fch_act, w.fcproj_w, M,
            C);  // (N, M)
  if (cfg_.swiglu()) {
    swiglu_bwd(dfch, b.fch, dact, N, M);  // (N, F)
  } else {
    gelu_bwd(dfch, b.fch, dfch, N * M);  // (N, M)
  }
  dense_bwd(dln, gw.fc_w, dfch, b.ln2, w.fc_w, C, F);  // (N, C)
  norm_bwd(a.dx, gw.ln2_w, gw.ln2_b, as_fp32(dln, a.dln, N * C), b.res2, w.ln2_w, b.ln2_mean,
           b.ln2_rstd);  // a.dx: d res2

  // Attention: res2 = x + proj(o).
  const Act dattn = pick(bf, a.dattn, a.y16);
  dense_bwd(dattn, gw.proj_w, in_dtype(bf, a.dx, a.wide16, N * C), b.o, w.proj_w, C, C);  // (N, C)
  dense.reset();
  attn_.set_window(cfg_.layer_window(l));
  attn_.backward(b.q, b.k, b.v, b.o, b.lse, dattn, pick(bf, a.dq, a.dq16), pick(bf, a.dk, a.dk16),
                 pick(bf, a.dv, a.dv16));
  dense.emplace("dense", trace::Cat::Compute, std::initializer_list<trace::Arg>{{"layer", l}});
  merge_dqkv();
  dense_bwd(dln, gw.qkv_w, in_dtype(bf, a.dqkv, a.wide16, N * Q), b.ln1, w.qkv_w, C, Q,
            gw.qkv_b);  // (N, C)
  norm_bwd(a.dx, gw.ln1_w, gw.ln1_b, as_fp32(dln, a.dln, N * C), b.x, w.ln1_w, b.ln1_mean,
           b.ln1_rstd);  // a.dx: d x
}

}  // namespace wallfacer::model
