// model.arch = "llama": the model against an independent fp64 model written in transformers'
// layout and rotary convention (rotate_half), its weights imported through model/hf_layout.h:
// logits, loss and every parameter's gradient (central differences of the fp64 model); bf16
// against fp32. (The KV-cache decoder: GptDecoder.MatchesFullForward.)
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <numeric>
#include <random>
#include <vector>

#include "wallfacer/core/error.h"
#include "wallfacer/kernels/llama_ops.h"
#include "wallfacer/kernels/ops.h"
#include "wallfacer/kernels/reference/ops_ref.h"
#include "wallfacer/model/gpt.h"
#include "wallfacer/model/hf_layout.h"
#include "wallfacer/model/local_attention.h"

namespace wallfacer::model {
namespace {

using Vec = std::vector<double>;

GptConfig tiny_llama() {
  GptConfig c;
  c.arch = Arch::Llama;
  c.vocab = 37;
  c.layers = 2;
  c.dim = 32;
  c.heads = 4;
  c.kv_heads = 2;
  c.intermediate = 48;
  c.norm_eps = 1e-6;
  c.tie_embeddings = false;
  c.qkv_bias = true;
  c.rope_theta = 100.0;
  c.rope_scaling.type = kernels::RopeScalingType::Llama3;
  c.rope_scaling.factor = 4.0;
  c.rope_scaling.low_freq_factor = 1.0;
  c.rope_scaling.high_freq_factor = 4.0;
  c.rope_scaling.original_max_position_embeddings = 32;
  c.window = 5;
  c.window_layers = {1};
  return c;
}

// The Hugging Face tensors of cfg laid end to end in hf_tensors order.
struct HfFlat {
  std::vector<HfTensor> t;
  std::vector<int64_t> off;
  int64_t size = 0;
  explicit HfFlat(const GptConfig& cfg) : t(hf_tensors(cfg)) {
    for (const auto& x : t) {
      off.push_back(size);
      size += std::accumulate(x.shape.begin(), x.shape.end(), int64_t(1), std::multiplies<>());
    }
  }
  const double* at(const Vec& p, const std::string& name) const {
    for (size_t i = 0; i < t.size(); ++i)
      if (t[i].hf_name == name) return p.data() + off[i];
    ADD_FAILURE() << "no tensor " << name;
    return nullptr;
  }
};

// y (rows, OC) = x (rows, IC) @ w^T + b
Vec linear(const Vec& x, const double* w, const double* b, int rows, int IC, int OC) {
  Vec y(static_cast<size_t>(rows) * OC);
  for (int r = 0; r < rows; ++r)
    for (int o = 0; o < OC; ++o) {
      double s = b ? b[o] : 0.0;
      for (int i = 0; i < IC; ++i) s += x[size_t(r) * IC + i] * w[size_t(o) * IC + i];
      y[size_t(r) * OC + o] = s;
    }
  return y;
}

Vec rms(const Vec& x, const double* w, int rows, int C, double eps) {
  Vec y(x.size());
  for (int r = 0; r < rows; ++r) {
    double ms = 0;
    for (int c = 0; c < C; ++c) ms += x[size_t(r) * C + c] * x[size_t(r) * C + c];
    const double inv = 1.0 / std::sqrt(ms / C + eps);
    for (int c = 0; c < C; ++c) y[size_t(r) * C + c] = w[c] * (x[size_t(r) * C + c] * inv);
  }
  return y;
}

// transformers' rotation of one head's vector: out = x cos + rotate_half(x) sin,
// rotate_half(x) = (-x[D/2:], x[:D/2]).
void rotate_half_rope(double* x, int D, int64_t pos, const Vec& inv_freq) {
  Vec y(static_cast<size_t>(D));
  for (int j = 0; j < D; ++j) {
    const double a = double(pos) * inv_freq[size_t(j % (D / 2))];
    const double rot = j < D / 2 ? -x[j + D / 2] : x[j - D / 2];
    y[size_t(j)] = x[j] * std::cos(a) + rot * std::sin(a);
  }
  std::copy(y.begin(), y.end(), x);
}

// The summed next-token loss of B sequences of T tokens (logits out if set), in fp64.
double reference_loss(const GptConfig& cfg, const HfFlat& f, const Vec& p,
                      const std::vector<int32_t>& tokens, const std::vector<int32_t>& targets,
                      int B, int T, Vec* logits_out = nullptr) {
  const int C = cfg.dim, H = cfg.heads, Hkv = cfg.kv_heads, D = cfg.head_dim(),
            M = cfg.mlp_hidden(), V = cfg.vocab;
  const auto& rs = cfg.rope_scaling;
  const Vec inv_freq = kernels::ref::rope_inv_freq(
      D, cfg.rope_theta, rs.type == kernels::RopeScalingType::Llama3 ? 2 : int(rs.type), rs.factor,
      rs.low_freq_factor, rs.high_freq_factor, double(rs.original_max_position_embeddings));
  double total = 0;
  for (int b = 0; b < B; ++b) {
    Vec x(static_cast<size_t>(T) * C);
    const double* emb = f.at(p, "model.embed_tokens.weight");
    for (int t = 0; t < T; ++t)
      for (int c = 0; c < C; ++c)
        x[size_t(t) * C + c] = emb[size_t(tokens[size_t(b * T + t)]) * C + c];
    for (int l = 0; l < cfg.layers; ++l) {
      const std::string pre = "model.layers." + std::to_string(l) + ".";
      auto w = [&](const std::string& n) { return f.at(p, pre + n); };
      auto bias = [&](const std::string& n) {
        return cfg.qkv_bias ? f.at(p, pre + "self_attn." + n + ".bias") : nullptr;
      };
      const Vec h = rms(x, w("input_layernorm.weight"), T, C, cfg.norm_eps);
      Vec q = linear(h, w("self_attn.q_proj.weight"), bias("q_proj"), T, C, H * D);
      Vec k = linear(h, w("self_attn.k_proj.weight"), bias("k_proj"), T, C, Hkv * D);
      const Vec v = linear(h, w("self_attn.v_proj.weight"), bias("v_proj"), T, C, Hkv * D);
      for (int t = 0; t < T; ++t) {
        for (int hh = 0; hh < H; ++hh) rotate_half_rope(&q[size_t(t * H + hh) * D], D, t, inv_freq);
        for (int hh = 0; hh < Hkv; ++hh)
          rotate_half_rope(&k[size_t(t * Hkv + hh) * D], D, t, inv_freq);
      }
      const int64_t W = cfg.layer_window(l);
      Vec o(static_cast<size_t>(T) * H * D, 0.0);
      for (int hh = 0; hh < H; ++hh) {
        const int kh = hh / (H / Hkv);
        for (int i = 0; i < T; ++i) {
          Vec s;
          std::vector<int> js;
          for (int j = 0; j <= i; ++j) {
            if (W > 0 && !(j > i - W)) continue;  // keys i - W < j <= i
            double d = 0;
            for (int e = 0; e < D; ++e)
              d += q[size_t(i * H + hh) * D + e] * k[size_t(j * Hkv + kh) * D + e];
            s.push_back(d / std::sqrt(double(D)));
            js.push_back(j);
          }
          const double mx = *std::max_element(s.begin(), s.end());
          double z = 0;
          for (double& e : s) z += e = std::exp(e - mx);
          for (size_t n = 0; n < js.size(); ++n)
            for (int e = 0; e < D; ++e)
              o[size_t(i * H + hh) * D + e] += s[n] / z * v[size_t(js[n] * Hkv + kh) * D + e];
        }
      }
      const Vec a = linear(o, w("self_attn.o_proj.weight"), nullptr, T, H * D, C);
      for (size_t i = 0; i < x.size(); ++i) x[i] += a[i];
      const Vec h2 = rms(x, w("post_attention_layernorm.weight"), T, C, cfg.norm_eps);
      const Vec g = linear(h2, w("mlp.gate_proj.weight"), nullptr, T, C, M);
      const Vec u = linear(h2, w("mlp.up_proj.weight"), nullptr, T, C, M);
      Vec act(g.size());
      for (size_t i = 0; i < g.size(); ++i) act[i] = g[i] / (1 + std::exp(-g[i])) * u[i];
      const Vec d = linear(act, w("mlp.down_proj.weight"), nullptr, T, M, C);
      for (size_t i = 0; i < x.size(); ++i) x[i] += d[i];
    }
    const Vec hf = rms(x, f.at(p, "model.norm.weight"), T, C, cfg.norm_eps);
    const double* head =
        cfg.tie_embeddings ? f.at(p, "model.embed_tokens.weight") : f.at(p, "lm_head.weight");
    const Vec lg = linear(hf, head, nullptr, T, C, V);
    for (int t = 0; t < T; ++t) {
      double mx = -1e300, z = 0;
      for (int vv = 0; vv < V; ++vv) mx = std::max(mx, lg[size_t(t) * V + vv]);
      for (int vv = 0; vv < V; ++vv) z += std::exp(lg[size_t(t) * V + vv] - mx);
      total += std::log(z) + mx - lg[size_t(t) * V + size_t(targets[size_t(b * T + t)])];
    }
    if (logits_out) logits_out->insert(logits_out->end(), lg.begin(), lg.end());
  }
  return total;
}

// Random Hugging Face weights: norms near 1, matrices N(0, 0.25^2), biases N(0, 0.1^2).
Vec random_hf(const HfFlat& f, uint32_t seed) {
  std::mt19937 g(seed);
  std::normal_distribution<double> n(0.0, 1.0);
  Vec p(size_t(f.size));
  for (size_t i = 0; i < f.t.size(); ++i) {
    const std::string& name = f.t[i].hf_name;
    const bool norm = name.find("norm") != std::string::npos, bias = name.ends_with(".bias");
    const int64_t sz = (i + 1 < f.t.size() ? f.off[i + 1] : f.size) - f.off[i];
    for (int64_t j = 0; j < sz; ++j)
      p[size_t(f.off[i] + j)] = norm ? 1.0 + 0.1 * n(g) : (bias ? 0.1 : 0.25) * n(g);
  }
  return p;
}

// Our arena from the Hugging Face tensors (through hf_import).
void import_all(const GptConfig& cfg, const HfFlat& f, const Vec& p, float* arena) {
  const auto tensors = gpt_param_tensors(cfg);
  for (size_t i = 0; i < f.t.size(); ++i) {
    const int64_t sz = (i + 1 < f.t.size() ? f.off[i + 1] : f.size) - f.off[i];
    std::vector<float> hf(static_cast<size_t>(sz));
    for (int64_t j = 0; j < sz; ++j) hf[size_t(j)] = float(p[size_t(f.off[i] + j)]);
    int64_t offset = -1;
    for (const auto& t : tensors)
      if (t.name == f.t[i].tensor) offset = t.offset;
    ASSERT_GE(offset, 0) << f.t[i].tensor;
    hf_import(f.t[i], hf.data(), arena + offset);
  }
}

// Our arena's values (grads) in the Hugging Face layout (through hf_export).
Vec export_all(const GptConfig& cfg, const HfFlat& f, const float* arena) {
  Vec out(size_t(f.size));
  const auto tensors = gpt_param_tensors(cfg);
  for (size_t i = 0; i < f.t.size(); ++i) {
    const int64_t sz = (i + 1 < f.t.size() ? f.off[i + 1] : f.size) - f.off[i];
    std::vector<float> hf(static_cast<size_t>(sz));
    for (const auto& t : tensors)
      if (t.name == f.t[i].tensor) hf_export(f.t[i], arena + t.offset, hf.data());
    for (int64_t j = 0; j < sz; ++j) out[size_t(f.off[i] + j)] = hf[size_t(j)];
  }
  return out;
}

TEST(LlamaLayout, RopePermutationMakesTheRotationsAgree) {
  // q . k of two heads rotated transformers' way at positions 7 and 3 equals the dot product of
  // the permuted rows rotated by our kernel.
  const int D = 16;
  const std::vector<int> perm = rope_row_permutation(D);
  std::mt19937 g(3);
  std::normal_distribution<double> n(0.0, 1.0);
  std::vector<double> q(D), k(D);
  for (int i = 0; i < D; ++i) q[size_t(i)] = n(g), k[size_t(i)] = n(g);
  kernels::RopeScaling s;
  s.type = kernels::RopeScalingType::Linear;
  s.factor = 2.0;
  const std::vector<double> inv = kernels::rope_inv_freq(D, 500.0, s);
  std::vector<double> qh = q, kh = k;
  rotate_half_rope(qh.data(), D, 7, inv);
  rotate_half_rope(kh.data(), D, 3, inv);
  std::vector<float> qo(D), ko(D), qr(D), kr(D);
  for (int r = 0; r < D; ++r) qo[size_t(r)] = float(q[size_t(perm[size_t(r)])]);
  for (int r = 0; r < D; ++r) ko[size_t(r)] = float(k[size_t(perm[size_t(r)])]);
  const int64_t pos[2] = {7, 3};
  std::vector<float> cs(D), sn(D);
  kernels::rope_tables_freq(pos, 2, D, inv.data(), cs.data(), sn.data());
  kernels::rope_fwd(qr.data(), qo.data(), D, cs.data(), sn.data(), 1, 1, 1, D);
  kernels::rope_fwd(kr.data(), ko.data(), D, cs.data() + D / 2, sn.data() + D / 2, 1, 1, 1, D);
  double want = 0, got = 0;
  for (int i = 0; i < D; ++i) want += qh[size_t(i)] * kh[size_t(i)];
  for (int i = 0; i < D; ++i) got += double(qr[size_t(i)]) * kr[size_t(i)];
  EXPECT_NEAR(got, want, 1e-5 * std::abs(want) + 1e-6);
  // Each rotated value is the permuted transformers' value.
  for (int r = 0; r < D; ++r) EXPECT_NEAR(qr[size_t(r)], qh[size_t(perm[size_t(r)])], 1e-5);
}

TEST(LlamaLayout, HfTensorsCoverTheArenaOnceAndRoundTrip) {
  for (const bool tie : {false, true}) {
    for (const bool bias : {false, true}) {
      GptConfig cfg = tiny_llama();
      cfg.tie_embeddings = tie;
      cfg.qkv_bias = bias;
      const HfFlat f(cfg);
      EXPECT_EQ(f.size, gpt_num_params(cfg));
      int64_t total = 0;
      for (const auto& t : gpt_param_tensors(cfg)) total += t.size;
      EXPECT_EQ(total, gpt_num_params(cfg));
      // Every arena value is written exactly once by the import.
      std::vector<float> arena(size_t(gpt_num_params(cfg)), -1.0f);
      Vec p(size_t(f.size));
      std::iota(p.begin(), p.end(), 0.0);
      import_all(cfg, f, p, arena.data());
      std::vector<float> sorted(arena);
      std::sort(sorted.begin(), sorted.end());
      for (size_t i = 0; i < sorted.size(); ++i) ASSERT_EQ(sorted[i], float(i));
      EXPECT_EQ(export_all(cfg, f, arena.data()), p);
    }
  }
}

TEST(LlamaModel, MatchesAnFp64ModelInTransformersLayout) {
  const GptConfig cfg = tiny_llama();
  const int B = 2, T = 12;
  const HfFlat f(cfg);
  const Vec p = random_hf(f, 11);
  std::vector<int32_t> tokens(size_t(B * T)), targets(tokens.size());
  for (int i = 0; i < B * T; ++i) {
    tokens[size_t(i)] = (i * 13 + 5) % cfg.vocab;
    targets[size_t(i)] = (i * 7 + 3) % cfg.vocab;
  }
  Vec want_logits;
  const double want = reference_loss(cfg, f, p, tokens, targets, B, T, &want_logits);

  std::vector<int64_t> pos(static_cast<size_t>(T));
  std::iota(pos.begin(), pos.end(), 0);
  Vec grads_none;
  for (const Checkpointing ck : {Checkpointing::None, Checkpointing::Attention}) {
    LocalAttention attn(B, T, cfg.heads, cfg.kv_heads, cfg.head_dim());
    Gpt model(cfg, B, pos, ck, attn);
    import_all(cfg, f, p, model.params());
    const double got = model.forward(tokens.data(), targets.data());
    EXPECT_NEAR(got, want, 1e-5 * std::abs(want));
    double worst = 0, scale = 0;
    for (size_t i = 0; i < want_logits.size(); ++i) {
      worst = std::max(worst, std::abs(double(model.logits()[i]) - want_logits[i]));
      scale = std::max(scale, std::abs(want_logits[i]));
    }
    EXPECT_LE(worst, 1e-5 * scale) << "logits: " << worst << " of " << scale;
    std::printf("checkpointing %s: loss %.9g against %.9g, largest logit error %.2e of %.2e\n",
                std::string(checkpointing_name(ck)).c_str(), got, want, worst, scale);
    model.zero_grads();
    model.backward(1.0f);
    const Vec g = export_all(cfg, f, model.grads());
    if (ck == Checkpointing::None) {
      grads_none = g;
    } else {
      EXPECT_EQ(g, grads_none) << "checkpointing changed the gradients";
      continue;
    }
    // Central differences of the fp64 model for a spread of parameters, every tensor included.
    double gmax = 0;
    for (double v : g) gmax = std::max(gmax, std::abs(v));
    double err = 0;
    int checked = 0;
    for (size_t i = 0; i < f.t.size(); ++i) {
      const int64_t sz = (i + 1 < f.t.size() ? f.off[i + 1] : f.size) - f.off[i];
      for (int64_t j = 0; j < sz; j += std::max<int64_t>(1, sz / 9)) {
        const size_t at = size_t(f.off[i] + j);
        Vec pp = p, pm = p;
        const double h = 1e-5;
        pp[at] += h;
        pm[at] -= h;
        const double fd = (reference_loss(cfg, f, pp, tokens, targets, B, T) -
                           reference_loss(cfg, f, pm, tokens, targets, B, T)) /
                          (2 * h);
        err = std::max(err, std::abs(fd - g[at]));
        ++checked;
      }
    }
    EXPECT_GT(checked, 150);
    EXPECT_LE(err, 1e-4 * gmax) << "gradient error " << err << " of " << gmax;
    std::printf("%d gradients against central differences: largest error %.2e of %.2e\n", checked,
                err, gmax);
  }
}

TEST(LlamaModel, Bf16WithinBoundsOfFp32) {
  const GptConfig cfg = tiny_llama();
  const int B = 1, T = 12;
  const HfFlat f(cfg);
  const Vec p = random_hf(f, 12);
  std::vector<int32_t> tokens(static_cast<size_t>(T)), targets(static_cast<size_t>(T));
  for (int i = 0; i < T; ++i) tokens[size_t(i)] = (i * 5 + 1) % cfg.vocab, targets[size_t(i)] = i;
  std::vector<int64_t> pos(static_cast<size_t>(T));
  std::iota(pos.begin(), pos.end(), 0);
  LocalAttention a32(B, T, cfg.heads, cfg.kv_heads, cfg.head_dim()),
      a16(B, T, cfg.heads, cfg.kv_heads, cfg.head_dim());
  Gpt m32(cfg, B, pos, Checkpointing::None, a32),
      m16(cfg, B, pos, Checkpointing::None, a16, Dtype::bf16);
  import_all(cfg, f, p, m32.params());
  import_all(cfg, f, p, m16.params());
  const double l32 = m32.forward(tokens.data(), targets.data());
  const double l16 = m16.forward(tokens.data(), targets.data());
  EXPECT_NEAR(l16, l32, 0.02 * std::abs(l32));
  m32.zero_grads();
  m16.zero_grads();
  m32.backward(1.0f);
  m16.backward(1.0f);
  double gmax = 0, err = 0;
  for (int64_t i = 0; i < m32.num_params(); ++i) {
    gmax = std::max(gmax, double(std::abs(m32.grads()[i])));
    err = std::max(err, double(std::abs(m32.grads()[i] - m16.grads()[i])));
  }
  EXPECT_LE(err, 0.1 * gmax) << err << " of " << gmax;
  std::printf("bf16: loss %.6g against %.6g, largest gradient error %.2e of %.2e\n", l16, l32, err,
              gmax);
}

TEST(LlamaModel, ConfigErrorsAreUsageErrors) {
  GptConfig c = tiny_llama();
  c.norm_eps = 0;
  EXPECT_THROW(c.validate(), UsageError);
  c = tiny_llama();
  c.rope_scaling.low_freq_factor = 4.0;  // not below high_freq_factor
  EXPECT_THROW(c.validate(), UsageError);
  c = tiny_llama();
  c.intermediate = -1;
  EXPECT_THROW(c.validate(), UsageError);
  GptConfig g;
  g.norm_eps = 1e-6;  // the GPT's layernorm has eps 1e-5
  EXPECT_THROW(g.validate(), UsageError);
  EXPECT_THROW(parse_arch("mamba"), UsageError);
}

}  // namespace
}  // namespace wallfacer::model
