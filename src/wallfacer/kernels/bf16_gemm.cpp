#include "wallfacer/kernels/bf16_gemm.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <vector>

#include "wallfacer/core/error.h"

namespace wallfacer::kernels::detail {
namespace {

// Subnormals to zero with their sign: exponent bits 0 keep only the sign bit.
inline float flush(float x) {
  const uint32_t u = std::bit_cast<uint32_t>(x);
  const uint32_t keep = (u & 0x7f800000u) == 0 ? 0x80000000u : 0xffffffffu;
  return std::bit_cast<float>(u & keep);
}

// bf16 as the instruction reads it: subnormals are zero.
inline float read(bf16 x) { return flush(to_float(x)); }

}  // namespace

void bf16_gemm_portable(const Bf16Gemm& g) {
  // B read once into fp32 (pair element r of row pair t at bf[(2t + r) * n + col]), then one C
  // row at a time with the column loop innermost, so that it vectorises while each element still
  // takes its steps in the order t = 0, 1, ...
  thread_local std::vector<float> bf;
  const int64_t n = g.n;
  bf.resize(size_t(2 * g.kp * n));
  for (int t = 0; t < g.kp; ++t)
    for (int64_t col = 0; col < n; ++col)
      for (int r = 0; r < 2; ++r) bf[(2 * t + r) * n + col] = read(g.b[t * g.ldb + 2 * col + r]);
  for (int i = 0; i < g.m; ++i) {
    float* __restrict c = g.c + i * g.ldc;
    if (!g.accumulate)
      std::fill(c, c + n, 0.0f);
    else if (g.kp > 0)  // the first step reads C as the instruction does: subnormals as zero
      for (int64_t col = 0; col < n; ++col) c[col] = flush(c[col]);
    const bf16* a = g.a + i * g.lda;
    for (int t = 0; t < g.kp; ++t) {
      const float a0 = read(a[2 * t]), a1 = read(a[2 * t + 1]);
      const float* __restrict b0 = bf.data() + 2 * t * n;
      const float* __restrict b1 = b0 + n;
      for (int64_t col = 0; col < n; ++col)
        c[col] = flush(std::fma(a0, b0[col], flush(std::fma(a1, b1[col], c[col]))));
    }
  }
}

#ifndef WALLFACER_HAVE_AVX512BF16
// The compiler could not build bf16_gemm_avx512.cpp.
bool bf16_gemm_avx512_built() { return false; }
void bf16_gemm_avx512(const Bf16Gemm&) {
  WF_CHECK(false, "bf16_gemm_avx512: this build has no AVX512-BF16 code (compiler too old)");
}
#endif

}  // namespace wallfacer::kernels::detail
