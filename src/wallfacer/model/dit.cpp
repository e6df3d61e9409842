#include "wallfacer/model/dit.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <initializer_list>
#include <optional>
#include <random>

#include "wallfacer/core/error.h"
#include "wallfacer/core/trace.h"
#include "wallfacer/kernels/dense_bf16.h"
#include "wallfacer/kernels/ops.h"

namespace wallfacer::model {

namespace k = wallfacer::kernels;

void DitConfig::validate() const {
  WF_USAGE_CHECK(channels >= 1, "data.channels must be >= 1 (got {})", channels);
  WF_USAGE_CHECK(frames >= 1 && frames <= kDitMaxFrames, "data.frames must be in 1..{} (got {})",
                 kDitMaxFrames, frames);
  WF_USAGE_CHECK(size >= 1 && size <= kDitMaxSize, "data.size must be in 1..{} (got {})",
                 kDitMaxSize, size);
  WF_USAGE_CHECK(patch >= 1 && patch <= kDitMaxPatch && size % patch == 0,
                 "data.size ({}) must be a multiple of model.patch ({}), which must be in 1..{}",
                 size, patch, kDitMaxPatch);
  WF_USAGE_CHECK(layers >= 1, "model.layers must be >= 1 (got {})", layers);
  WF_USAGE_CHECK(heads >= 1 && dim % heads == 0,
                 "model.dim ({}) must be a multiple of model.heads ({})", dim, heads);
  WF_USAGE_CHECK(dim >= 6, "model.dim must be >= 6 for the 3-D positions (got {})", dim);
  WF_USAGE_CHECK(mlp_ratio >= 1, "model.mlp_ratio must be >= 1 (got {})", mlp_ratio);
  WF_USAGE_CHECK(freq_dim >= 2 && freq_dim % 2 == 0,
                 "model.freq_dim must be an even number >= 2 (got {})", freq_dim);
  WF_USAGE_CHECK(classes >= 0, "model.classes must be >= 0 (got {})", classes);
}

std::vector<ParamTensor> dit_param_tensors(const DitConfig& cfg) {
  const int64_t C = cfg.dim, PD = cfg.patch_dim(), F = cfg.freq_dim, M = int64_t(cfg.mlp_ratio) * C;
  std::vector<ParamTensor> t;
  int64_t off = 0;
  auto add = [&](std::string name, int64_t size, bool decay) {
    t.push_back({std::move(name), off, size, decay});
    off += size;
  };
  add("patch_w", C * PD, true);
  add("patch_b", C, false);
  add("t1_w", C * F, true);
  add("t1_b", C, false);
  add("t2_w", C * C, true);
  add("t2_b", C, false);
  if (cfg.classes > 0) add("y_emb", int64_t(cfg.classes) * C, false);
  for (int l = 0; l < cfg.layers; ++l) {
    const std::string p = "layers." + std::to_string(l) + ".";
    add(p + "ada_w", 6 * C * C, true);
    add(p + "ada_b", 6 * C, false);
    add(p + "qkv_w", 3 * C * C, true);
    add(p + "qkv_b", 3 * C, false);
    add(p + "proj_w", C * C, true);
    add(p + "proj_b", C, false);
    add(p + "fc1_w", M * C, true);
    add(p + "fc1_b", M, false);
    add(p + "fc2_w", C * M, true);
    add(p + "fc2_b", C, false);
  }
  add("final_ada_w", 2 * C * C, true);
  add("final_ada_b", 2 * C, false);
  add("out_w", PD * C, true);
  add("out_b", PD, false);
  return t;
}

int64_t dit_num_params(const DitConfig& cfg) {
  const auto t = dit_param_tensors(cfg);
  return t.back().offset + t.back().size;
}

DitParams dit_param_view(const DitConfig& cfg, float* arena) {
  const auto t = dit_param_tensors(cfg);
  size_t i = 0;
  auto next = [&] { return arena + t[i++].offset; };
  DitParams p;
  p.patch_w = next();
  p.patch_b = next();
  p.t1_w = next();
  p.t1_b = next();
  p.t2_w = next();
  p.t2_b = next();
  p.y_emb = cfg.classes > 0 ? next() : nullptr;
  p.layers.resize(size_t(cfg.layers));
  for (auto& l : p.layers) {
    l.ada_w = next();
    l.ada_b = next();
    l.qkv_w = next();
    l.qkv_b = next();
    l.proj_w = next();
    l.proj_b = next();
    l.fc1_w = next();
    l.fc1_b = next();
    l.fc2_w = next();
    l.fc2_b = next();
  }
  p.final_ada_w = next();
  p.final_ada_b = next();
  p.out_w = next();
  p.out_b = next();
  return p;
}

void dit_init_params(const DitConfig& cfg, float* arena, uint64_t seed) {
  const int64_t C = cfg.dim, PD = cfg.patch_dim(), F = cfg.freq_dim, M = int64_t(cfg.mlp_ratio) * C;
  std::fill_n(arena, dit_num_params(cfg), 0.0f);
  std::mt19937_64 gen(seed);
  auto uniform = [&] { return double(gen() >> 11) * 0x1.0p-53; };
  auto xavier = [&](float* w, int64_t out, int64_t in) {
    const double bound = std::sqrt(6.0 / double(in + out));
    for (int64_t i = 0; i < out * in; ++i) w[i] = float((2.0 * uniform() - 1.0) * bound);
  };
  auto normal = [&](float* w, int64_t n, double std) {
    for (int64_t i = 0; i < n; ++i) {
      const double u1 = 1.0 - uniform(), u2 = uniform();
      w[i] = float(std * std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2));
    }
  };
  DitParams p = dit_param_view(cfg, arena);
  xavier(p.patch_w, C, PD);
  normal(p.t1_w, C * F, 0.02);
  normal(p.t2_w, C * C, 0.02);
  if (p.y_emb) normal(p.y_emb, int64_t(cfg.classes) * C, 0.02);
  for (auto& l : p.layers) {
    xavier(l.qkv_w, 3 * C, C);
    xavier(l.proj_w, C, C);
    xavier(l.fc1_w, M, C);
    xavier(l.fc2_w, C, M);
  }
  // ada_w, final_ada_w and out_w stay zero: every block starts as the identity.
}

void dit_pos_embedding(const DitConfig& cfg, const int64_t* pos, int T, float* out) {
  const int C = cfg.dim, half = C / 6, g = cfg.grid();
  for (int t = 0; t < T; ++t) {
    const int64_t n = pos[t];
    const int64_t coord[3] = {n / (int64_t(g) * g), (n / g) % g, n % g};
    float* o = out + int64_t(t) * C;
    std::fill_n(o, C, 0.0f);
    for (int a = 0; a < 3; ++a)
      for (int i = 0; i < half; ++i) {
        const double w = std::pow(10000.0, -double(i) / half);
        o[a * 2 * half + i] = float(std::sin(double(coord[a]) * w));
        o[a * 2 * half + half + i] = float(std::cos(double(coord[a]) * w));
      }
  }
}

void dit_timestep_features(const float* t, int B, int F, float* out) {
  const int half = F / 2;
  for (int b = 0; b < B; ++b)
    for (int i = 0; i < half; ++i) {
      const double a = 1000.0 * double(t[b]) * std::exp(-std::log(10000.0) * i / half);
      out[int64_t(b) * F + i] = float(std::cos(a));
      out[int64_t(b) * F + half + i] = float(std::sin(a));
    }
}

// Visits every value of the tokens at pos: fn(row value index, clip value index).
template <typename Fn>
static void for_patch_values(const DitConfig& cfg, const int64_t* pos, int T, Fn fn) {
  const int p = cfg.patch, g = cfg.grid(), ch = cfg.channels, S = cfg.size;
  const int64_t PD = cfg.patch_dim();
  for (int t = 0; t < T; ++t) {
    const int64_t n = pos[t];
    const int64_t f = n / (int64_t(g) * g), gy = (n / g) % g, gx = n % g;
    for (int dy = 0; dy < p; ++dy)
      for (int dx = 0; dx < p; ++dx)
        for (int c = 0; c < ch; ++c) {
          const int64_t src = ((f * S + gy * p + dy) * S + gx * p + dx) * ch + c;
          fn(t * PD + (int64_t(dy) * p + dx) * ch + c, src);
        }
  }
}

void dit_patchify(const DitConfig& cfg, const float* clip, const int64_t* pos, int T, float* out) {
  for_patch_values(cfg, pos, T, [&](int64_t r, int64_t s) { out[r] = clip[s]; });
}

void dit_unpatchify(const DitConfig& cfg, const float* patches, const int64_t* pos, int T,
                    float* clip) {
  for_patch_values(cfg, pos, T, [&](int64_t r, int64_t s) { clip[s] = patches[r]; });
}

namespace {

float sigmoid(float z) { return 1.0f / (1.0f + std::exp(-z)); }

// out = silu(inp), n values.
void silu_fwd(float* out, const float* inp, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = inp[i] * sigmoid(inp[i]);
}
// dinp = dout * silu'(inp) (overwrites; may alias dout).
void silu_bwd(float* dinp, const float* inp, const float* dout, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float s = sigmoid(inp[i]);
    dinp[i] = dout[i] * s * (1.0f + inp[i] * (1.0f - s));
  }
}

// The modulation helpers visit the N rows of the local batch: row n takes the modulation row
// clip[n] of mod (one row of mod_stride values per conditioned clip).

// h (N, C) = ln * (1 + scale[clip]) + shift[clip]
void modulate_fwd(float* h, const float* ln, const float* mod, int64_t mod_stride, int shift_off,
                  int scale_off, const int32_t* clip, int64_t N, int C) {
  for (int64_t n = 0; n < N; ++n) {
    const float* sh = mod + clip[n] * mod_stride + shift_off;
    const float* sc = mod + clip[n] * mod_stride + scale_off;
    const int64_t r = n * C;
    for (int c = 0; c < C; ++c) h[r + c] = ln[r + c] * (1.0f + sc[c]) + sh[c];
  }
}
// dln = dh * (1 + scale) (overwrites); dshift, dscale (in dmod) += sums over each clip's rows.
void modulate_bwd(float* dln, float* dmod, const float* dh, const float* ln, const float* mod,
                  int64_t mod_stride, int shift_off, int scale_off, const int32_t* clip, int64_t N,
                  int C) {
  for (int64_t n = 0; n < N; ++n) {
    const float* sc = mod + clip[n] * mod_stride + scale_off;
    float* dsh = dmod + clip[n] * mod_stride + shift_off;
    float* dsc = dmod + clip[n] * mod_stride + scale_off;
    const int64_t r = n * C;
    for (int c = 0; c < C; ++c) {
      dsh[c] += dh[r + c];
      dsc[c] += dh[r + c] * ln[r + c];
      dln[r + c] = dh[r + c] * (1.0f + sc[c]);
    }
  }
}
// out = x + gate[clip] * a  (out may alias x).
void gated_add_fwd(float* out, const float* x, const float* a, const float* mod, int64_t mod_stride,
                   int gate_off, const int32_t* clip, int64_t N, int C) {
  for (int64_t n = 0; n < N; ++n) {
    const float* g = mod + clip[n] * mod_stride + gate_off;
    const int64_t r = n * C;
    for (int c = 0; c < C; ++c) out[r + c] = x[r + c] + g[c] * a[r + c];
  }
}
// da = dout * gate (overwrites); dgate (in dmod) += sum over each clip's rows of dout * a.
void gated_add_bwd(float* da, float* dmod, const float* dout, const float* a, const float* mod,
                   int64_t mod_stride, int gate_off, const int32_t* clip, int64_t N, int C) {
  for (int64_t n = 0; n < N; ++n) {
    const float* g = mod + clip[n] * mod_stride + gate_off;
    float* dg = dmod + clip[n] * mod_stride + gate_off;
    const int64_t r = n * C;
    for (int c = 0; c < C; ++c) {
      dg[c] += dout[r + c] * a[r + c];
      da[r + c] = dout[r + c] * g[c];
    }
  }
}

}  // namespace

// Saved activations. xs[l] is the input of block l (xs[L] the input of the final layer).
struct Dit::Acts {
  std::vector<float> arena;
  // conditioning, (B, ...)
  float *tf, *t1, *t1s, *c, *sc;
  std::vector<float*> mod;  // (B, 6C) per layer
  float* fmod;              // (B, 2C)
  // h1, q, k, v, o, h2, f1, g in the model's dtype (one buffer each); the rest fp32.
  struct Layer {
    float *ln1, *mean1, *rstd1, *lse, *a, *xmid, *ln2, *mean2, *rstd2, *m;
    Act h1, q, k, v, o, h2, f1, g;
  };
  std::vector<float*> xs;
  std::vector<Layer> layers;
  float *lnf, *meanf, *rstdf, *hf, *out, *diff;
  // scratch for the backward
  float *dx, *dtmp, *dh, *dmid, *dq, *dk, *dv, *dqkv, *dbig, *dsc, *dmod, *ones, *zeros, *dw_sink,
      *db_sink, *qkv;
  // bf16 only: product outputs (forward) and output gradients (backward), input gradients, the
  // attention input gradients
  std::vector<bf16> arena16;
  bf16 *wide16, *x16, *y16, *dq16, *dk16, *dv16, *dqkv16;
};

Dit::Dit(const DitConfig& cfg, int batch, std::vector<int64_t> positions, AttentionOp& attention,
         Dtype dtype, int max_clips)
    : cfg_(cfg),
      B_(batch),
      T_(int(positions.size())),
      K_(batch),
      max_clips_(max_clips > 0 ? max_clips : batch),
      N_(int64_t(batch) * int64_t(positions.size())),
      positions_(std::move(positions)),
      attn_(attention),
      dtype_(dtype),
      num_params_(dit_num_params(cfg)),
      tensors_(dit_param_tensors(cfg)),
      params_(size_t(num_params_)),
      grads_(size_t(num_params_)),
      a_(std::make_unique<Acts>()) {
  cfg_.validate();
  WF_CHECK(B_ >= 1 && T_ >= 1 && max_clips_ >= B_,
           "DiT needs at least one clip and one token, and room for one clip per sequence");
  p_ = dit_param_view(cfg_, params_.data());
  g_ = dit_param_view(cfg_, grads_.data());
  // One clip per sequence: row n is token positions[n % T] of clip n / T.
  pos_rows_ = T_;
  pos_.resize(size_t(T_) * cfg_.dim);
  dit_pos_embedding(cfg_, positions_.data(), T_, pos_.data());
  clip_of_row_.resize(size_t(N_));
  for (int64_t n = 0; n < N_; ++n) clip_of_row_[size_t(n)] = int32_t(n / T_);

  const int64_t C = cfg_.dim, N = N_, B = B_, K = max_clips_, M = int64_t(cfg_.mlp_ratio) * C,
                PD = cfg_.patch_dim(), F = cfg_.freq_dim, L = cfg_.layers, H = cfg_.heads;
  Acts& a = *a_;
  const bool bf = dtype_ == Dtype::bf16;
  if (bf) params16_.assign(size_t(num_params_), bf16{});
  // First pass counts, second pass assigns.
  std::vector<std::pair<float**, int64_t>> plan;
  std::vector<std::pair<bf16**, int64_t>> plan16;
  auto want = [&](float** ptr, int64_t n) { plan.push_back({ptr, n}); };
  auto want16 = [&](bf16** ptr, int64_t n) { plan16.push_back({ptr, n}); };
  // An activation in the model's dtype.
  auto want_act = [&](Act* x, int64_t n) { bf ? want16(&x->b16, n) : want(&x->f32, n); };
  want(&a.tf, K * F);
  want(&a.t1, K * C);
  want(&a.t1s, K * C);
  want(&a.c, K * C);
  want(&a.sc, K * C);
  a.mod.resize(size_t(L));
  for (auto& m : a.mod) want(&m, K * 6 * C);
  want(&a.fmod, K * 2 * C);
  a.xs.resize(size_t(L + 1));
  for (auto& x : a.xs) want(&x, N * C);
  a.layers.resize(size_t(L));
  for (auto& l : a.layers) {
    want(&l.ln1, N * C);
    for (Act* x : {&l.h1, &l.q, &l.k, &l.v, &l.o}) want_act(x, N * C);
    for (float** p : {&l.a, &l.xmid, &l.ln2}) want(p, N * C);
    want_act(&l.h2, N * C);
    want(&l.m, N * C);
    for (float** p : {&l.mean1, &l.rstd1, &l.mean2, &l.rstd2}) want(p, N);
    want(&l.lse, B * H * T_);
    want_act(&l.f1, N * M);
    want_act(&l.g, N * M);
  }
  want(&a.lnf, N * C);
  want(&a.hf, N * C);
  want(&a.meanf, N);
  want(&a.rstdf, N);
  want(&a.out, N * PD);
  want(&a.diff, N * PD);
  for (float** p : {&a.dx, &a.dtmp, &a.dh, &a.dmid, &a.dq, &a.dk, &a.dv}) want(p, N * C);
  want(&a.dqkv, N * 3 * C);
  want(&a.qkv, N * 3 * C);
  want(&a.dbig, N * std::max(M, PD));
  want(&a.dsc, K * C);
  want(&a.dmod, K * 6 * C);
  want(&a.ones, C);
  want(&a.zeros, C);
  want(&a.dw_sink, C);
  want(&a.db_sink, C);
  if (bf) {
    want16(&a.wide16, N * std::max(3 * C, M));
    want16(&a.x16, N * 3 * C);
    want16(&a.y16, N * M);
    for (bf16** p : {&a.dq16, &a.dk16, &a.dv16}) want16(p, N * C);
    want16(&a.dqkv16, N * 3 * C);
  }
  int64_t total = 0, total16 = 0;
  for (auto& [ptr, n] : plan) total += n;
  for (auto& [ptr, n] : plan16) total16 += n;
  a.arena.assign(size_t(total), 0.0f);
  a.arena16.assign(size_t(total16), bf16{});
  int64_t off = 0;
  for (auto& [ptr, n] : plan) {
    *ptr = a.arena.data() + off;
    off += n;
  }
  off = 0;
  for (auto& [ptr, n] : plan16) {
    *ptr = a.arena16.data() + off;
    off += n;
  }
  act_floats_ = total + (total16 + 1) / 2;
  std::fill_n(a.ones, C, 1.0f);
}

Dit::~Dit() = default;

const float* Dit::output() const { return a_->out; }

void Dit::zero_grads() { std::fill(grads_.begin(), grads_.end(), 0.0f); }

void Dit::set_clips(int clips, std::vector<int32_t> clip_of_row,
                    const std::vector<int64_t>& clip_positions) {
  WF_CHECK(clips >= 1 && clips <= max_clips_, "set_clips: {} clips, room for 1..{}", clips,
           max_clips_);
  WF_CHECK(int64_t(clip_of_row.size()) == N_ && int64_t(clip_positions.size()) == N_,
           "set_clips: {} clip numbers and {} positions for {} rows", clip_of_row.size(),
           clip_positions.size(), N_);
  for (int32_t k : clip_of_row) WF_CHECK(k >= 0 && k < clips, "set_clips: clip {} of {}", k, clips);
  K_ = clips;
  clip_of_row_ = std::move(clip_of_row);
  pos_rows_ = N_;
  pos_.resize(size_t(N_) * cfg_.dim);
  dit_pos_embedding(cfg_, clip_positions.data(), int(N_), pos_.data());
}

void Dit::predict(const float* xt, const float* t, const int32_t* labels) {
  const int B = K_, C = cfg_.dim, PD = cfg_.patch_dim(), F = cfg_.freq_dim;
  const int64_t N = N_;
  const int32_t* clip = clip_of_row_.data();
  Acts& a = *a_;
  labels_ = labels;
  // Conditioning: c = t2(silu(t1(freq(t)))) + y_emb[label]   (B, C)
  dit_timestep_features(t, B, F, a.tf);
  k::matmul_fwd(a.t1, a.tf, p_.t1_w, p_.t1_b, B, F, C);
  silu_fwd(a.t1s, a.t1, int64_t(B) * C);
  k::matmul_fwd(a.c, a.t1s, p_.t2_w, p_.t2_b, B, C, C);
  if (cfg_.classes > 0) {
    WF_CHECK(labels != nullptr, "a class-conditional DiT needs labels");
    for (int b = 0; b < B; ++b) {
      WF_CHECK(labels[b] >= 0 && labels[b] < cfg_.classes, "label {} out of range [0, {})",
               labels[b], cfg_.classes);
      for (int c = 0; c < C; ++c) a.c[b * C + c] += p_.y_emb[int64_t(labels[b]) * C + c];
    }
  }
  silu_fwd(a.sc, a.c, int64_t(B) * C);
  for (int l = 0; l < cfg_.layers; ++l)
    k::matmul_fwd(a.mod[size_t(l)], a.sc, p_.layers[size_t(l)].ada_w, p_.layers[size_t(l)].ada_b, B,
                  C, 6 * C);
  k::matmul_fwd(a.fmod, a.sc, p_.final_ada_w, p_.final_ada_b, B, C, 2 * C);

  // Patch embedding plus positions: xs[0] (B, T, C)
  k::matmul_fwd(a.xs[0], xt, p_.patch_w, p_.patch_b, N, PD, C);
  for (int64_t n = 0; n < N; ++n)
    for (int c = 0; c < C; ++c) a.xs[0][n * C + c] += pos_[(n % pos_rows_) * C + c];

  if (dtype_ == Dtype::bf16) round_weights();
  for (int l = 0; l < cfg_.layers; ++l) {
    trace::Span layer("layer forward", trace::Cat::Phase, {{"layer", l}});
    block_forward(l);
  }
  // Final layer
  const float* xL = a.xs[size_t(cfg_.layers)];
  k::layernorm_fwd(a.lnf, a.meanf, a.rstdf, xL, a.ones, a.zeros, N, C);
  modulate_fwd(a.hf, a.lnf, a.fmod, 2 * C, 0, C, clip, N, C);
  k::matmul_fwd(a.out, a.hf, p_.out_w, p_.out_b, N, C, PD);  // (B, T, PD)
}

double Dit::forward(const float* xt, const float* t, const int32_t* labels, const float* target) {
  predict(xt, t, labels);
  Acts& a = *a_;
  const int64_t n = N_ * cfg_.patch_dim();
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) {
    a.diff[i] = a.out[i] - target[i];
    sum += double(a.diff[i]) * double(a.diff[i]);
  }
  xt_ = xt;
  return sum;
}

void Dit::backward(float dloss) {
  const int B = K_, C = cfg_.dim, PD = cfg_.patch_dim(), F = cfg_.freq_dim;
  const int64_t N = N_;
  const int32_t* clip = clip_of_row_.data();
  Acts& a = *a_;
  // d out = 2 dloss (out - target)
  float* dout = a.dbig;
  for (int64_t i = 0; i < N * PD; ++i) dout[i] = 2.0f * dloss * a.diff[i];
  std::fill_n(a.dsc, int64_t(B) * C, 0.0f);

  // Final layer
  k::matmul_bwd(a.dh, g_.out_w, g_.out_b, dout, a.hf, p_.out_w, N, C, PD, false);
  std::fill_n(a.dmod, int64_t(B) * 2 * C, 0.0f);
  modulate_bwd(a.dtmp, a.dmod, a.dh, a.lnf, a.fmod, 2 * C, 0, C, clip, N, C);
  std::fill_n(a.dx, N * C, 0.0f);
  k::layernorm_bwd(a.dx, a.dw_sink, a.db_sink, a.dtmp, a.xs[size_t(cfg_.layers)], a.ones, a.meanf,
                   a.rstdf, N, C);
  k::matmul_bwd(a.dsc, g_.final_ada_w, g_.final_ada_b, a.dmod, a.sc, p_.final_ada_w, B, C, 2 * C,
                true);

  for (int l = cfg_.layers - 1; l >= 0; --l) {
    trace::Span layer("layer backward", trace::Cat::Phase, {{"layer", l}});
    block_backward(l);
  }
  // Patch embedding (positions are fixed)
  k::matmul_bwd(nullptr, g_.patch_w, g_.patch_b, a.dx, xt_, p_.patch_w, N, PD, C, false);
  // Conditioning: dc = dsc * silu'(c)
  silu_bwd(a.dsc, a.c, a.dsc, int64_t(B) * C);
  if (cfg_.classes > 0)
    for (int b = 0; b < B; ++b)
      for (int c = 0; c < C; ++c) g_.y_emb[int64_t(labels_[b]) * C + c] += a.dsc[b * C + c];
  k::matmul_bwd(a.dh, g_.t2_w, g_.t2_b, a.dsc, a.t1s, p_.t2_w, B, C, C, false);  // d t1s
  silu_bwd(a.dh, a.t1, a.dh, int64_t(B) * C);
  k::matmul_bwd(nullptr, g_.t1_w, g_.t1_b, a.dh, a.tf, p_.t1_w, B, F, C, false);
}

void Dit::round_weights() {
  const int64_t C = cfg_.dim, M = int64_t(cfg_.mlp_ratio) * C;
  for (const auto& w : p_.layers) {
    for (const auto& [m, n] : {std::pair<const float*, int64_t>{w.qkv_w, 3 * C * C},
                               {w.proj_w, C * C},
                               {w.fc1_w, M * C},
                               {w.fc2_w, C * M}})
      round_to_bf16(m, params16_.data() + (m - params_.data()), n);
  }
}

// The q, k, v rows (N, C each) from the qkv rows (N, 3C), and back.
template <typename T>
void split_qkv_rows(T* q, T* k, T* v, const T* qkv, int64_t N, int C) {
  for (int64_t n = 0; n < N; ++n) {
    std::memcpy(q + n * C, qkv + n * 3 * C, sizeof(T) * size_t(C));
    std::memcpy(k + n * C, qkv + n * 3 * C + C, sizeof(T) * size_t(C));
    std::memcpy(v + n * C, qkv + n * 3 * C + 2 * C, sizeof(T) * size_t(C));
  }
}
template <typename T>
void merge_qkv_rows(T* qkv, const T* q, const T* k, const T* v, int64_t N, int C) {
  for (int64_t n = 0; n < N; ++n) {
    std::memcpy(qkv + n * 3 * C, q + n * C, sizeof(T) * size_t(C));
    std::memcpy(qkv + n * 3 * C + C, k + n * C, sizeof(T) * size_t(C));
    std::memcpy(qkv + n * 3 * C + 2 * C, v + n * C, sizeof(T) * size_t(C));
  }
}

// Block l of predict: xs[l] -> xs[l + 1]. The products, GELU, q, k, v, o and the products' inputs
// are in the model's dtype (bf16: the modulated layernorm outputs rounded, the branch outputs a and
// m widened to fp32); the rest is fp32.
void Dit::block_forward(int l) {
  const int C = cfg_.dim, M = cfg_.mlp_ratio * C;
  const int64_t N = N_, ms = 6 * C;
  const int32_t* clip = clip_of_row_.data();
  const bool bf = dtype_ == Dtype::bf16;
  Acts& a = *a_;
  const auto& w = p_.layers[size_t(l)];
  auto& s = a.layers[size_t(l)];
  const float* mod = a.mod[size_t(l)];
  std::optional<trace::Span> dense(std::in_place, "dense", trace::Cat::Compute,
                                   std::initializer_list<trace::Arg>{{"layer", l}});
  // attention branch
  k::layernorm_fwd(s.ln1, s.mean1, s.rstd1, a.xs[size_t(l)], a.ones, a.zeros, N, C);
  modulate_fwd(bf ? a.dtmp : s.h1.f32, s.ln1, mod, ms, 0, C, clip, N, C);
  if (bf) round_to_bf16(a.dtmp, s.h1.b16, N * C);
  dense_fwd(pick(bf, a.qkv, a.wide16), s.h1, w.qkv_w, weight16(w.qkv_w), w.qkv_b, N, C, 3 * C);
  if (bf) {
    split_qkv_rows(s.q.b16, s.k.b16, s.v.b16, a.wide16, N, C);
  } else {
    split_qkv_rows(s.q.f32, s.k.f32, s.v.f32, a.qkv, N, C);
  }
  dense.reset();
  attn_.forward(s.q, s.k, s.v, s.o, s.lse);  // (B, T, H, D) each
  dense.emplace("dense", trace::Cat::Compute, std::initializer_list<trace::Arg>{{"layer", l}});
  dense_fwd(pick(bf, s.a, a.wide16), s.o, w.proj_w, weight16(w.proj_w), w.proj_b, N, C, C);
  if (bf) widen_to_fp32(a.wide16, s.a, N * C);
  gated_add_fwd(s.xmid, a.xs[size_t(l)], s.a, mod, ms, 2 * C, clip, N, C);
  // MLP branch
  k::layernorm_fwd(s.ln2, s.mean2, s.rstd2, s.xmid, a.ones, a.zeros, N, C);
  modulate_fwd(bf ? a.dtmp : s.h2.f32, s.ln2, mod, ms, 3 * C, 4 * C, clip, N, C);
  if (bf) round_to_bf16(a.dtmp, s.h2.b16, N * C);
  dense_fwd(s.f1, s.h2, w.fc1_w, weight16(w.fc1_w), w.fc1_b, N, C, M);
  gelu_fwd(s.g, s.f1, N * M);
  dense_fwd(pick(bf, s.m, a.wide16), s.g, w.fc2_w, weight16(w.fc2_w), w.fc2_b, N, M, C);
  if (bf) widen_to_fp32(a.wide16, s.m, N * C);
  gated_add_fwd(a.xs[size_t(l) + 1], s.xmid, s.m, mod, ms, 5 * C, clip, N, C);
}

// Block l of backward: a.dx holds the gradient of the block output on entry and of its input on
// return. Output gradients enter the products in the model's dtype; the gradients of the products'
// inputs are widened to fp32 for the modulation and layernorm backward.
void Dit::block_backward(int l) {
  const int B = K_, C = cfg_.dim, M = cfg_.mlp_ratio * C;
  const int64_t N = N_, ms = 6 * C;
  const int32_t* clip = clip_of_row_.data();
  const bool bf = dtype_ == Dtype::bf16;
  Acts& a = *a_;
  const auto& w = p_.layers[size_t(l)];
  auto& gw = g_.layers[size_t(l)];
  auto& s = a.layers[size_t(l)];
  const float* mod = a.mod[size_t(l)];
  const Act dbig = pick(bf, a.dbig, a.y16), dh = pick(bf, a.dh, a.x16);
  std::optional<trace::Span> dense(std::in_place, "dense", trace::Cat::Compute,
                                   std::initializer_list<trace::Arg>{{"layer", l}});
  std::fill_n(a.dmod, int64_t(B) * 6 * C, 0.0f);
  // MLP branch: dx is the gradient of the block output
  gated_add_bwd(a.dh, a.dmod, a.dx, s.m, mod, ms, 5 * C, clip, N, C);  // dh = d m
  dense_bwd(dbig, gw.fc2_w, gw.fc2_b, in_dtype(bf, a.dh, a.x16, N * C), s.g, w.fc2_w,
            weight16(w.fc2_w), N, M, C);
  gelu_bwd(dbig, s.f1, dbig, N * M);
  dense_bwd(dh, gw.fc1_w, gw.fc1_b, dbig, s.h2, w.fc1_w, weight16(w.fc1_w), N, C, M);  // d h2
  modulate_bwd(a.dtmp, a.dmod, as_fp32(dh, a.dh, N * C), s.ln2, mod, ms, 3 * C, 4 * C, clip, N, C);
  // d xmid = dx (residual) + layernorm backward
  k::layernorm_bwd(a.dx, a.dw_sink, a.db_sink, a.dtmp, s.xmid, a.ones, s.mean2, s.rstd2, N, C);
  // attention branch
  gated_add_bwd(a.dh, a.dmod, a.dx, s.a, mod, ms, 2 * C, clip, N, C);  // dh = d a
  const Act dmid = pick(bf, a.dmid, a.y16);
  dense_bwd(dmid, gw.proj_w, gw.proj_b, in_dtype(bf, a.dh, a.x16, N * C), s.o, w.proj_w,
            weight16(w.proj_w), N, C, C);  // d o
  dense.reset();
  attn_.backward(s.q, s.k, s.v, s.o, s.lse, dmid, pick(bf, a.dq, a.dq16), pick(bf, a.dk, a.dk16),
                 pick(bf, a.dv, a.dv16));
  dense.emplace("dense", trace::Cat::Compute, std::initializer_list<trace::Arg>{{"layer", l}});
  if (bf) {
    merge_qkv_rows(a.dqkv16, a.dq16, a.dk16, a.dv16, N, C);
  } else {
    merge_qkv_rows(a.dqkv, a.dq, a.dk, a.dv, N, C);
  }
  dense_bwd(dh, gw.qkv_w, gw.qkv_b, pick(bf, a.dqkv, a.dqkv16), s.h1, w.qkv_w, weight16(w.qkv_w), N,
            C, 3 * C);  // d h1
  modulate_bwd(a.dtmp, a.dmod, as_fp32(dh, a.dh, N * C), s.ln1, mod, ms, 0, C, clip, N, C);
  k::layernorm_bwd(a.dx, a.dw_sink, a.db_sink, a.dtmp, a.xs[size_t(l)], a.ones, s.mean1, s.rstd1, N,
                   C);
  k::matmul_bwd(a.dsc, gw.ada_w, gw.ada_b, a.dmod, a.sc, w.ada_w, B, C, 6 * C, true);
}

}  // namespace wallfacer::model
