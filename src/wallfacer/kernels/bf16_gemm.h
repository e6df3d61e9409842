#pragma once
// Products of bf16 tiles with fp32 accumulation: the one operation of the bf16 attention kernels
// that has two code paths (AVX512-BF16 intrinsics and portable C++). Internal to the kernels.
//
//   C (m x n, fp32) = [C +] A (m x 2 kp, bf16) B (2 kp x n, bf16)
//
// A: row i holds its 2 kp values contiguously from a + i * lda (lda even, >= 2 kp).
// B: packed in pairs of rows: element (2t + r, c) is b[t * ldb + 2c + r]. Rows are readable up to
//    column round_up(n, 16) (ldb >= 2 round_up(n, 16)); columns at n and beyond are not used.
// C: row i at c + i * ldc, columns [0, n) read (with accumulate) and written, nothing else.
//
// The product of two bf16 values is exact in fp32 and both paths sum in fp32, each in its own
// order. On the avx512 path every C element is one fp32 chain over t = 0, 1, ..., kp - 1, each
// step being what one lane of the VDPBF16PS instruction does (measured bit for bit on the CPU,
// docs/numerics.md; tests/unit/test_attention_bf16.cpp holds the model):
//   c = flush(fma(a[2t + 1], b[2t + 1], flush(c)));  c = flush(fma(a[2t], b[2t], c))
// with subnormal inputs read as zero and subnormal results flushed to zero (sign kept).

#include <cblas.h>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstring>
#include <vector>

#include "wallfacer/core/bf16.h"

namespace wallfacer::kernels::detail {

struct Bf16Gemm {
  int m = 0, n = 0, kp = 0;
  const bf16* a = nullptr;
  int64_t lda = 0;
  const bf16* b = nullptr;
  int64_t ldb = 0;
  float* c = nullptr;
  int64_t ldc = 0;
  bool accumulate = false;  // false: C starts from 0
};

// The portable path: A and B widened to fp32 (exact), then cblas_sgemm. Every product is exact and
// the sums are fp32 in sgemm's order, not the instruction's: the results differ from
// bf16_gemm_avx512's in the last bits of C. Deterministic for given sizes. Inline, so that the
// kernels compiled per instruction-set level (kernels/isa.h) widen with their level's vectors;
// bf16_gemm_portable is its plain x86-64 copy.
[[gnu::always_inline]] inline void bf16_gemm_widened(const Bf16Gemm& g) {
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

void bf16_gemm_portable(const Bf16Gemm& g);

// AVX512-BF16 intrinsics (bf16_gemm_avx512.cpp, compiled with its own -m flags). Call only when
// bf16_gemm_avx512_built() and the CPU reports avx512_bf16.
void bf16_gemm_avx512(const Bf16Gemm& g);
bool bf16_gemm_avx512_built();

}  // namespace wallfacer::kernels::detail
