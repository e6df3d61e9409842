// The Llama-family kernels (kernels/llama_ops.h) against their fp64 twins.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "ops_testing.h"
#include "wallfacer/core/error.h"
#include "wallfacer/kernels/llama_ops.h"
#include "wallfacer/kernels/ops.h"
#include "wallfacer/kernels/reference/ops_ref.h"

namespace wallfacer::kernels {
namespace {

using ref::Vec;

using testing::expect_close;
using testing::randn;
using testing::to_d;

TEST(LlamaOps, RmsNormForwardBackward) {
  const int64_t N = 13;
  const int C = 40;
  const float eps = 1e-6f;
  auto x = randn(N * C, 5, 2.0f), w = randn(C, 6), dy = randn(N * C, 8);
  std::vector<float> y(N * C), rstd(N);
  rmsnorm_fwd(y.data(), rstd.data(), x.data(), w.data(), N, C, eps);
  expect_close(y, ref::rmsnorm(to_d(x), to_d(w), N, C, eps), 1e-5, 1e-5);

  std::vector<float> dx(N * C, 0.5f), dw(C, 0.25f);
  rmsnorm_bwd(dx.data(), dw.data(), dy.data(), x.data(), w.data(), rstd.data(), N, C);
  Vec rdx, rdw;
  ref::rmsnorm_bwd(rdx, rdw, to_d(dy), to_d(x), to_d(w), N, C, eps);
  for (auto& v : rdx) v += 0.5;
  for (auto& v : rdw) v += 0.25;
  expect_close(dx, rdx, 1e-4, 1e-4);
  expect_close(dw, rdw, 1e-4, 1e-4);

  // The reference backward (from the Jacobian) agrees with central differences.
  auto f = [&](const Vec& xx) { return ref::rmsnorm(xx, to_d(w), N, C, eps); };
  for (size_t i : {size_t(0), size_t(77), size_t(N * C - 1)})
    EXPECT_NEAR(testing::central_difference(f, dy, to_d(x), i), rdx[i] - 0.5, 1e-5);
}

TEST(LlamaOps, SwiGluForwardBackward) {
  const int64_t N = 11;
  const int I = 24;
  auto x = randn(N * 2 * I, 9, 3.0f), dy = randn(N * I, 10);
  std::vector<float> y(N * I), dx(N * 2 * I, 7.0f);
  swiglu_fwd(y.data(), x.data(), N, I);
  expect_close(y, ref::swiglu(to_d(x), N, I), 1e-5, 1e-5);
  swiglu_bwd(dx.data(), x.data(), dy.data(), N, I);
  const Vec rdx = ref::swiglu_bwd(to_d(x), to_d(dy), N, I);
  expect_close(dx, rdx, 1e-5, 1e-5);

  auto f = [&](const Vec& xx) { return ref::swiglu(xx, N, I); };
  for (size_t i : {size_t(0), size_t(I + 3), size_t(N * 2 * I - 1), size_t(5 * 2 * I + 7)})
    EXPECT_NEAR(testing::central_difference(f, dy, to_d(x), i), rdx[i], 1e-5);

  // bf16: the fp32 result of the bf16 inputs, rounded once.
  std::vector<bf16> x16(x.size()), dy16(dy.size()), y16(y.size()), dx16(dx.size());
  fp32_to_bf16(x.data(), x16.data(), int64_t(x.size()));
  fp32_to_bf16(dy.data(), dy16.data(), int64_t(dy.size()));
  std::vector<float> xw(x.size()), dyw(dy.size());
  bf16_to_fp32(x16.data(), xw.data(), int64_t(x.size()));
  bf16_to_fp32(dy16.data(), dyw.data(), int64_t(dy.size()));
  swiglu_fwd_bf16(y16.data(), x16.data(), N, I);
  swiglu_bwd_bf16(dx16.data(), x16.data(), dy16.data(), N, I);
  std::vector<float> y16w(y.size()), dx16w(dx.size());
  bf16_to_fp32(y16.data(), y16w.data(), int64_t(y.size()));
  bf16_to_fp32(dx16.data(), dx16w.data(), int64_t(dx.size()));
  // bf16 rounding: a relative error of at most 2^-8 on each output.
  expect_close(y16w, ref::swiglu(to_d(xw), N, I), 1e-6, 1.0 / 256);
  expect_close(dx16w, ref::swiglu_bwd(to_d(xw), to_d(dyw), N, I), 1e-6, 1.0 / 256);
}

TEST(LlamaOps, RopeFrequenciesWithScaling) {
  const int D = 64;
  const double theta = 500000.0;
  RopeScaling none;
  const std::vector<double> f0 = rope_inv_freq(D, theta, none);
  const Vec r0 = ref::rope_inv_freq(D, theta, 0, 1, 1, 4, 8192);
  RopeScaling lin;
  lin.type = RopeScalingType::Linear;
  lin.factor = 4.0;
  const std::vector<double> f1 = rope_inv_freq(D, theta, lin);
  const Vec r1 = ref::rope_inv_freq(D, theta, 1, 4, 1, 4, 8192);
  RopeScaling l3;
  l3.type = RopeScalingType::Llama3;
  l3.factor = 8.0;
  l3.low_freq_factor = 1.0;
  l3.high_freq_factor = 4.0;
  l3.original_max_position_embeddings = 8192;
  const std::vector<double> f2 = rope_inv_freq(D, theta, l3);
  const Vec r2 = ref::rope_inv_freq(D, theta, 2, 8, 1, 4, 8192);
  int kept = 0, divided = 0, smoothed = 0;
  for (int i = 0; i < D / 2; ++i) {
    EXPECT_NEAR(f0[size_t(i)], r0[size_t(i)], 1e-15 * r0[size_t(i)]);
    EXPECT_NEAR(f1[size_t(i)], r1[size_t(i)], 1e-15 * r1[size_t(i)]);
    EXPECT_NEAR(f2[size_t(i)], r2[size_t(i)], 1e-14 * r2[size_t(i)]) << i;
    const double ratio = f0[size_t(i)] / f2[size_t(i)];
    kept += std::abs(ratio - 1) < 1e-12;
    divided += std::abs(ratio - 8) < 1e-12;
    smoothed += ratio > 1 + 1e-12 && ratio < 8 - 1e-12;
  }
  // theta 500000, D 64: every kind of frequency occurs.
  EXPECT_GT(kept, 0);
  EXPECT_GT(divided, 0);
  EXPECT_GT(smoothed, 0);
  // The plain frequencies give the tables of rope_tables, bit for bit.
  const std::vector<int64_t> pos{0, 5, 1000, 123456};
  std::vector<float> c0(pos.size() * D / 2), s0(c0.size()), c1(c0.size()), s1(c0.size());
  rope_tables(pos.data(), int(pos.size()), D, theta, c0.data(), s0.data());
  rope_tables_freq(pos.data(), int(pos.size()), D, f0.data(), c1.data(), s1.data());
  EXPECT_EQ(c0, c1);
  EXPECT_EQ(s0, s1);
  // Scaled tables rotate like the reference.
  const int B = 1, T = int(pos.size()), H = 2;
  auto x = randn(size_t(B) * T * H * D, 12);
  std::vector<float> cs(c0.size()), sn(c0.size()), y(x.size());
  rope_tables_freq(pos.data(), T, D, f2.data(), cs.data(), sn.data());
  rope_fwd(y.data(), x.data(), int64_t(H) * D, cs.data(), sn.data(), B, T, H, D);
  expect_close(y, ref::rope_freq(to_d(x), pos, B, T, H, D, r2), 2e-5, 1e-5);
}

TEST(LlamaOps, RopeScalingTypeNames) {
  EXPECT_EQ(parse_rope_scaling_type("llama3"), RopeScalingType::Llama3);
  EXPECT_EQ(parse_rope_scaling_type("linear"), RopeScalingType::Linear);
  EXPECT_EQ(parse_rope_scaling_type("none"), RopeScalingType::None);
  try {
    parse_rope_scaling_type("yarn");
    FAIL() << "yarn accepted";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("'yarn'"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace wallfacer::kernels
