// The AVX512-BF16 code path of bf16_gemm.h. This file alone is compiled with
// -mavx512f -mavx512bf16 -mavx512vl -mavx512bw (no -march), so the rest of the program runs on
// any x86-64; it is called only after __builtin_cpu_supports("avx512bf16") said yes.

#include <immintrin.h>

#include <cstring>

#include "wallfacer/kernels/bf16_gemm.h"

namespace wallfacer::kernels::detail {
namespace {

// Register block: R rows of C by N vectors of 16 columns, R * N fp32 accumulators. Each step t
// loads N vectors of B (16 column pairs each) and broadcasts one pair of A per row.
constexpr int kRows = 4;
constexpr int kVecs = 4;

template <int R, int N>
void block(const Bf16Gemm& g, int i0, int c0, __mmask16 last) {
  __m512 acc[R][N];
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < N; ++v) {
      const float* c = g.c + (i0 + r) * g.ldc + c0 + 16 * v;
      if (!g.accumulate)
        acc[r][v] = _mm512_setzero_ps();
      else
        acc[r][v] = v == N - 1 ? _mm512_maskz_loadu_ps(last, c) : _mm512_loadu_ps(c);
    }
  const bf16* a = g.a + i0 * g.lda;
  const bf16* b = g.b + 2 * c0;
  for (int t = 0; t < g.kp; ++t) {
    __m512bh bv[N];
    for (int v = 0; v < N; ++v)
      bv[v] = (__m512bh)_mm512_loadu_si512(static_cast<const void*>(b + t * g.ldb + 32 * v));
    for (int r = 0; r < R; ++r) {
      int32_t pair;
      std::memcpy(&pair, a + r * g.lda + 2 * t, sizeof(pair));
      const __m512bh av = (__m512bh)_mm512_set1_epi32(pair);
      for (int v = 0; v < N; ++v) acc[r][v] = _mm512_dpbf16_ps(acc[r][v], av, bv[v]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < N; ++v) {
      float* c = g.c + (i0 + r) * g.ldc + c0 + 16 * v;
      if (v == N - 1)
        _mm512_mask_storeu_ps(c, last, acc[r][v]);
      else
        _mm512_storeu_ps(c, acc[r][v]);
    }
}

// All rows of one group of N vectors: blocks of kRows rows, then the remaining rows.
template <int N>
void rows(const Bf16Gemm& g, int c0, __mmask16 last) {
  int i = 0;
  for (; i + kRows <= g.m; i += kRows) block<kRows, N>(g, i, c0, last);
  switch (g.m - i) {
    case 3:
      block<3, N>(g, i, c0, last);
      break;
    case 2:
      block<2, N>(g, i, c0, last);
      break;
    case 1:
      block<1, N>(g, i, c0, last);
      break;
    default:
      break;
  }
}

}  // namespace

bool bf16_gemm_avx512_built() { return true; }

void bf16_gemm_avx512(const Bf16Gemm& g) {
  static_assert(kRows == 4 && kVecs == 4, "rows() and the switch below spell out the remainders");
  const int vecs = (g.n + 15) / 16;
  const int tail = g.n % 16;
  // Column groups outermost: one group's slice of B (kp x 16 N pairs) stays in L1 across rows.
  for (int v0 = 0; v0 < vecs; v0 += kVecs) {
    const int nv = vecs - v0 < kVecs ? vecs - v0 : kVecs;
    const bool has_last = v0 + nv == vecs;
    const __mmask16 last = has_last && tail ? __mmask16((1u << tail) - 1) : __mmask16(0xffff);
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
