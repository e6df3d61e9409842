// bf16 flash attention against the naive fp64 reference evaluated on the same bf16 inputs (widened
// exactly), on every code path the CPU has (portable, avx512, amx); the bf16 type and the tile
// products underneath (the AVX512-BF16 ones against a model of the instruction, bit for bit, the
// AMX ones against the exact sum within an fp32 chain's bound). Tolerances: docs/numerics.md, "bf16
// kernels".

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "attention_testing.h"
#include "isa_levels.h"
#include "wallfacer/core/bf16.h"
#include "wallfacer/core/error.h"
#include "wallfacer/kernels/attention.h"
#include "wallfacer/kernels/attention_bf16.h"
#include "wallfacer/kernels/bf16_gemm.h"
#include "wallfacer/kernels/reference/attention_ref.h"

namespace wallfacer::kernels {
namespace {

using attn_testing::Case;
using attn_testing::dims_of;
using attn_testing::random_floats;
using attn_testing::ref_problem;
using attn_testing::rel_err;
using attn_testing::ScopedEnv;
using attn_testing::to_double;

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Tolerances relative to the largest reference magnitude of each quantity (docs/numerics.md), in
// units of bf16's unit roundoff u = 2^-8: bf16 outputs 3u (measured up to 1.4u), fp32 outputs,
// which skip the last rounding, 1.5u (measured up to 0.6u); the LSE u/2, its absolute error bound.
constexpr double kU = 1.0 / 256;
constexpr double kTolO = 3 * kU, kTolGrad = 3 * kU, kTolLse = kU / 2;
constexpr double kTolOFp32 = 1.5 * kU, kTolGradFp32 = 1.5 * kU;

// --- The bf16 type ------------------------------------------------------------------------------

uint32_t bits_of(float x) { return std::bit_cast<uint32_t>(x); }

// Rounding to nearest even computed from values rather than bits: the two bf16 neighbours of a
// finite x (truncation and the next one up in magnitude), the nearer one in exact double
// arithmetic, the one with an even last bit on a tie.
uint16_t reference_round(float x) {
  const uint16_t lo = uint16_t(bits_of(x) >> 16), hi = uint16_t(lo + 1);
  const double dlo = to_float(bf16{lo}), dhi = to_float(bf16{hi});  // hi may be inf
  if (double(x) == dlo) return lo;
  if (std::isinf(dhi)) {
    // Beyond the largest bf16: nearer to inf than to it means past its half-ulp boundary.
    const double max_bf16 = dlo, half_ulp = std::ldexp(1.0, 127 - 8);
    return std::fabs(double(x)) - std::fabs(max_bf16) < half_ulp ? lo : hi;
  }
  const double elo = std::fabs(double(x) - dlo), ehi = std::fabs(dhi - double(x));
  if (elo < ehi) return lo;
  if (ehi < elo) return hi;
  return lo % 2 == 0 ? lo : hi;
}

TEST(Bf16Type, RoundsToNearestEven) {
  EXPECT_EQ(to_bf16(1.0f).bits, 0x3f80);
  EXPECT_EQ(to_bf16(-2.0f).bits, 0xc000);
  // Ties: 1 + 2^-8 lies halfway between 1 and 1 + 2^-7 (even: 1); 1 + 3 * 2^-8 goes up to even.
  EXPECT_EQ(to_bf16(std::bit_cast<float>(0x3f808000u)).bits, 0x3f80);
  EXPECT_EQ(to_bf16(std::bit_cast<float>(0x3f818000u)).bits, 0x3f82);
  EXPECT_EQ(to_bf16(std::bit_cast<float>(0x3f808001u)).bits, 0x3f81);
  EXPECT_EQ(to_bf16(-0.0f).bits, 0x8000);
  EXPECT_EQ(to_bf16(std::numeric_limits<float>::infinity()).bits, 0x7f80);
  EXPECT_EQ(to_bf16(-std::numeric_limits<float>::infinity()).bits, 0xff80);
  EXPECT_EQ(to_bf16(std::numeric_limits<float>::max()).bits, 0x7f80);  // overflows to inf
  // NaN stays NaN, quiet, with its sign; a signalling NaN's payload bit 0x40 is set.
  EXPECT_EQ(to_bf16(std::bit_cast<float>(0x7f800001u)).bits, 0x7fc0);
  EXPECT_EQ(to_bf16(std::bit_cast<float>(0xffc12345u)).bits, 0xffc1);
  EXPECT_TRUE(std::isnan(to_float(to_bf16(std::numeric_limits<float>::quiet_NaN()))));
  // Subnormals are rounded, not flushed.
  EXPECT_EQ(to_bf16(std::bit_cast<float>(0x00018000u)).bits, 0x0002);
  EXPECT_EQ(to_bf16(std::bit_cast<float>(0x007fffffu)).bits, 0x0080);

  std::mt19937 gen(5);
  std::vector<float> xs;
  for (int i = 0; i < 200000; ++i) {
    const float x = std::bit_cast<float>(uint32_t(gen()));
    if (!std::isnan(x)) xs.push_back(x);
  }
  for (float x : xs)
    ASSERT_EQ(to_bf16(x).bits, reference_round(x)) << fmt::format("{:#x}", bits_of(x));
  // The bulk conversion is the same function.
  std::vector<bf16> bulk(xs.size());
  fp32_to_bf16(xs.data(), bulk.data(), int64_t(xs.size()));
  for (size_t i = 0; i < xs.size(); ++i) ASSERT_EQ(bulk[i], to_bf16(xs[i])) << i;
}

TEST(Bf16Type, EveryValueRoundTrips) {
  std::vector<bf16> all(65536);
  for (uint32_t u = 0; u < 65536; ++u) all[u] = bf16{uint16_t(u)};
  std::vector<float> wide(all.size());
  bf16_to_fp32(all.data(), wide.data(), int64_t(all.size()));
  std::vector<bf16> back(all.size());
  fp32_to_bf16(wide.data(), back.data(), int64_t(all.size()));
  for (uint32_t u = 0; u < 65536; ++u) {
    ASSERT_EQ(bits_of(wide[u]), u << 16);
    if (std::isnan(wide[u]))
      ASSERT_EQ(back[u].bits, u | 0x40) << u;  // quieted
    else
      ASSERT_EQ(back[u].bits, u) << u;
  }
}

// The kernels' bulk conversions (kernels/ops.h, at every level this CPU runs) give the bf16 type's
// results: every bf16 value widened, and rounding of random floats, NaNs, infinities and
// subnormals included, with lengths that leave vector remainders.
TEST(Bf16Type, KernelConversionsAreTheTypesAtEveryLevel) {
  std::vector<bf16> all(65536);
  for (uint32_t u = 0; u < 65536; ++u) all[u] = bf16{uint16_t(u)};
  std::mt19937 gen(7);
  std::vector<float> xs(100003);
  for (float& x : xs) x = std::bit_cast<float>(uint32_t(gen()));
  for (const LevelKernels& lk : levels_this_cpu_runs()) {
    std::vector<float> wide(all.size());
    lk.widen_bf16(all.data(), wide.data(), int64_t(all.size()));
    for (uint32_t u = 0; u < 65536; ++u) ASSERT_EQ(bits_of(wide[u]), u << 16) << lk.name();
    std::vector<bf16> narrow(xs.size());
    lk.round_bf16(xs.data(), narrow.data(), int64_t(xs.size()));
    for (size_t i = 0; i < xs.size(); ++i)
      ASSERT_EQ(narrow[i].bits, to_bf16(xs[i]).bits) << lk.name() << " at " << i;
  }
}

// --- Tile products ------------------------------------------------------------------------------

std::vector<bf16> random_bf16(size_t n, uint32_t seed, int max_exponent = 0) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::uniform_int_distribution<int> ex(-max_exponent, max_exponent);
  std::vector<bf16> x(n);
  for (auto& v : x) v = to_bf16(std::ldexp(dist(gen), ex(gen)));
  return x;
}

struct GemmCase {
  int m, n, kp, lda, ldb, ldc;
  bool accumulate;
};

// Subnormals to zero with their sign: exponent bits 0 keep only the sign bit.
float flush(float x) {
  const uint32_t u = bits_of(x);
  return std::bit_cast<float>(u & ((u & 0x7f800000u) == 0 ? 0x80000000u : 0xffffffffu));
}

// What VDPBF16PS computes (docs/numerics.md, "bf16 kernels"), lane by lane: every C element one
// fp32 chain over t = 0, 1, ..., each step
//   c = flush(fma(a[2t + 1], b[2t + 1], flush(c)));  c = flush(fma(a[2t], b[2t], c))
// with subnormal inputs read as zero.
void instruction_model(const detail::Bf16Gemm& g) {
  const auto read = [](bf16 x) { return flush(to_float(x)); };
  for (int i = 0; i < g.m; ++i)
    for (int col = 0; col < g.n; ++col) {
      float& c = g.c[i * g.ldc + col];
      if (!g.accumulate) c = 0.0f;
      for (int t = 0; t < g.kp; ++t) {
        const bf16* a = g.a + i * g.lda + 2 * t;
        const bf16* b = g.b + t * g.ldb + 2 * col;
        c = flush(std::fma(read(a[1]), read(b[1]), flush(c)));
        c = flush(std::fma(read(a[0]), read(b[0]), c));
      }
    }
}

enum class GemmPath { avx512, amx, model };

// Runs one product on a path; the B and C buffers are sized for the padding bf16_gemm.h allows.
std::vector<float> run_gemm(GemmPath path, const GemmCase& gc, const std::vector<bf16>& a,
                            const std::vector<bf16>& b, std::vector<float> c) {
  detail::Bf16Gemm g{gc.m,     gc.n,   gc.kp,    a.data(), gc.lda,
                     b.data(), gc.ldb, c.data(), gc.ldc,   gc.accumulate};
  if (path == GemmPath::avx512)
    detail::bf16_gemm_avx512(g);
  else if (path == GemmPath::amx)
    detail::bf16_gemm_amx(g);
  else
    instruction_model(g);
  return c;
}

GemmCase gemm_case(int m, int n, int kp, bool accumulate) {
  const int n16 = (n + 15) / 16 * 16;
  return {m, n, kp, 2 * kp + 2, 2 * n16 + 32, n + 3, accumulate};
}

// What VDPBF16PS does and its model computes are the same, bit for bit, over a wide range of
// magnitudes (products that overflow, underflow to subnormal, subnormal inputs and accumulators),
// and with no steps at all (C untouched).
TEST(Bf16Gemm, Avx512MatchesTheInstructionModelBitForBit) {
  if (!bf16_avx512_available()) GTEST_SKIP() << "no AVX512-BF16 on this CPU or in this build";
  int seed = 10;
  for (int range : {0, 20, 70, 130})
    for (const GemmCase& gc :
         {gemm_case(1, 1, 1, true), gemm_case(3, 17, 3, false), gemm_case(4, 64, 32, true),
          gemm_case(9, 100, 33, true), gemm_case(13, 256, 128, true), gemm_case(6, 40, 1, true),
          gemm_case(3, 20, 0, true)}) {
      const auto a = random_bf16(size_t(gc.m) * gc.lda, seed++, range);
      const auto b = random_bf16(size_t(gc.kp) * gc.ldb, seed++, range);
      std::vector<float> c0(size_t(gc.m) * gc.ldc);
      std::mt19937 gen(seed++);
      std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
      std::uniform_int_distribution<int> ex(-range - 20, range);
      for (auto& x : c0) x = std::ldexp(dist(gen), ex(gen));
      const auto p = run_gemm(GemmPath::model, gc, a, b, c0),
                 x = run_gemm(GemmPath::avx512, gc, a, b, c0);
      for (size_t i = 0; i < p.size(); ++i)
        ASSERT_EQ(bits_of(p[i]), bits_of(x[i]))
            << "range " << range << " m " << gc.m << " n " << gc.n << " kp " << gc.kp << " at " << i
            << ": model " << p[i] << " avx512 " << x[i];
    }
}

// TDPBF16PS (the amx path) is not modelled bit for bit: on this CPU (Xeon with AMX) it matched
// neither VDPBF16PS's model above nor the other orders tried (each pair's sum exact or rounded
// before it is added). Against the exact sum in fp64 instead: every C element within the bound of
// an fp32 chain of 2 kp + 1 roundings, |c - exact| <= (2 kp + 1) 2^-24 (|c0| + sum |a b|), on
// magnitudes where nothing overflows or goes subnormal; edges of every kind (rows, columns, pairs
// not multiples of 16, strides), C untouched with no pairs or zeroed without accumulate, and the
// columns past n and rows past m never written; bf16_gemm_amx_run block by block gives the same
// bits.
TEST(Bf16Gemm, AmxWithinAnFp32ChainOfTheExactSum) {
  if (!bf16_amx_available()) GTEST_SKIP() << "no AMX (amx_bf16, amx_tile) on this CPU, OS or build";
  int seed = 50;
  for (int range : {0, 20})
    for (const GemmCase& gc :
         {gemm_case(1, 1, 1, true), gemm_case(3, 17, 3, false), gemm_case(4, 64, 32, true),
          gemm_case(9, 100, 33, true), gemm_case(13, 256, 128, true), gemm_case(6, 40, 1, true),
          gemm_case(3, 20, 0, true), gemm_case(3, 20, 0, false), gemm_case(16, 16, 16, false),
          gemm_case(32, 32, 16, true), gemm_case(33, 47, 17, true), gemm_case(128, 256, 32, false),
          gemm_case(64, 64, 128, true), gemm_case(100, 64, 77, true)}) {
      const auto a = random_bf16(size_t(gc.m) * gc.lda, seed++, range);
      const auto b = random_bf16(size_t(gc.kp) * gc.ldb, seed++, range);
      std::vector<float> c0(size_t(gc.m) * gc.ldc);
      std::mt19937 gen(seed++);
      std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
      for (auto& x : c0) x = std::ldexp(dist(gen), 3);
      const auto x = run_gemm(GemmPath::amx, gc, a, b, c0);
      // The same product block by block, last block first, under one tile configuration: the
      // same bits.
      std::vector<float> y = c0;
      const detail::Bf16Gemm g{gc.m,     gc.n,   gc.kp,    a.data(), gc.lda,
                               b.data(), gc.ldb, y.data(), gc.ldc,   gc.accumulate};
      detail::bf16_amx_begin();
      for (int blk = detail::bf16_gemm_amx_blocks(g) - 1; blk >= 0; --blk)
        detail::bf16_gemm_amx_run(g, blk, 1);
      detail::bf16_amx_end();
      ASSERT_EQ(std::memcmp(x.data(), y.data(), x.size() * sizeof(float)), 0)
          << "blocks in steps differ, m " << gc.m << " n " << gc.n << " kp " << gc.kp;
      for (int i = 0; i < gc.m; ++i)
        for (int col = 0; col < gc.ldc; ++col) {
          const size_t at = size_t(i) * gc.ldc + col;
          if (col >= gc.n) {
            ASSERT_EQ(bits_of(x[at]), bits_of(c0[at])) << "written past n at " << i << ", " << col;
            continue;
          }
          double exact = gc.accumulate ? c0[at] : 0.0, mag = std::fabs(exact);
          for (int t = 0; t < 2 * gc.kp; ++t) {
            const double p = double(to_float(a[size_t(i) * gc.lda + t])) *
                             to_float(b[size_t(t / 2) * gc.ldb + 2 * col + t % 2]);
            exact += p;
            mag += std::fabs(p);
          }
          const double bound = (2 * gc.kp + 1) * std::ldexp(mag, -24);
          ASSERT_LE(std::fabs(x[at] - exact), bound)
              << "range " << range << " m " << gc.m << " n " << gc.n << " kp " << gc.kp << " at "
              << i << ", " << col << ": amx " << x[at] << " exact " << exact;
        }
    }
}

// The amx path's softmax row: every value within half a bf16 unit (plus fp32's rounding) of 2^x in
// fp64, zero where 2^x is below 2^-126 (subnormal) and exactly 0 far below; the returned sum is
// that of the stored values; nothing written past n, for lengths around the 16-lane vectors.
TEST(Bf16Gemm, AmxSoftmaxRowWithinHalfABf16UnitOf2x) {
  if (!bf16_amx_available()) GTEST_SKIP() << "no AMX (amx_bf16, amx_tile) on this CPU, OS or build";
  std::mt19937 gen(7);
  std::uniform_real_distribution<float> dist(-200.0f, 20.0f);
  const float scale = 0.125f * 1.44269504f, shift = 2.5f;
  for (int n : {0, 1, 15, 16, 17, 31, 32, 33, 100, 256, 1000}) {
    std::vector<float> sc(size_t(n) + 1);
    for (auto& x : sc) x = dist(gen);
    std::vector<bf16> pt(size_t(n) + 1, bf16{0x1234});
    const float sum = detail::bf16_exp2_round_sum_amx(sc.data(), n, scale, shift, pt.data());
    double stored = 0.0;
    for (int j = 0; j < n; ++j) {
      const double want = std::exp2(double(sc[j]) * scale - shift), got = to_float(pt[j]);
      stored += got;
      if (want < std::ldexp(1.0, -126)) {
        EXPECT_TRUE(got == 0.0 || std::fabs(got - want) <= std::ldexp(want, -8)) << n << " " << j;
        continue;
      }
      const double half_unit = std::ldexp(1.0, std::ilogb(want) - 8);  // of bf16's 8 bits
      EXPECT_LE(std::fabs(got - want), half_unit + 1e-6 * want) << n << " at " << j;
    }
    EXPECT_EQ(pt[size_t(n)].bits, 0x1234) << "written past n = " << n;
    EXPECT_NEAR(sum, stored, 1e-6 * stored) << n;
  }
}

// The amx path's row maximum: exactly the largest s[j] scale (-inf for no values), for lengths
// around the vectors and the maximum anywhere in them.
TEST(Bf16Gemm, AmxScaledMaxIsTheLargestScaledValue) {
  if (!bf16_amx_available()) GTEST_SKIP() << "no AMX (amx_bf16, amx_tile) on this CPU, OS or build";
  std::mt19937 gen(9);
  std::uniform_real_distribution<float> dist(-50.0f, -1.0f);
  const float scale = 0.125f * 1.44269504f;
  EXPECT_EQ(detail::bf16_scaled_max_amx(nullptr, 0, scale), kNegInf);
  for (int n : {1, 15, 16, 17, 63, 64, 65, 100, 256})
    for (int at : {0, n / 2, n - 1}) {
      std::vector<float> sc(static_cast<size_t>(n));
      for (auto& x : sc) x = dist(gen);
      sc[size_t(at)] = -0.5f;
      float want = kNegInf;
      for (float x : sc) want = std::max(want, x * scale);
      EXPECT_EQ(detail::bf16_scaled_max_amx(sc.data(), n, scale), want) << n << " " << at;
    }
}

// The amx path's softmax rows of a chunk: row by row the values of bf16_scaled_max_amx and
// bf16_exp2_round_sum_amx against the larger of the row's reference and its largest visible scaled
// score, bit for bit, zeros outside the visible columns; the reference and sum updated, and alpha
// exactly 1 where the reference did not change (else within fp32's rounding of 2^(m - m'), 0 for
// m = -inf). Rows
// whose scores stay below their reference (the one-pass case, whole rows of 256), rows that pass
// it in one place, rows seen for the first time (m = -inf), rows that see nothing, partial rows
// and short tiles.
TEST(Bf16Gemm, AmxSoftmaxRowsAreTheRowByRowValues) {
  if (!bf16_amx_available()) GTEST_SKIP() << "no AMX (amx_bf16, amx_tile) on this CPU, OS or build";
  std::mt19937 gen(11);
  std::uniform_real_distribution<float> dist(-12.0f, 12.0f);
  std::uniform_int_distribution<int> col(0, 255);
  const float scale = 0.125f * 1.44269504f;
  const int64_t lds = 256;
  for (int n : {256, 255, 200, 17}) {
    const int n2 = n + n % 2, rows = 24;
    std::vector<float> s(size_t(rows) * lds), m(rows), l(rows), alpha(rows, -1.0f);
    std::vector<int> lo(rows), hi(rows);
    for (auto& x : s) x = dist(gen);
    for (int i = 0; i < rows; ++i) {
      const float* row = s.data() + i * lds;
      lo[i] = 0, hi[i] = n;
      if (i % 6 == 4) lo[i] = col(gen) % n, hi[i] = lo[i] + (col(gen) % (n - lo[i]) + 1);
      if (i % 6 == 5) lo[i] = hi[i] = n / 2;
      float top = kNegInf;
      for (int j = lo[i]; j < hi[i]; ++j) top = std::max(top, row[j] * scale);
      const int kind = i % 4;  // reference: above the scores, below them, none yet, just at the top
      m[i] = kind == 0 ? top + 1.5f : kind == 1 ? top - 2.0f : kind == 2 ? kNegInf : top;
      l[i] = m[i] == kNegInf ? 0.0f : 3.0f + float(i);  // (a row that has seen nothing is (0, 0))
    }
    std::vector<float> s0 = s, m0 = m, l0 = l;
    detail::bf16_softmax_rows_amx({.s = s.data(),
                                   .lds = lds,
                                   .rows = rows,
                                   .n2 = n2,
                                   .lo = lo.data(),
                                   .hi = hi.data(),
                                   .scale = scale,
                                   .m = m.data(),
                                   .l = l.data(),
                                   .alpha = alpha.data()});
    for (int i = 0; i < rows; ++i) {
      const std::string at = fmt::format("n {} row {} [{}, {})", n, i, lo[i], hi[i]);
      const float* row = s0.data() + i * lds;
      const bf16* got = reinterpret_cast<const bf16*>(s.data() + i * lds);
      const float m_new = std::max(
          m0[i], detail::bf16_scaled_max_amx(row + lo[i], std::max(0, hi[i] - lo[i]), scale));
      std::vector<bf16> want(size_t(n2), bf16{});
      float sum = 0.0f;
      if (m_new != kNegInf && lo[i] < hi[i])
        sum = detail::bf16_exp2_round_sum_amx(row + lo[i], hi[i] - lo[i], scale, m_new,
                                              want.data() + lo[i]);
      for (int j = 0; j < n2; ++j)
        ASSERT_EQ(got[j].bits, want[size_t(j)].bits) << at << " col " << j;
      if (m_new == kNegInf) {
        EXPECT_EQ(m[i], kNegInf) << at;
        EXPECT_EQ(l[i], 0.0f) << at;
        EXPECT_EQ(alpha[i], 1.0f) << at;
        continue;
      }
      EXPECT_EQ(m[i], m_new) << at;
      if (m_new == m0[i]) {
        EXPECT_EQ(alpha[i], 1.0f) << at;
        EXPECT_EQ(l[i], l0[i] + sum) << at;
      } else {
        const double exact = std::exp2(double(m0[i]) - m_new);  // 0 for m0 = -inf
        EXPECT_NEAR(alpha[i], exact, 2e-7 * exact) << at;
        EXPECT_EQ(l[i], l0[i] * alpha[i] + sum) << at;
      }
    }
  }
}

// --- Attention ----------------------------------------------------------------------------------

// The paths a test runs: portable always, AVX512-BF16 and AMX where the CPU has them.
std::vector<const char*> paths() {
  std::vector<const char*> p{"portable"};
  if (bf16_avx512_available()) p.push_back("avx512");
  if (bf16_amx_available()) p.push_back("amx");
  return p;
}

// One output tensor: bf16 or fp32 storage.
struct Out {
  std::vector<bf16> h;
  std::vector<float> f;
  bool fp32 = false;
  Out(size_t n, bool as_fp32) : fp32(as_fp32) {
    if (fp32)
      f.assign(n, 0.0f);
    else
      h.assign(n, bf16{});
  }
  AttnOutput view() { return {fp32 ? nullptr : h.data(), fp32 ? f.data() : nullptr}; }
  std::vector<float> values() const { return fp32 ? f : to_fp32(h); }
};

// Inputs and outputs of one problem (contiguous tensors); inputs are random in [-1, 1] rounded to
// bf16.
struct Problem : attn_testing::ProblemShape {
  std::vector<bf16> q, k, v, dout;
  Out o, dq, dk, dv;
  std::vector<float> lse, delta;

  Problem(const Case& cs, bool fp32_outputs, uint32_t seed = 1)
      : ProblemShape(cs),
        q(to_bf16(random_floats(nq(), seed))),
        k(to_bf16(random_floats(nk(), seed + 1))),
        v(to_bf16(random_floats(nk(), seed + 2))),
        dout(to_bf16(random_floats(nq(), seed + 3))),
        o(nq(), fp32_outputs),
        dq(nq(), fp32_outputs),
        dk(nk(), fp32_outputs),
        dv(nk(), fp32_outputs),
        lse(size_t(d.batch) * d.heads * d.seq_q),
        delta(lse.size()) {}

  static AttnOutput out(Out& x) { return x.view(); }
  AttnFwdBf16Params fwd_params() { return attn_testing::fwd_params_of<bf16>(*this, out); }
  AttnBwdBf16Params bwd_params() { return attn_testing::bwd_params_of<bf16>(*this, out); }
  void forward() { attn_fwd_bf16(fwd_params()); }
  // delta from O as the model would store it: bf16.
  void backward() {
    const std::vector<bf16> o16 = o.fp32 ? to_bf16(o.f) : o.h;
    attn_bwd_preprocess_bf16(d, o16.data(), qs(), dout.data(), qs(), delta.data(), ls());
    attn_bwd_bf16(bwd_params());
  }
};

// fp64 reference of the problem's bf16 inputs.
struct Reference : attn_testing::ReferenceOutputs {
  explicit Reference(const Problem& pb)
      : ReferenceOutputs(pb, to_double(to_fp32(pb.q)), to_double(to_fp32(pb.k)),
                         to_double(to_fp32(pb.v)), to_double(to_fp32(pb.dout))) {}
};

struct Errors {
  double o, lse, dq, dk, dv;
};

Errors errors(const Problem& pb, const Reference& ref) {
  return {rel_err(pb.o.values(), ref.o), rel_err(pb.lse, ref.lse), rel_err(pb.dq.values(), ref.dq),
          rel_err(pb.dk.values(), ref.dk), rel_err(pb.dv.values(), ref.dv)};
}

void expect_within(const Errors& e, bool fp32_outputs, const std::string& what) {
  const double to = fp32_outputs ? kTolOFp32 : kTolO, tg = fp32_outputs ? kTolGradFp32 : kTolGrad;
  EXPECT_LE(e.o, to) << what << " O";
  EXPECT_LE(e.lse, kTolLse) << what << " LSE";
  EXPECT_LE(e.dq, tg) << what << " dQ";
  EXPECT_LE(e.dk, tg) << what << " dK";
  EXPECT_LE(e.dv, tg) << what << " dV";
}

template <typename T>
bool same_bits(const std::vector<T>& x, const std::vector<T>& y) {
  return x.size() == y.size() && std::memcmp(x.data(), y.data(), x.size() * sizeof(T)) == 0;
}

void expect_same_bits(const Problem& a, const Problem& b, const std::string& what) {
  EXPECT_TRUE(same_bits(a.o.values(), b.o.values())) << what << " O";
  EXPECT_TRUE(same_bits(a.lse, b.lse)) << what << " LSE";
  EXPECT_TRUE(same_bits(a.dq.values(), b.dq.values())) << what << " dQ";
  EXPECT_TRUE(same_bits(a.dk.values(), b.dk.values())) << what << " dK";
  EXPECT_TRUE(same_bits(a.dv.values(), b.dv.values())) << what << " dV";
}

// Forward and backward on every path, each against the reference; with documents of the given
// lengths when there are any.
void check_case(const Case& c, bool fp32_outputs, const std::vector<int64_t>& doc_lengths = {}) {
  std::vector<Problem> runs;
  for (const char* path : paths()) {
    const ScopedEnv env("WALLFACER_BF16_PATH", path);
    Problem pb(c, fp32_outputs);
    if (!doc_lengths.empty()) pb.doc_ids = attn_testing::doc_ids_of(c, doc_lengths);
    pb.forward();
    pb.backward();
    runs.push_back(std::move(pb));
  }
  const Reference ref(runs[0]);
  for (size_t i = 0; i < runs.size(); ++i)
    expect_within(errors(runs[i], ref), fp32_outputs, c.name + " " + paths()[i]);
}

class AttnBf16VsReference : public ::testing::TestWithParam<Case> {};

TEST_P(AttnBf16VsReference, ForwardAndBackward) { check_case(GetParam(), false); }

// Sequence lengths that are not multiples of any tile (nor even) and one longer causal case; head
// dims that are multiples of 16, of 2 only, and odd (and 256).
std::vector<Case> reference_cases() {
  std::vector<Case> cs =
      attn_testing::reference_cases({1, 7, 97, 300}, 2, 32, {16, 64, 128, 40, 2, 3, 1, 77});
  cs.push_back({1, 600, 600, 1, 1, 64, true, 0, 0, "S600_causal_D64"});
  return cs;
}

INSTANTIATE_TEST_SUITE_P(Cases, AttnBf16VsReference, ::testing::ValuesIn(reference_cases()),
                         [](const ::testing::TestParamInfo<Case>& i) { return i.param.name; });

// Packed documents (AttnFwdBf16Params::doc_of_pos) against the reference with the same documents.
using attn_testing::DocCase;

// The document cases put boundaries on the tile borders of these kernels with documents: 128 x 256
// forward, 256 x 256 backward (256 x 512 without documents).
TEST(AttnBf16Docs, CasesMeetTheTileBorders) {
  const AttnTiling fwd = attn_fwd_bf16_tiling({}), bwd = attn_bwd_bf16_tiling({});
  EXPECT_EQ(fwd.block_q, 128);
  EXPECT_EQ(fwd.block_k, 256);
  EXPECT_EQ(bwd.block_q, 256);
  EXPECT_EQ(bwd.block_k, 512);
}

class AttnBf16DocsVsReference : public ::testing::TestWithParam<DocCase> {};

TEST_P(AttnBf16DocsVsReference, ForwardAndBackward) {
  check_case(GetParam().c, false, GetParam().lengths);
}

INSTANTIATE_TEST_SUITE_P(Cases, AttnBf16DocsVsReference,
                         ::testing::ValuesIn(attn_testing::doc_cases()),
                         [](const ::testing::TestParamInfo<DocCase>& i) { return i.param.c.name; });

// Every instruction-set level (kernels/isa.h) on every path, with and without documents and
// windows, against the reference.
TEST(AttnBf16, EveryLevelMatchesTheReference) {
  std::vector<DocCase> cases = {{{1, 300, 300, 2, 1, 64, true, 0, 0, "S300_causal"}, {}},
                                {{1, 97, 97, 2, 1, 40, false, 0, 0, "S97_D40"}, {}}};
  for (const DocCase& dc : attn_testing::doc_cases())
    if (dc.c.name == "off_by_one_after_causal" || dc.c.name == "one_token_docs_full")
      cases.push_back(dc);
  // Windows ending on and next to the tiles' borders, and one with documents.
  for (const DocCase& dc : attn_testing::window_cases())
    if (dc.c.name == "S700_W256" || dc.c.name == "S700_W129" || dc.c.name == "docs_short_W100")
      cases.push_back(dc);
  for (const DocCase& dc : cases) {
    SCOPED_TRACE(dc.c.name);
    const auto problem = [&dc] {
      Problem pb(dc.c, false);
      if (!dc.lengths.empty()) pb.doc_ids = attn_testing::doc_ids_of(dc.c, dc.lengths);
      return pb;
    };
    const Reference ref(problem());
    for (const char* path : paths()) {
      const ScopedEnv env("WALLFACER_BF16_PATH", path);
      for (const LevelKernels& lk : levels_this_cpu_runs()) {
        Problem pb = problem();
        lk.attn_fwd_bf16(pb.fwd_params());
        lk.attn_bwd_preprocess_bf16(pb.d, pb.o.h.data(), pb.qs(), pb.dout.data(), pb.qs(),
                                    pb.delta.data(), pb.ls());
        lk.attn_bwd_bf16(pb.bwd_params());
        expect_within(errors(pb, ref), false, lk.name() + " " + path);
      }
    }
  }
}

// Sliding windows (AttnFwdBf16Params::window) against the reference with the same window, on
// every path (and with the documents of the case, if any).
class AttnBf16WindowVsReference : public ::testing::TestWithParam<DocCase> {};

TEST_P(AttnBf16WindowVsReference, ForwardAndBackward) {
  check_case(GetParam().c, false, GetParam().lengths);
}

INSTANTIATE_TEST_SUITE_P(Cases, AttnBf16WindowVsReference,
                         ::testing::ValuesIn(attn_testing::window_cases()),
                         [](const ::testing::TestParamInfo<DocCase>& i) { return i.param.c.name; });

// A window as long as the sequence gives the bits of the causal mask.
TEST(AttnBf16Window, WindowOfTheSequenceIsBitIdenticalToCausal) {
  const Case c{1, 600, 600, 4, 2, 16, true, 0, 0, "causal"};
  Problem with(c, false), without(c, false);
  with.c.window = 600;
  for (Problem* pb : {&with, &without}) {
    pb->forward();
    pb->backward();
  }
  expect_same_bits(with, without, "window 600");
}

// One document spanning every position gives the bits of a call without documents.
TEST(AttnBf16Docs, OneDocumentIsBitIdenticalToNoDocuments) {
  for (bool causal : {false, true}) {
    const Case c{1, 600, 600, 4, 2, 16, causal, 0, 0, causal ? "causal" : "full"};
    Problem plain(c, false), packed(c, false);
    packed.doc_ids = attn_testing::doc_ids_of(c, {600});
    for (Problem* pb : {&plain, &packed}) {
      pb->forward();
      pb->backward();
    }
    expect_same_bits(plain, packed, c.name);
  }
}

// fp32 outputs hold the result before its last rounding: closer to the reference, and rounding
// them gives exactly the bf16 outputs.
TEST(AttnBf16, Fp32OutputsAreTheUnroundedResult) {
  for (const Case& c : {Case{1, 97, 97, 2, 1, 64, true, 0, 0, "fp32_out_causal"},
                        Case{2, 50, 70, 4, 2, 40, false, 0, 0, "fp32_out_gqa"}}) {
    check_case(c, true);
    Problem h(c, false), f(c, true);
    h.forward();
    h.backward();
    f.forward();
    f.backward();
    EXPECT_EQ(h.o.h, to_bf16(f.o.f)) << c.name;
    EXPECT_TRUE(same_bits(h.lse, f.lse)) << c.name;
    EXPECT_EQ(h.dq.h, to_bf16(f.dq.f)) << c.name;
    EXPECT_EQ(h.dk.h, to_bf16(f.dk.f)) << c.name;
    EXPECT_EQ(h.dv.h, to_bf16(f.dv.f)) << c.name;
  }
}

// Keys in three blocks, each run with its global k_pos0: the forward merges into a running fp32
// (O, LSE) with accumulate=true, the backward adds each block's dQ into fp32 dq; both equal the
// whole problem within the tolerances, on each path.
TEST(AttnBf16, KeySplitsAccumulateToWhole) {
  const Case c{2, 77, 300, 4, 2, 32, true, 200, 0, "split"};
  const int cuts[] = {0, 37, 64, 300};
  for (const char* path : paths()) {
    const ScopedEnv env("WALLFACER_BF16_PATH", path);
    Problem whole(c, true);
    const auto qs = whole.qs();
    const auto ls = whole.ls();
    attn_fwd_init_output(whole.d, whole.o.f.data(), qs, whole.lse.data(), ls);
    auto block = [&](int part, auto&& params) {
      params.dims.seq_k = cuts[part + 1] - cuts[part];
      params.k_pos0 = cuts[part];
      const int64_t off = int64_t(cuts[part]) * params.k_stride.seq;
      params.k += off;
      params.v += off;
      return off;
    };
    for (int part = 0; part < 3; ++part) {
      AttnFwdBf16Params fp = whole.fwd_params();
      block(part, fp);
      fp.accumulate = true;
      attn_fwd_bf16(fp);
    }
    const std::vector<bf16> o16 = to_bf16(whole.o.f);
    attn_bwd_preprocess_bf16(whole.d, o16.data(), qs, whole.dout.data(), qs, whole.delta.data(),
                             ls);
    for (int part = 0; part < 3; ++part) {
      AttnBwdBf16Params bp = whole.bwd_params();
      const int64_t off = block(part, bp);
      bp.dk.fp32_data += off;
      bp.dv.fp32_data += off;
      // dq accumulates; each block's dk, dv rows start at zero, so adding equals writing
      bp.accumulate = part > 0;
      attn_bwd_bf16(bp);
    }
    const Reference ref(whole);
    expect_within(errors(whole, ref), true, std::string("split ") + path);
  }
}

TEST(AttnBf16, BackwardAccumulateAdds) {
  const Case c{1, 50, 60, 4, 2, 16, false, 0, 0, "acc"};
  Problem pb(c, true);
  const Reference ref(pb);
  pb.forward();
  const auto g0q = random_floats(pb.nq(), 11), g0k = random_floats(pb.nk(), 12),
             g0v = random_floats(pb.nk(), 13);
  pb.dq.f = g0q, pb.dk.f = g0k, pb.dv.f = g0v;
  const std::vector<bf16> o16 = to_bf16(pb.o.f);
  attn_bwd_preprocess_bf16(pb.d, o16.data(), pb.qs(), pb.dout.data(), pb.qs(), pb.delta.data(),
                           pb.ls());
  AttnBwdBf16Params bp = pb.bwd_params();
  bp.accumulate = true;
  attn_bwd_bf16(bp);
  EXPECT_LE(rel_err(pb.dq.f, attn_testing::plus(ref.dq, g0q)), kTolGradFp32);
  EXPECT_LE(rel_err(pb.dk.f, attn_testing::plus(ref.dk, g0k)), kTolGradFp32);
  EXPECT_LE(rel_err(pb.dv.f, attn_testing::plus(ref.dv, g0v)), kTolGradFp32);
}

TEST(AttnBf16, FullyMaskedRowsAreZeroAndFinite) {
  // Query rows at positions 0..39 against keys at 20..119: rows 0..19 see nothing; keys beyond
  // position 39 are seen by no query. And a key block entirely in the future.
  for (const char* path : paths()) {
    const ScopedEnv env("WALLFACER_BF16_PATH", path);
    Problem pb({1, 40, 100, 2, 1, 8, true, 0, 20, "masked"}, false);
    std::fill(pb.o.h.begin(), pb.o.h.end(), to_bf16(123.0f));  // must be overwritten
    pb.forward();
    pb.backward();
    const int D = pb.c.head_dim;
    const auto o = pb.o.values(), dq = pb.dq.values(), dk = pb.dk.values(), dv = pb.dv.values();
    for (int h = 0; h < pb.c.heads; ++h)
      for (int i = 0; i < pb.c.seq_q; ++i) {
        const float l = pb.lse[size_t(h) * pb.c.seq_q + i];
        for (int x = 0; x < D; ++x) {
          const size_t at = (size_t(i) * pb.c.heads + h) * D + x;
          ASSERT_TRUE(std::isfinite(o[at]) && std::isfinite(dq[at]));
          if (i < 20) {
            EXPECT_TRUE(o[at] == 0.0f && dq[at] == 0.0f) << path;
          }
        }
        EXPECT_EQ(i < 20, l == kNegInf) << path << " row " << i;
      }
    for (size_t x = 0; x < dk.size(); ++x) {
      ASSERT_TRUE(std::isfinite(dk[x]) && std::isfinite(dv[x]));
      if (x / D >= 20) {
        EXPECT_TRUE(dk[x] == 0.0f && dv[x] == 0.0f) << path;
      }
    }
    expect_within(errors(pb, Reference(pb)), false, std::string("masked ") + path);

    Problem fut({1, 30, 30, 2, 2, 8, true, 0, 30, "future"}, false);
    fut.forward();
    fut.backward();
    for (float x : fut.o.values()) EXPECT_EQ(x, 0.0f);
    for (float x : fut.lse) EXPECT_EQ(x, kNegInf);
    for (const Out* g : {&fut.dq, &fut.dk, &fut.dv})
      for (float x : g->values()) EXPECT_EQ(x, 0.0f);
  }
}

// One (batch, kv head) task and 4 threads: the backward splits the keys into parts with private
// fp32 dQ buffers. Still within tolerance and deterministic, on each path.
TEST(AttnBf16, BackwardSplitsKeysWhenFewTasks) {
  const ScopedEnv threads("OMP_NUM_THREADS", "4");
  const Case c{1, 200, 700, 4, 1, 16, true, 400, 0, "mqa_split"};
  std::vector<Problem> runs;
  for (const char* path : paths()) {
    const ScopedEnv env("WALLFACER_BF16_PATH", path);
    for (int rep = 0; rep < 2; ++rep) {
      Problem pb(c, false);
      pb.forward();
      pb.backward();
      runs.push_back(std::move(pb));
    }
  }
  for (size_t i = 0; i < runs.size(); i += 2) {
    expect_within(errors(runs[i], Reference(runs[i])), false, "mqa_split");
    expect_same_bits(runs[i], runs[i + 1], "mqa_split");
  }
  EXPECT_GT(attn_bwd_bf16_workspace_bytes(runs[0].d, 4, true),
            attn_bwd_bf16_workspace_bytes(runs[0].d, 1, true));
}

// The portable path widens the inputs to fp32 all at once, or, past detail::bf16_widen_budget(),
// one batch and a group of kv heads at a time: with a budget of one byte (a kv head per call) the
// results are those of one call, within the reference's tolerance and the forward bit for bit;
// with bf16 and fp32 outputs, GQA and two batches.
TEST(AttnBf16, PortablePathWidensHeadsInGroupsPastItsBudget) {
  const ScopedEnv env("WALLFACER_BF16_PATH", "portable");
  const Case c{2, 70, 90, 6, 3, 24, true, 20, 0, "sliced"};
  for (bool fp32_outputs : {false, true}) {
    std::vector<Problem> runs;
    for (int64_t budget : {int64_t(256) << 20, int64_t(1)}) {
      int64_t& b = detail::bf16_widen_budget();
      const int64_t saved = b;
      b = budget;
      Problem pb(c, fp32_outputs);
      pb.forward();
      pb.backward();
      b = saved;
      runs.push_back(std::move(pb));
    }
    const Reference ref(runs[0]);
    for (const Problem& pb : runs) expect_within(errors(pb, ref), fp32_outputs, "sliced");
    EXPECT_TRUE(same_bits(runs[0].o.values(), runs[1].o.values()));
    EXPECT_TRUE(same_bits(runs[0].lse, runs[1].lse));
  }
}

// q, k, v, dout, the outputs, lse and delta in the strided layout of attn_testing::StridedLayout:
// the same bits as the contiguous run.
TEST(AttnBf16, NonContiguousStrides) {
  const Case c{2, 45, 45, 3, 3, 20, true, 0, 0, "strided"};
  Problem pb(c, false);
  pb.forward();
  pb.backward();
  attn_testing::StridedLayout<bf16> lay(pb);
  const bf16 sentinel = to_bf16(7.0f);
  std::vector<bf16> o(lay.padded_size(), sentinel), dq(o.size()), dk(o.size()), dv(o.size());
  AttnFwdBf16Params fp;
  lay.set_inputs(fp, pb.d, pb.scale(), true);
  fp.o = {o.data(), nullptr}, fp.o_stride = lay.padded;
  attn_fwd_bf16(fp);
  attn_bwd_preprocess_bf16(pb.d, o.data(), lay.padded, lay.dout.data(), lay.padded,
                           lay.delta.data(), lay.lpad);
  AttnBwdBf16Params bp;
  lay.set_inputs(bp, pb.d, pb.scale(), true);
  bp.dq = {dq.data(), nullptr}, bp.dq_stride = lay.padded;
  bp.dk = {dk.data(), nullptr}, bp.dk_stride = lay.padded;
  bp.dv = {dv.data(), nullptr}, bp.dv_stride = lay.padded;
  attn_bwd_bf16(bp);
  EXPECT_EQ(lay.gather(o), pb.o.h);
  EXPECT_TRUE(same_bits(lay.gather_lse(), pb.lse));
  EXPECT_EQ(lay.gather(dq), pb.dq.h);
  EXPECT_EQ(lay.gather(dk), pb.dk.h);
  EXPECT_EQ(lay.gather(dv), pb.dv.h);
  EXPECT_TRUE(lay.padding_is(o, sentinel));
  expect_within(errors(pb, Reference(pb)), false, "strided");
}

TEST(AttnBf16, ChecksArguments) {
  Problem pb({1, 4, 4, 4, 2, 8, false, 0, 0, "args"}, false);
  AttnFwdBf16Params p = pb.fwd_params();
  p.q = nullptr;
  EXPECT_THROW(attn_fwd_bf16(p), Error);
  p = pb.fwd_params();
  p.dims.kv_heads = 3;
  EXPECT_THROW(attn_fwd_bf16(p), Error);
  p = pb.fwd_params();
  p.o.bf16_data = nullptr;  // neither output set
  EXPECT_THROW(attn_fwd_bf16(p), Error);
  std::vector<float> o32(pb.nq());
  p = pb.fwd_params();
  p.o.fp32_data = o32.data();  // both set
  EXPECT_THROW(attn_fwd_bf16(p), Error);
  p = pb.fwd_params();
  p.accumulate = true;  // a bf16 running output
  EXPECT_THROW(attn_fwd_bf16(p), Error);
  AttnBwdBf16Params bp = pb.bwd_params();
  bp.delta = nullptr;
  EXPECT_THROW(attn_bwd_bf16(bp), Error);
  bp = pb.bwd_params();
  bp.accumulate = true;
  EXPECT_THROW(attn_bwd_bf16(bp), Error);
  bp = pb.bwd_params();
  bp.dims.head_dim = 257;
  EXPECT_THROW(attn_bwd_bf16(bp), Error);
}

TEST(AttnBf16, PathFromEnvironment) {
  {
    const ScopedEnv env("WALLFACER_BF16_PATH", nullptr);
    EXPECT_EQ(bf16_path(), bf16_amx_available()      ? Bf16Path::amx
                           : bf16_avx512_available() ? Bf16Path::avx512
                                                     : Bf16Path::portable);
  }
  {
    const ScopedEnv env("WALLFACER_BF16_PATH", "auto");
    EXPECT_EQ(bf16_path(), bf16_amx_available()      ? Bf16Path::amx
                           : bf16_avx512_available() ? Bf16Path::avx512
                                                     : Bf16Path::portable);
  }
  {
    const ScopedEnv env("WALLFACER_BF16_PATH", "portable");
    EXPECT_EQ(bf16_path(), Bf16Path::portable);
  }
  {
    const ScopedEnv env("WALLFACER_BF16_PATH", "fast");
    EXPECT_THROW(bf16_path(), UsageError);
    Problem pb({1, 4, 4, 1, 1, 8, false, 0, 0, "env"}, false);
    EXPECT_THROW(pb.forward(), UsageError);
  }
  {
    const ScopedEnv env("WALLFACER_BF16_PATH", "avx512");
    if (bf16_avx512_available())
      EXPECT_EQ(bf16_path(), Bf16Path::avx512);
    else
      EXPECT_THROW(bf16_path(), UsageError);
  }
  {
    const ScopedEnv env("WALLFACER_BF16_PATH", "amx");
    if (bf16_amx_available()) {
      EXPECT_EQ(bf16_path(), Bf16Path::amx);
      EXPECT_STREQ(bf16_path_name(Bf16Path::amx), "amx");
    } else {
      try {  // the message names what is missing
        bf16_path();
        ADD_FAILURE() << "WALLFACER_BF16_PATH=amx accepted without AMX";
      } catch (const UsageError& e) {
        EXPECT_NE(std::string(e.what()).find("WALLFACER_BF16_PATH=amx, but"), std::string::npos)
            << e.what();
      }
    }
  }
}

}  // namespace
}  // namespace wallfacer::kernels
