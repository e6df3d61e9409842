// The AVX512-BF16 code path of bf16_gemm.h. This file alone is compiled with
// -mavx512f -mavx512bf16 -mavx512vl -mavx512bw (no -march), so the rest of the program runs on
// any x86-64; it is called only after __builtin_cpu_supports("avx512bf16") said yes.

#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "wallfacer/kernels/bf16_gemm.h"

namespace wallfacer::kernels::detail {
namespace {

inline __m512 load_c(const Bf16Gemm& g, const float* c, __mmask16 m) {
  return g.accumulate ? _mm512_maskz_loadu_ps(m, c) : _mm512_setzero_ps();
}

inline __m512bh broadcast_pair(const bf16* a) {
  int32_t pair;
  std::memcpy(&pair, a, sizeof(pair));
  return (__m512bh)_mm512_set1_epi32(pair);
}

inline __m512bh load_b(const bf16* b) {
  return (__m512bh)_mm512_loadu_si512(static_cast<const void*>(b));
}

// One register block: 4 rows of C by N vectors of 16 columns, up to 16 fp32 accumulators held in
// variables (an array of them would go through the stack at every block's start and end). Each
// step loads N vectors of B (16 column pairs each) and broadcasts one pair of A per row. A block at
// the bottom edge of C repeats its last row (not stored); `last` masks the columns of the last
// vector (B rows are padded to whole vectors, so they are loaded whole).
template <int N>
void block(const Bf16Gemm& g, int i0, int rows, int c0, __mmask16 last) {
  const auto mask = [last](int v) { return v == N - 1 ? last : __mmask16(0xffff); };
  const bf16* a[4];
  float* r[4];
  for (int x = 0; x < 4; ++x) {
    const int row = i0 + std::min(x, rows - 1);
    a[x] = g.a + row * g.lda;
    r[x] = g.c + row * g.ldc + c0;
  }
  __m512 c00 = _mm512_setzero_ps(), c01 = c00, c02 = c00, c03 = c00;
  __m512 c10 = c00, c11 = c00, c12 = c00, c13 = c00;
  __m512 c20 = c00, c21 = c00, c22 = c00, c23 = c00;
  __m512 c30 = c00, c31 = c00, c32 = c00, c33 = c00;
  const auto load_row = [&](int x, __m512& v0, __m512& v1, __m512& v2, __m512& v3) {
    if (x >= rows) return;
    v0 = load_c(g, r[x], mask(0));
    if constexpr (N > 1) v1 = load_c(g, r[x] + 16, mask(1));
    if constexpr (N > 2) v2 = load_c(g, r[x] + 32, mask(2));
    if constexpr (N > 3) v3 = load_c(g, r[x] + 48, mask(3));
  };
  load_row(0, c00, c01, c02, c03);
  load_row(1, c10, c11, c12, c13);
  load_row(2, c20, c21, c22, c23);
  load_row(3, c30, c31, c32, c33);
  // The rows of the next block (when there is one) are fetched into L1 while this one computes:
  // its C rows now, its A rows a cache line (16 pairs) at a time as this block's steps reach it.
  const int next = i0 + 4 < g.m ? i0 + 4 : -1;
  const auto a_next = [&](int x) { return g.a + (next + std::min(x, g.m - 1 - next)) * g.lda; };
  if (next >= 0 && g.accumulate)
    for (int x = 0; x < 4 && next + x < g.m; ++x)
      for (int v = 0; v < N; ++v)
        _mm_prefetch(reinterpret_cast<const char*>(g.c + (next + x) * g.ldc + c0 + 16 * v),
                     _MM_HINT_T0);
  const bf16* b = g.b + 2 * c0;
  __m512bh b0, b1 = {}, b2 = {}, b3 = {};
  const auto step_row = [&](const bf16* at, __m512& v0, __m512& v1, __m512& v2, __m512& v3) {
    const __m512bh x = broadcast_pair(at);
    v0 = _mm512_dpbf16_ps(v0, x, b0);
    if constexpr (N > 1) v1 = _mm512_dpbf16_ps(v1, x, b1);
    if constexpr (N > 2) v2 = _mm512_dpbf16_ps(v2, x, b2);
    if constexpr (N > 3) v3 = _mm512_dpbf16_ps(v3, x, b3);
  };
  for (int t = 0; t < g.kp; ++t, b += g.ldb) {
    if (next >= 0 && t % 16 == 0)
      for (int x = 0; x < 4; ++x)
        _mm_prefetch(reinterpret_cast<const char*>(a_next(x) + 2 * t), _MM_HINT_T0);
    b0 = load_b(b);
    if constexpr (N > 1) b1 = load_b(b + 32);
    if constexpr (N > 2) b2 = load_b(b + 64);
    if constexpr (N > 3) b3 = load_b(b + 96);
    step_row(a[0] + 2 * t, c00, c01, c02, c03);
    step_row(a[1] + 2 * t, c10, c11, c12, c13);
    step_row(a[2] + 2 * t, c20, c21, c22, c23);
    step_row(a[3] + 2 * t, c30, c31, c32, c33);
  }
  const auto store_row = [&](int x, __m512 v0, __m512 v1, __m512 v2, __m512 v3) {
    if (x >= rows) return;
    _mm512_mask_storeu_ps(r[x], mask(0), v0);
    if constexpr (N > 1) _mm512_mask_storeu_ps(r[x] + 16, mask(1), v1);
    if constexpr (N > 2) _mm512_mask_storeu_ps(r[x] + 32, mask(2), v2);
    if constexpr (N > 3) _mm512_mask_storeu_ps(r[x] + 48, mask(3), v3);
  };
  store_row(0, c00, c01, c02, c03);
  store_row(1, c10, c11, c12, c13);
  store_row(2, c20, c21, c22, c23);
  store_row(3, c30, c31, c32, c33);
}

// All rows of one group of N vectors from column c0.
template <int N>
void rows(const Bf16Gemm& g, int c0, __mmask16 last) {
  for (int i0 = 0; i0 < g.m; i0 += 4) block<N>(g, i0, std::min(4, g.m - i0), c0, last);
}

}  // namespace

bool bf16_gemm_avx512_built() { return true; }

void bf16_gemm_avx512(const Bf16Gemm& g) {
  const int vecs = (g.n + 15) / 16;
  const int tail = g.n % 16;
  // Groups of up to 4 vectors (64 columns) outermost: one group's slice of B (kp x 64 column
  // pairs) stays in L1 across the rows.
  for (int v0 = 0; v0 < vecs; v0 += 4) {
    const int nv = std::min(4, vecs - v0);
    const __mmask16 last =
        v0 + nv == vecs && tail ? __mmask16((1u << tail) - 1) : __mmask16(0xffff);
    switch (nv) {
      case 4:
        rows<4>(g, 16 * v0, last);
        break;
      case 3:
        rows<3>(g, 16 * v0, last);
        break;
      case 2:
        rows<2>(g, 16 * v0, last);
        break;
      default:
        rows<1>(g, 16 * v0, last);
        break;
    }
  }
}

}  // namespace wallfacer::kernels::detail
