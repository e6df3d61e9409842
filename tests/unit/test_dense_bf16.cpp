// bf16 dense products and element-wise ops against the fp64 references of kernels/reference on
// the same bf16 inputs (widened exactly), on both code paths: one harness runs every op on every
// shape and compares each output with its own tolerance (docs/numerics.md, "bf16 dense layers").

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "attention_testing.h"
#include "wallfacer/core/bf16.h"
#include "wallfacer/core/error.h"
#include "wallfacer/kernels/attention_bf16.h"
#include "wallfacer/kernels/dense_bf16.h"
#include "wallfacer/kernels/ops.h"
#include "wallfacer/kernels/reference/ops_ref.h"

namespace wallfacer::kernels {
namespace {

using attn_testing::random_floats;
using attn_testing::rel_err;
using attn_testing::ScopedEnv;
using attn_testing::to_double;

// Error measure: max |x - ref| / max |ref| per output. Products of bf16 values are exact in fp32,
// so what remains is fp32 summation (relative 2^-24 per step) and, for bf16 outputs, the final
// rounding to nearest (up to half a bf16 ulp: 2^-8 = u of the element). bf16 outputs: 1.5u, the
// rounding bound plus room for the sums (measured up to 0.82u). fp32 outputs (dweight, dbias: no
// rounding to bf16): 2^-18, about 15 times the measured 2.5e-7.
constexpr double kU = 1.0 / 256;
constexpr double kTolBf16 = 1.5 * kU;
constexpr double kTolFp32 = 1.0 / (1 << 18);

struct Shape {
  int64_t N;
  int C, OC;
};

struct Variant {
  bool bias = false;        // bias in the forward, dbias in the backward
  bool accumulate = false;  // matmul_bwd_bf16: add into dinp
};

struct Output {
  std::string name;
  std::vector<float> got;
  std::vector<double> ref;
  double tol;
};

// Random values rounded to bf16: the bf16 array and its exact fp64 widening.
struct Bf16Data {
  std::vector<bf16> x;
  std::vector<double> wide;
  Bf16Data(size_t n, uint32_t seed, float scale = 1.0f) {
    std::vector<float> f = random_floats(n, seed);
    for (float& v : f) v *= scale;
    x = to_bf16(f);
    wide = to_double(to_fp32(x));
  }
};

std::vector<Output> run_matmul_fwd(const Shape& s, const Variant& v) {
  const Bf16Data inp(size_t(s.N * s.C), 1), w(size_t(s.OC) * s.C, 2, 0.5f);
  const std::vector<float> bias = random_floats(size_t(s.OC), 3);
  std::vector<bf16> out(size_t(s.N * s.OC), to_bf16(1e30f));  // overwritten
  matmul_fwd_bf16(out.data(), inp.x.data(), w.x.data(), v.bias ? bias.data() : nullptr, s.N, s.C,
                  s.OC);
  std::vector<double> ref = ref::matmul(inp.wide, w.wide, s.N, s.C, s.OC);
  if (v.bias)
    for (int64_t n = 0; n < s.N; ++n)
      for (int o = 0; o < s.OC; ++o) ref[n * s.OC + o] += bias[o];
  return {{"out", to_fp32(out), ref, kTolBf16}};
}

std::vector<Output> run_matmul_bwd(const Shape& s, const Variant& v) {
  const Bf16Data inp(size_t(s.N * s.C), 4), w(size_t(s.OC) * s.C, 5, 0.5f),
      dout(size_t(s.N * s.OC), 6), dinp0(size_t(s.N * s.C), 7);
  const std::vector<float> dweight0 = random_floats(size_t(s.OC) * s.C, 8),
                           dbias0 = random_floats(size_t(s.OC), 9);
  std::vector<bf16> dinp =
      v.accumulate ? dinp0.x : std::vector<bf16>(dinp0.x.size(), to_bf16(1e30f));
  std::vector<float> dweight = dweight0, dbias = dbias0;
  matmul_bwd_bf16(dinp.data(), dweight.data(), v.bias ? dbias.data() : nullptr, dout.x.data(),
                  inp.x.data(), w.x.data(), s.N, s.C, s.OC, v.accumulate);
  std::vector<double> ref_dinp, ref_dw;
  ref::matmul_bwd(ref_dinp, ref_dw, dout.wide, inp.wide, w.wide, s.N, s.C, s.OC);
  if (v.accumulate)
    for (size_t i = 0; i < ref_dinp.size(); ++i) ref_dinp[i] += dinp0.wide[i];
  for (size_t i = 0; i < ref_dw.size(); ++i) ref_dw[i] += dweight0[i];
  std::vector<double> ref_db = to_double(dbias0);
  if (v.bias)
    for (int64_t n = 0; n < s.N; ++n)
      for (int o = 0; o < s.OC; ++o) ref_db[o] += dout.wide[n * s.OC + o];
  else
    EXPECT_EQ(dbias, dbias0);
  return {{"dinp", to_fp32(dinp), ref_dinp, kTolBf16},
          {"dweight", dweight, ref_dw, kTolFp32},
          {"dbias", dbias, ref_db, kTolFp32}};
}

struct Op {
  std::string name;
  std::function<std::vector<Output>(const Shape&, const Variant&)> run;
  std::vector<Variant> variants;
};

std::vector<Op> ops() {
  return {
      {"matmul_fwd_bf16", run_matmul_fwd, {{false, false}, {true, false}}},
      {"matmul_bwd_bf16",
       run_matmul_bwd,
       {{false, false}, {true, false}, {false, true}, {true, true}}},
  };
}

// Odd sizes, N a multiple of no block, a GPT block's shapes at a small N, an LM head with an odd
// vocabulary, and the degenerate ones.
const Shape kShapes[] = {{1, 1, 1},      {7, 3, 5},       {37, 65, 129},   {301, 130, 70},
                         {96, 256, 768}, {64, 256, 1024}, {33, 256, 1031}, {519, 31, 17},
                         {0, 8, 8},      {5, 0, 9},       {6, 4, 0}};

std::string variant_name(const Variant& v) {
  return fmt::format("{}{}", v.bias ? "bias" : "nobias", v.accumulate ? ",accumulate" : "");
}

class DenseBf16 : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    if (std::string(GetParam()) == "avx512" && !bf16_avx512_available())
      GTEST_SKIP() << "this CPU has no avx512_bf16";
    if (std::string(GetParam()) == "amx" && !bf16_amx_available())
      GTEST_SKIP() << "no AMX (amx_bf16, amx_tile) on this CPU, OS or build";
  }
};

TEST_P(DenseBf16, EveryOpMatchesTheFp64ReferenceOnEveryShape) {
  const ScopedEnv env("WALLFACER_BF16_PATH", GetParam());
  for (const Op& op : ops()) {
    for (const Variant& v : op.variants) {
      std::vector<double> worst;
      for (const Shape& s : kShapes) {
        const std::vector<Output> outs = op.run(s, v);
        worst.resize(outs.size(), 0.0);
        for (size_t i = 0; i < outs.size(); ++i) {
          const Output& o = outs[i];
          const double err = rel_err(o.got, o.ref);
          worst[i] = std::max(worst[i], err);
          EXPECT_LE(err, o.tol) << op.name << " " << variant_name(v) << " " << o.name << " N "
                                << s.N << " C " << s.C << " OC " << s.OC;
        }
      }
      std::string line = fmt::format("{} {} ({}):", op.name, variant_name(v), GetParam());
      const std::vector<Output> names = op.run({1, 1, 1}, v);
      for (size_t i = 0; i < worst.size(); ++i)
        line += fmt::format(" {} {:.2e}", names[i].name, worst[i]);
      std::printf("%s\n", line.c_str());
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Paths, DenseBf16, ::testing::Values("portable", "avx512", "amx"),
                         [](const auto& path) { return std::string(path.param); });

TEST(DenseBf16Paths, AgreeWithinTheToleranceOnAGptShape) {
  if (!bf16_avx512_available()) GTEST_SKIP() << "this CPU has no avx512_bf16";
  // The two paths sum in different orders: not bit-identical, both near the reference.
  const Shape s{129, 256, 768};
  std::vector<float> a, b;
  {
    const ScopedEnv env("WALLFACER_BF16_PATH", "portable");
    a = run_matmul_fwd(s, {true, false})[0].got;
  }
  {
    const ScopedEnv env("WALLFACER_BF16_PATH", "avx512");
    b = run_matmul_fwd(s, {true, false})[0].got;
  }
  EXPECT_LE(rel_err(a, to_double(b)), 2 * kTolBf16);
}

// GELU with bf16 input and output: within one bf16 unit roundoff (elementwise, relative, plus
// 1e-6 absolute for tanh_approx where gelu is tiny) of the fp64 reference on the widened inputs,
// and the fp32 kernel's result on the same inputs rounded once (the same arithmetic).
TEST(GeluBf16, MatchesTheFp64ReferenceAndTheRoundedFp32Kernel) {
  const int64_t n = 10007;
  Bf16Data x(size_t(n), 11, 6.0f), dout(size_t(n), 12);
  x.x[0] = to_bf16(0.0f);
  x.x[1] = to_bf16(-0.0f);
  x.x[2] = to_bf16(100.0f);
  x.x[3] = to_bf16(-100.0f);
  x.wide = to_double(to_fp32(x.x));
  std::vector<bf16> y(static_cast<size_t>(n)), dx(static_cast<size_t>(n));
  gelu_fwd_bf16(y.data(), x.x.data(), n);
  gelu_bwd_bf16(dx.data(), x.x.data(), dout.x.data(), n);
  std::vector<bf16> dx_in_place = dout.x;
  gelu_bwd_bf16(dx_in_place.data(), x.x.data(), dx_in_place.data(), n);
  EXPECT_TRUE(dx_in_place == dx) << "gelu_bwd_bf16 in place differs";

  std::vector<float> xf = to_fp32(x.x), yf(static_cast<size_t>(n)), dxf(static_cast<size_t>(n));
  gelu_fwd(yf.data(), xf.data(), n);
  gelu_bwd(dxf.data(), xf.data(), to_fp32(dout.x).data(), n);
  int64_t bad_fwd = 0, bad_bwd = 0, differ = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double ref_y = ref::gelu(x.wide[size_t(i)]);
    const double ref_dx = dout.wide[size_t(i)] * ref::gelu_grad(x.wide[size_t(i)]);
    bad_fwd += std::abs(to_float(y[size_t(i)]) - ref_y) > kU * std::abs(ref_y) + 1e-6;
    bad_bwd += std::abs(to_float(dx[size_t(i)]) - ref_dx) > kU * std::abs(ref_dx) + 1e-6;
    differ +=
        !(y[size_t(i)] == to_bf16(yf[size_t(i)])) || !(dx[size_t(i)] == to_bf16(dxf[size_t(i)]));
  }
  EXPECT_EQ(bad_fwd, 0);
  EXPECT_EQ(bad_bwd, 0);
  EXPECT_EQ(differ, 0) << "elements differing from the rounded fp32 kernel";
}

TEST(DenseBf16Paths, UnknownPathIsAUsageError) {
  const ScopedEnv env("WALLFACER_BF16_PATH", "fast");
  std::vector<bf16> x(4), out(4);
  EXPECT_THROW(matmul_fwd_bf16(out.data(), x.data(), x.data(), nullptr, 2, 2, 2), UsageError);
}

}  // namespace
}  // namespace wallfacer::kernels
