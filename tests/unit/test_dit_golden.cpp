// The DiT model against a fixture computed independently in PyTorch (float64) by
// tests/golden/gen_dit_golden.py: prediction, rectified-flow loss and every parameter gradient.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <numeric>
#include <vector>

#include "golden_fixture.h"
#include "wallfacer/model/dit.h"
#include "wallfacer/model/local_attention.h"

namespace wallfacer::model {
namespace {

using Golden = ::wallfacer::golden::GoldenFixture;

Golden load_golden() { return ::wallfacer::golden::load_golden_fixture("dit_golden"); }
// |got - want| <= 1e-6 + rtol * max|want| over the tensor; returns the error over the scale.
double expect_close(const float* got, const std::vector<double>& want, double rtol,
                    const std::string& what) {
  double scale = 0, worst = 0;
  for (double w : want) scale = std::max(scale, std::abs(w));
  for (size_t i = 0; i < want.size(); ++i) worst = std::max(worst, std::abs(got[i] - want[i]));
  EXPECT_LE(worst, 1e-6 + rtol * scale) << what << ": max error " << worst << ", scale " << scale;
  return worst / std::max(scale, 1e-30);
}

DitConfig config_of(const nlohmann::json& c) {
  DitConfig cfg;
  cfg.channels = c["channels"];
  cfg.patch = c["patch"];
  cfg.frames = c["frames"];
  cfg.size = c["size"];
  cfg.layers = c["layers"];
  cfg.dim = c["dim"];
  cfg.heads = c["heads"];
  cfg.mlp_ratio = c["mlp_ratio"];
  cfg.freq_dim = c["freq_dim"];
  cfg.classes = c["classes"];
  return cfg;
}

// The model in `dtype` against the float64 fixture: the loss within loss_rtol (relative), the
// prediction and every parameter gradient within pred_rtol and grad_rtol of their largest value.
void check_against_fixture(Dtype dtype, double loss_rtol, double pred_rtol, double grad_rtol) {
  const Golden g = load_golden();
  const DitConfig cfg = config_of(g.meta["config"]);
  const int B = g.meta["config"]["batch"];
  const int64_t T = cfg.tokens(), PD = cfg.patch_dim();
  std::vector<int64_t> pos(static_cast<size_t>(T));
  std::iota(pos.begin(), pos.end(), 0);
  LocalAttention attn(B, int(T), cfg.heads, cfg.heads, cfg.head_dim(), false);
  Dit model(cfg, B, pos, attn, dtype);
  ASSERT_EQ(model.dtype(), dtype);

  // The arena layout is the fixture's parameter order, name by name.
  for (const auto& t : model.tensors()) {
    ASSERT_TRUE(g.arrays.count(t.name)) << t.name;
    const auto& v = g.arrays.at(t.name);
    ASSERT_EQ(int64_t(v.size()), t.size) << t.name;
    for (int64_t i = 0; i < t.size; ++i) model.params()[t.offset + i] = float(v[size_t(i)]);
  }
  const auto x0 = g.f32("x0"), noise = g.f32("noise"), t = g.f32("t"), labels_d = g.f32("labels");
  std::vector<int32_t> labels(labels_d.begin(), labels_d.end());
  // Rectified flow inputs in patch space.
  const int64_t V = cfg.clip_values();
  std::vector<float> xt_clip(size_t(B * V)), v_clip(size_t(B * V));
  for (int b = 0; b < B; ++b)
    for (int64_t i = 0; i < V; ++i) {
      const size_t j = size_t(b * V + i);
      xt_clip[j] = (1 - t[size_t(b)]) * x0[j] + t[size_t(b)] * noise[j];
      v_clip[j] = noise[j] - x0[j];
    }
  std::vector<float> xt(size_t(B * T * PD)), target(xt.size());
  for (int b = 0; b < B; ++b) {
    dit_patchify(cfg, xt_clip.data() + b * V, pos.data(), int(T), xt.data() + b * T * PD);
    dit_patchify(cfg, v_clip.data() + b * V, pos.data(), int(T), target.data() + b * T * PD);
  }
  const double sse = model.forward(xt.data(), t.data(), labels.data(), target.data());
  const double loss = sse / double(B * V);
  const double want_loss = g.arrays.at("loss")[0];
  EXPECT_NEAR(loss, want_loss, loss_rtol * want_loss);

  std::vector<float> pred(size_t(B * V));
  for (int b = 0; b < B; ++b)
    dit_unpatchify(cfg, model.output() + b * T * PD, pos.data(), int(T), pred.data() + b * V);
  const double pred_err = expect_close(pred.data(), g.arrays.at("pred"), pred_rtol, "prediction");

  model.zero_grads();
  model.backward(float(1.0 / double(B * V)));
  double grad_err = 0;
  for (const auto& tn : model.tensors())
    grad_err =
        std::max(grad_err, expect_close(model.grads() + tn.offset, g.arrays.at("grad." + tn.name),
                                        grad_rtol, "grad " + tn.name));
  std::printf(
      "%s: loss relative error %.2e, prediction %.2e, largest gradient error %.2e of the "
      "scale\n",
      std::string(seqpar::dtype_name(dtype)).c_str(), std::abs(loss - want_loss) / want_loss,
      pred_err, grad_err);
}

TEST(DitGolden, MatchesPyTorch) { check_against_fixture(Dtype::fp32, 1e-5, 1e-5, 2e-5); }

// bf16 products and attention (unit roundoff 2^-8): the loss within 0.1%, the prediction within
// 0.5% and every gradient within 2% of the largest value of its tensor (measured 5.6e-6, 5.6e-4
// and 3.8e-3).
TEST(DitBf16, MatchesPyTorchWithinBf16Bounds) {
  check_against_fixture(Dtype::bf16, 1e-3, 5e-3, 2e-2);
}

TEST(Dit, PatchifyRoundTripsAndOrdersTokensFrameMajor) {
  DitConfig cfg;
  cfg.channels = 2;
  cfg.patch = 2;
  cfg.frames = 3;
  cfg.size = 6;
  const int64_t T = cfg.tokens(), V = cfg.clip_values();
  ASSERT_EQ(T, 27);
  std::vector<float> clip(static_cast<size_t>(V));
  std::iota(clip.begin(), clip.end(), 0.0f);
  std::vector<int64_t> pos(static_cast<size_t>(T));
  std::iota(pos.begin(), pos.end(), 0);
  std::vector<float> patches(size_t(T * cfg.patch_dim())), back(size_t(V), -1.0f);
  dit_patchify(cfg, clip.data(), pos.data(), int(T), patches.data());
  dit_unpatchify(cfg, patches.data(), pos.data(), int(T), back.data());
  EXPECT_EQ(back, clip);
  // Token 13 = frame 1, patch row 1, patch column 1: its first value is pixel (1, 2, 2), channel 0.
  EXPECT_EQ(patches[size_t(13 * cfg.patch_dim())], float(((1 * 6 + 2) * 6 + 2) * 2));
  // Second value of a patch: same row, next column, channel 0 ... (row, column, channel) order.
  EXPECT_EQ(patches[size_t(13 * cfg.patch_dim() + 2)], float(((1 * 6 + 2) * 6 + 3) * 2));
}

TEST(Dit, ZeroInitIsIdentityAndPredictsZero) {
  // adaLN-Zero: a freshly initialised model outputs exactly zero.
  DitConfig cfg;
  cfg.frames = 2;
  cfg.size = 8;
  cfg.dim = 24;
  cfg.heads = 2;
  cfg.freq_dim = 16;
  cfg.classes = 2;
  const int B = 1;
  const int64_t T = cfg.tokens();
  std::vector<int64_t> pos(static_cast<size_t>(T));
  std::iota(pos.begin(), pos.end(), 0);
  LocalAttention attn(B, int(T), cfg.heads, cfg.heads, cfg.head_dim(), false);
  Dit model(cfg, B, pos, attn);
  dit_init_params(cfg, model.params(), 7);
  std::vector<float> xt(size_t(T * cfg.patch_dim()), 0.5f);
  const float t = 0.3f;
  const int32_t y = 1;
  model.predict(xt.data(), &t, &y);
  for (int64_t i = 0; i < T * cfg.patch_dim(); ++i) ASSERT_EQ(model.output()[i], 0.0f);
  EXPECT_EQ(dit_num_params(cfg), model.num_params());
}

}  // namespace
}  // namespace wallfacer::model
