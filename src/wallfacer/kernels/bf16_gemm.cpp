#include "wallfacer/kernels/bf16_gemm.h"

#include <cblas.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <vector>

#include "wallfacer/core/error.h"

namespace wallfacer::kernels::detail {

void bf16_gemm_portable(const Bf16Gemm& g) {
  if (g.m == 0 || g.n == 0) return;
  const int64_t n = g.n, k = 2 * int64_t(g.kp);
  if (k == 0) {  // no products: C stays, or becomes zero
    if (!g.accumulate)
      for (int i = 0; i < g.m; ++i) std::fill_n(g.c + i * g.ldc, n, 0.0f);
    return;
  }
  // A widened row by row (m x k), B widened and unpaired (k x n): the 32-bit word of column col in
  // row pair t holds row 2t in its low half and row 2t + 1 in its high half. Widening is exact.
  // Buffers only grow: a resize that grows would zero what the loops below overwrite.
  thread_local std::vector<float> af, bf;
  if (af.size() < size_t(g.m * k)) af.resize(size_t(g.m * k));
  if (bf.size() < size_t(k * n)) bf.resize(size_t(k * n));
  for (int i = 0; i < g.m; ++i) {
    const uint16_t* __restrict a = &g.a[i * g.lda].bits;
    float* __restrict out = af.data() + i * k;
    for (int64_t e = 0; e < k; ++e) out[e] = std::bit_cast<float>(uint32_t(a[e]) << 16);
  }
  for (int t = 0; t < g.kp; ++t) {
    const bf16* b = g.b + t * g.ldb;
    float* __restrict r0 = bf.data() + 2 * t * n;
    float* __restrict r1 = r0 + n;
    for (int64_t col = 0; col < n; ++col) {
      uint32_t w;
      std::memcpy(&w, b + 2 * col, sizeof(w));
      r0[col] = std::bit_cast<float>(w << 16);
      r1[col] = std::bit_cast<float>(w & 0xffff0000u);
    }
  }
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, g.m, g.n, int(k), 1.0f, af.data(), int(k),
              bf.data(), g.n, g.accumulate ? 1.0f : 0.0f, g.c, int(g.ldc));
}

#ifndef WALLFACER_HAVE_AVX512BF16
// The compiler could not build bf16_gemm_avx512.cpp.
bool bf16_gemm_avx512_built() { return false; }
void bf16_gemm_avx512(const Bf16Gemm&) {
  WF_CHECK(false, "bf16_gemm_avx512: this build has no AVX512-BF16 code (compiler too old)");
}
#endif

}  // namespace wallfacer::kernels::detail
