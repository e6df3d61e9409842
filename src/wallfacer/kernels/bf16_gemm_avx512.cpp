// The AVX512-BF16 code path of bf16_gemm.h. This file alone is compiled with
// -mavx512f -mavx512bf16 -mavx512vl -mavx512bw (no -march), so the rest of the program runs on
// any x86-64; it is called only after __builtin_cpu_supports("avx512bf16") said yes.

#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "wallfacer/kernels/bf16_gemm.h"

namespace wallfacer::kernels::detail {
namespace {

// One register block: 4 rows of C by 4 vectors of 16 columns, 16 fp32 accumulators held in
// variables (an array of them would go through the stack at every block's start and end). Each
// step loads 4 vectors of B (16 column pairs each) and broadcasts one pair of A per row. A block at
// the edge of C repeats its last row (not stored) and masks its missing columns: B loaded as zero,
// C neither read nor written.
struct Block {
  int rows;        // 1..4 rows of C from row i0
  __mmask16 c[4];  // columns of each vector of C read and written
  __mmask32 b[4];  // pairs of each vector of B loaded
};

inline __m512 load_c(const Bf16Gemm& g, const float* c, __mmask16 m) {
  return g.accumulate ? _mm512_maskz_loadu_ps(m, c) : _mm512_setzero_ps();
}

inline __m512bh broadcast_pair(const bf16* a) {
  int32_t pair;
  std::memcpy(&pair, a, sizeof(pair));
  return (__m512bh)_mm512_set1_epi32(pair);
}

void block(const Bf16Gemm& g, int i0, int c0, const Block& k) {
  const bf16* a0 = g.a + i0 * g.lda;
  const bf16* a1 = g.a + (i0 + std::min(1, k.rows - 1)) * g.lda;
  const bf16* a2 = g.a + (i0 + std::min(2, k.rows - 1)) * g.lda;
  const bf16* a3 = g.a + (i0 + std::min(3, k.rows - 1)) * g.lda;
  float* r0 = g.c + i0 * g.ldc + c0;
  float* r1 = k.rows > 1 ? r0 + g.ldc : r0;
  float* r2 = k.rows > 2 ? r1 + g.ldc : r0;
  float* r3 = k.rows > 3 ? r2 + g.ldc : r0;
  __m512 c00 = load_c(g, r0, k.c[0]), c01 = load_c(g, r0 + 16, k.c[1]),
         c02 = load_c(g, r0 + 32, k.c[2]), c03 = load_c(g, r0 + 48, k.c[3]);
  __m512 c10 = _mm512_setzero_ps(), c11 = c10, c12 = c10, c13 = c10;
  __m512 c20 = c10, c21 = c10, c22 = c10, c23 = c10;
  __m512 c30 = c10, c31 = c10, c32 = c10, c33 = c10;
  if (k.rows > 1) {
    c10 = load_c(g, r1, k.c[0]), c11 = load_c(g, r1 + 16, k.c[1]);
    c12 = load_c(g, r1 + 32, k.c[2]), c13 = load_c(g, r1 + 48, k.c[3]);
  }
  if (k.rows > 2) {
    c20 = load_c(g, r2, k.c[0]), c21 = load_c(g, r2 + 16, k.c[1]);
    c22 = load_c(g, r2 + 32, k.c[2]), c23 = load_c(g, r2 + 48, k.c[3]);
  }
  if (k.rows > 3) {
    c30 = load_c(g, r3, k.c[0]), c31 = load_c(g, r3 + 16, k.c[1]);
    c32 = load_c(g, r3 + 32, k.c[2]), c33 = load_c(g, r3 + 48, k.c[3]);
  }
  const bf16* b = g.b + 2 * c0;
  const int kp = g.kp;
  const int64_t ldb = g.ldb;
  for (int t = 0; t < kp; ++t, b += ldb) {
    const __m512bh b0 = (__m512bh)_mm512_maskz_loadu_epi16(k.b[0], b);
    const __m512bh b1 = (__m512bh)_mm512_maskz_loadu_epi16(k.b[1], b + 32);
    const __m512bh b2 = (__m512bh)_mm512_maskz_loadu_epi16(k.b[2], b + 64);
    const __m512bh b3 = (__m512bh)_mm512_maskz_loadu_epi16(k.b[3], b + 96);
    __m512bh x = broadcast_pair(a0 + 2 * t);
    c00 = _mm512_dpbf16_ps(c00, x, b0), c01 = _mm512_dpbf16_ps(c01, x, b1);
    c02 = _mm512_dpbf16_ps(c02, x, b2), c03 = _mm512_dpbf16_ps(c03, x, b3);
    x = broadcast_pair(a1 + 2 * t);
    c10 = _mm512_dpbf16_ps(c10, x, b0), c11 = _mm512_dpbf16_ps(c11, x, b1);
    c12 = _mm512_dpbf16_ps(c12, x, b2), c13 = _mm512_dpbf16_ps(c13, x, b3);
    x = broadcast_pair(a2 + 2 * t);
    c20 = _mm512_dpbf16_ps(c20, x, b0), c21 = _mm512_dpbf16_ps(c21, x, b1);
    c22 = _mm512_dpbf16_ps(c22, x, b2), c23 = _mm512_dpbf16_ps(c23, x, b3);
    x = broadcast_pair(a3 + 2 * t);
    c30 = _mm512_dpbf16_ps(c30, x, b0), c31 = _mm512_dpbf16_ps(c31, x, b1);
    c32 = _mm512_dpbf16_ps(c32, x, b2), c33 = _mm512_dpbf16_ps(c33, x, b3);
  }
  _mm512_mask_storeu_ps(r0, k.c[0], c00), _mm512_mask_storeu_ps(r0 + 16, k.c[1], c01);
  _mm512_mask_storeu_ps(r0 + 32, k.c[2], c02), _mm512_mask_storeu_ps(r0 + 48, k.c[3], c03);
  if (k.rows > 1) {
    _mm512_mask_storeu_ps(r1, k.c[0], c10), _mm512_mask_storeu_ps(r1 + 16, k.c[1], c11);
    _mm512_mask_storeu_ps(r1 + 32, k.c[2], c12), _mm512_mask_storeu_ps(r1 + 48, k.c[3], c13);
  }
  if (k.rows > 2) {
    _mm512_mask_storeu_ps(r2, k.c[0], c20), _mm512_mask_storeu_ps(r2 + 16, k.c[1], c21);
    _mm512_mask_storeu_ps(r2 + 32, k.c[2], c22), _mm512_mask_storeu_ps(r2 + 48, k.c[3], c23);
  }
  if (k.rows > 3) {
    _mm512_mask_storeu_ps(r3, k.c[0], c30), _mm512_mask_storeu_ps(r3 + 16, k.c[1], c31);
    _mm512_mask_storeu_ps(r3 + 32, k.c[2], c32), _mm512_mask_storeu_ps(r3 + 48, k.c[3], c33);
  }
}

}  // namespace

bool bf16_gemm_avx512_built() { return true; }

void bf16_gemm_avx512(const Bf16Gemm& g) {
  // Groups of 4 vectors (64 columns) outermost: one group's slice of B (kp x 64 column pairs)
  // stays in L1 across the rows.
  for (int c0 = 0; c0 < g.n; c0 += 64) {
    Block k{};
    for (int v = 0; v < 4; ++v) {
      const int cols = std::clamp(g.n - c0 - 16 * v, 0, 16);
      k.c[v] = __mmask16((1u << cols) - 1);
      k.b[v] = cols > 0 ? __mmask32(0xffffffffu) : __mmask32(0);  // B rows are padded to 16
    }
    for (int i0 = 0; i0 < g.m; i0 += 4) {
      k.rows = std::min(4, g.m - i0);
      block(g, i0, c0, k);
    }
  }
}

}  // namespace wallfacer::kernels::detail
