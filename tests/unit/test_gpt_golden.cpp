// The GPT model against a fixture computed independently in PyTorch (float64) by
// tests/golden/gen_gpt_golden.py: logits, loss, every parameter gradient and the losses of three
// AdamW steps, with and without activation checkpointing.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <numeric>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "golden_fixture.h"
#include "wallfacer/core/error.h"
#include "wallfacer/model/gpt.h"
#include "wallfacer/model/local_attention.h"
#include "wallfacer/model/sampler.h"
#include "wallfacer/train/optimizer.h"

namespace wallfacer::model {
namespace {

using Golden = ::wallfacer::golden::GoldenFixture;

Golden load_golden() { return ::wallfacer::golden::load_golden_fixture("gpt_golden"); }
// |got - want| <= atol + rtol * max|want| over the tensor.
void expect_tensor_close(const float* got, const std::vector<double>& want, double rtol,
                         const std::string& what) {
  double scale = 0;
  for (double w : want) scale = std::max(scale, std::abs(w));
  double worst = 0;
  for (size_t i = 0; i < want.size(); ++i) worst = std::max(worst, std::abs(got[i] - want[i]));
  EXPECT_LE(worst, 1e-6 + rtol * scale) << what << ": max error " << worst << ", scale " << scale;
}

GptConfig fixture_config(const Golden& g) {
  const auto& c = g.meta["config"];
  GptConfig cfg;
  cfg.vocab = c["vocab"];
  cfg.layers = c["layers"];
  cfg.dim = c["dim"];
  cfg.heads = c["heads"];
  cfg.kv_heads = c["kv_heads"];
  cfg.mlp_ratio = c["mlp_ratio"];
  cfg.rope_theta = c["rope_theta"];
  return cfg;
}

train::AdamWConfig fixture_adamw(const Golden& g) {
  const auto& c = g.meta["config"];
  train::AdamWConfig oc;
  oc.beta1 = c["beta1"];
  oc.beta2 = c["beta2"];
  oc.eps = c["eps"];
  oc.weight_decay = c["weight_decay"];
  return oc;
}

class GptGolden : public ::testing::TestWithParam<Checkpointing> {};

TEST_P(GptGolden, MatchesPyTorch) {
  const Golden g = load_golden();
  const auto& c = g.meta["config"];
  const GptConfig cfg = fixture_config(g);
  const int B = c["batch"], T = c["seq"];
  ASSERT_LT(cfg.kv_heads, cfg.heads) << "the fixture should exercise GQA";

  LocalAttention attn(B, T, cfg.heads, cfg.kv_heads, cfg.head_dim());
  std::vector<int64_t> pos(static_cast<size_t>(T));
  std::iota(pos.begin(), pos.end(), 0);
  Gpt model(cfg, B, pos, GetParam(), attn);
  ASSERT_EQ(model.num_params(), gpt_num_params(cfg));
  int64_t total = 0;
  for (const auto& t : model.tensors()) {
    const auto& w = g.arrays.at(t.name);
    ASSERT_EQ(int64_t(w.size()), t.size) << t.name;
    for (int64_t i = 0; i < t.size; ++i) model.params()[t.offset + i] = float(w[size_t(i)]);
    total += t.size;
  }
  ASSERT_EQ(total, model.num_params());

  std::vector<int32_t> tokens, targets;
  for (double x : g.arrays.at("tokens")) tokens.push_back(int32_t(x));
  for (double x : g.arrays.at("targets")) targets.push_back(int32_t(x));
  const double N = double(B) * T;

  const double loss = model.forward(tokens.data(), targets.data()) / N;
  EXPECT_NEAR(loss, g.arrays.at("loss")[0], 1e-5);
  expect_tensor_close(model.logits(), g.arrays.at("logits"), 1e-5, "logits");
  model.zero_grads();
  model.backward(float(1.0 / N));
  for (const auto& t : model.tensors()) {
    expect_tensor_close(model.grads() + t.offset, g.arrays.at("grad." + t.name), 1e-4,
                        "grad " + t.name);
  }

  train::AdamW opt(model.tensors(), model.num_params(), fixture_adamw(g));
  const auto& want = g.meta["adam_losses"];
  for (size_t s = 0; s < want.size(); ++s) {
    const double l = model.forward(tokens.data(), targets.data()) / N;
    EXPECT_NEAR(l, want[s].get<double>(), 2e-5) << "AdamW step " << s + 1;
    model.zero_grads();
    model.backward(float(1.0 / N));
    opt.update(model.params(), model.grads(), float(c["lr"].get<double>()));
  }
}

INSTANTIATE_TEST_SUITE_P(Checkpointing, GptGolden,
                         ::testing::Values(Checkpointing::None, Checkpointing::Attention),
                         [](const auto& p) {
                           return p.param == Checkpointing::None ? "none" : "attention";
                         });

// The bf16 dense layers against the same float64 fixture, with the looser bounds of bf16 (unit
// roundoff 2^-8): every parameter gradient within 3% of its tensor's largest value, the loss and
// the three AdamW losses within 0.5% (measured on both paths: gradients 1.7%, loss 0.005%).
// Checkpointing does not change a bit.
TEST(GptBf16, MatchesPyTorchWithinBf16Bounds) {
  const Golden g = load_golden();
  const auto& c = g.meta["config"];
  const GptConfig cfg = fixture_config(g);
  const int B = c["batch"], T = c["seq"];
  std::vector<int64_t> pos(static_cast<size_t>(T));
  std::iota(pos.begin(), pos.end(), 0);
  std::vector<int32_t> tokens, targets;
  for (double x : g.arrays.at("tokens")) tokens.push_back(int32_t(x));
  for (double x : g.arrays.at("targets")) targets.push_back(int32_t(x));
  const double N = double(B) * T;

  std::vector<std::vector<float>> grads;
  for (Checkpointing ckpt : {Checkpointing::None, Checkpointing::Attention}) {
    LocalAttention attn(B, T, cfg.heads, cfg.kv_heads, cfg.head_dim());
    Gpt model(cfg, B, pos, ckpt, attn, Dtype::bf16);
    ASSERT_EQ(model.dtype(), Dtype::bf16);
    for (const auto& t : model.tensors()) {
      const auto& w = g.arrays.at(t.name);
      for (int64_t i = 0; i < t.size; ++i) model.params()[t.offset + i] = float(w[size_t(i)]);
    }
    const double loss = model.forward(tokens.data(), targets.data()) / N;
    const double want_loss = g.arrays.at("loss")[0];
    EXPECT_LE(std::abs(loss - want_loss), 5e-3 * want_loss) << "loss " << loss;
    model.zero_grads();
    model.backward(float(1.0 / N));
    double worst_rel = 0;
    for (const auto& t : model.tensors()) {
      const auto& want = g.arrays.at("grad." + t.name);
      double scale = 0, worst = 0;
      for (double w : want) scale = std::max(scale, std::abs(w));
      for (size_t i = 0; i < want.size(); ++i)
        worst = std::max(worst, std::abs(model.grads()[t.offset + int64_t(i)] - want[i]));
      EXPECT_LE(worst, 1e-6 + 3e-2 * scale) << "grad " << t.name << ": max error " << worst;
      worst_rel = std::max(worst_rel, worst / scale);
    }
    std::printf("bf16 (%s): loss relative error %.2e, largest gradient error %.2e of the scale\n",
                ckpt == Checkpointing::None ? "none" : "attention",
                std::abs(loss - want_loss) / want_loss, worst_rel);
    grads.emplace_back(model.grads(), model.grads() + model.num_params());

    train::AdamW opt(model.tensors(), model.num_params(), fixture_adamw(g));
    const auto& want = g.meta["adam_losses"];
    for (size_t s = 0; s < want.size(); ++s) {
      const double l = model.forward(tokens.data(), targets.data()) / N;
      EXPECT_LE(std::abs(l - want[s].get<double>()), 5e-3 * want[s].get<double>())
          << "AdamW step " << s + 1 << ": loss " << l;
      model.zero_grads();
      model.backward(float(1.0 / N));
      opt.update(model.params(), model.grads(), float(c["lr"].get<double>()));
    }
  }
  EXPECT_TRUE(grads[0] == grads[1]) << "checkpointing changed the bf16 gradients";
}

TEST(Gpt, ParamCountClosedForm) {
  const GptConfig cfg{.vocab = 257, .layers = 4, .dim = 256, .heads = 4, .kv_heads = 2};
  // V C + L (4 C + (H + 2 Hkv) D C + C^2 + 8 C^2) + 2 C with D = 64
  const int64_t want =
      257 * 256 + 4 * (4 * 256 + 8 * 64 * 256 + 256 * 256 + 8 * 256 * 256) + 2 * 256;
  EXPECT_EQ(gpt_num_params(cfg), want);
  int64_t sum = 0;
  for (const auto& t : gpt_param_tensors(cfg)) sum += t.size;
  EXPECT_EQ(sum, want);
}

TEST(Gpt, ConfigErrorsAreUsageErrors) {
  GptConfig cfg;
  cfg.heads = 3;  // 64 % 3 != 0
  EXPECT_THROW(cfg.validate(), UsageError);
  cfg.heads = 4;
  cfg.kv_heads = 3;
  EXPECT_THROW(cfg.validate(), UsageError);
  EXPECT_THROW(parse_checkpointing("full"), UsageError);
}

}  // namespace
}  // namespace wallfacer::model

namespace wallfacer::model {
namespace {

// The KV-cache decoder gives, token by token, the logits the full forward gives for the sequence;
// also with a sliding window (model.window) on every layer and on layer 1 only, and for
// model.arch = "llama" (RMSNorm, SwiGLU, untied head, q/k/v biases, llama3 rope scaling).
TEST(GptDecoder, MatchesFullForward) {
  const GptConfig base{.vocab = 257, .layers = 2, .dim = 32, .heads = 4, .kv_heads = 2};
  GptConfig llama = base;
  llama.arch = Arch::Llama;
  llama.intermediate = 40;
  llama.norm_eps = 1e-6;
  llama.tie_embeddings = false;
  llama.qkv_bias = true;
  llama.rope_scaling = {kernels::RopeScalingType::Llama3, 4.0, 1.0, 4.0, 16};
  const int T = 19;
  for (const auto& [arch, window, layers] :
       std::vector<std::tuple<Arch, int64_t, std::vector<int64_t>>>{
           {Arch::Gpt, 0, {}}, {Arch::Gpt, 5, {}}, {Arch::Gpt, 5, {1}}, {Arch::Llama, 5, {1}}}) {
    GptConfig cfg = arch == Arch::Llama ? llama : base;
    cfg.window = window;
    cfg.window_layers = layers;
    LocalAttention attn(1, T, cfg.heads, cfg.kv_heads, cfg.head_dim());
    std::vector<int64_t> pos(static_cast<size_t>(T));
    std::iota(pos.begin(), pos.end(), 0);
    Gpt model(cfg, 1, pos, Checkpointing::None, attn);
    gpt_init_params(cfg, model.params(), 5);
    // Larger weights than the initialisation, so attention is far from uniform.
    for (int64_t i = 0; i < model.num_params(); ++i) model.params()[i] *= 8.0f;
    std::vector<int32_t> tokens(static_cast<size_t>(T)), targets(static_cast<size_t>(T), 0);
    for (int t = 0; t < T; ++t) tokens[size_t(t)] = (t * 37 + 11) % 257;
    model.forward(tokens.data(), targets.data());
    GptDecoder dec(cfg, model.params(), T);
    double worst = 0, scale = 0;
    for (int t = 0; t < T; ++t) {
      const float* got = dec.step(tokens[size_t(t)]);
      for (int v = 0; v < cfg.vocab; ++v) {
        const float want = model.logits()[size_t(t) * 257 + size_t(v)];
        worst = std::max(worst, double(std::abs(got[v] - want)));
        scale = std::max(scale, double(std::abs(want)));
      }
    }
    EXPECT_GT(scale, 0.1);
    EXPECT_LE(worst, 1e-4 * scale) << "max logit error " << worst << " of " << scale << ", window "
                                   << window << ", " << arch_name(arch);
    EXPECT_EQ(dec.position(), T);
    EXPECT_THROW(dec.step(1), Error);  // cache full
  }
}

TEST(GptDecoder, SampleToken) {
  const std::vector<float> logits = {0.0f, 3.0f, 1.0f};
  EXPECT_EQ(sample_token(logits.data(), 3, 0.0, 0.5), 1);    // greedy
  EXPECT_EQ(sample_token(logits.data(), 3, 1.0, 0.0), 0);    // lowest draw: first token
  EXPECT_EQ(sample_token(logits.data(), 3, 1.0, 0.999), 2);  // highest draw: last token
}

}  // namespace
}  // namespace wallfacer::model
