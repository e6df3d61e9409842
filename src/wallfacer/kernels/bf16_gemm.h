#pragma once
// Products of bf16 tiles with fp32 accumulation, with AVX512-BF16 or AMX instructions: the tile
// products of the bf16 attention kernels' avx512 and amx paths (kernels/attention_bf16.cpp).
// Internal to the kernels.
//
//   C (m x n, fp32) = [C +] A (m x 2 kp, bf16) B (2 kp x n, bf16)
//
// A: row i holds its 2 kp values contiguously from a + i * lda (lda even, >= 2 kp).
// B: packed in pairs of rows: element (2t + r, c) is b[t * ldb + 2c + r]. Rows are readable up to
//    column round_up(n, 16) (ldb >= 2 round_up(n, 16)); columns at n and beyond are not used.
// C: row i at c + i * ldc, columns [0, n) read (with accumulate) and written, nothing else.
//
// The product of two bf16 values is exact in fp32 and the sums are fp32: every C element is one
// fp32 chain over t = 0, 1, ..., kp - 1, each step being what one lane of the VDPBF16PS
// instruction does (measured bit for bit on the CPU,
// docs/numerics.md; tests/unit/test_attention_bf16.cpp holds the model):
//   c = flush(fma(a[2t + 1], b[2t + 1], flush(c)));  c = flush(fma(a[2t], b[2t], c))
// with subnormal inputs read as zero and subnormal results flushed to zero (sign kept).

#include <cstdint>

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

// AVX512-BF16 intrinsics (bf16_gemm_avx512.cpp, compiled with its own -m flags). Call only when
// bf16_gemm_avx512_built() and the CPU reports avx512_bf16.
void bf16_gemm_avx512(const Bf16Gemm& g);
bool bf16_gemm_avx512_built();

// AMX intrinsics (bf16_gemm_amx.cpp, compiled with its own -m flags): the same product with
// TDPBF16PS on 16 x 16 tiles. Call only when bf16_amx_available() (kernels/attention_bf16.h), which
// also holds the kernel's permission to use the tile registers. Each call loads the tile
// configuration on the calling thread and releases the tiles before it returns. TDPBF16PS sums
// each pair of products and the chain over t in fp32 like VDPBF16PS, but its order of rounding is
// not documented bit for bit: the results agree with the avx512 path within a few fp32 roundings
// (tests/unit/test_attention_bf16.cpp).
void bf16_gemm_amx(const Bf16Gemm& g);
bool bf16_gemm_amx_built();

// The same product in steps, to interleave it with vector work on the calling thread (the AMX
// unit computes while the vector units run the softmax): between bf16_amx_begin() (loads the tile
// configuration) and bf16_amx_end() (releases the tiles), with no other tile user in between,
// bf16_gemm_amx_run(g, first, count) computes blocks [first, first + count) of the
// bf16_gemm_amx_blocks(g) blocks of C (32 x 32, columns outermost). Every block once, in any order
// and split, gives the result of bf16_gemm_amx(g), bit for bit.
void bf16_amx_begin();
void bf16_amx_end();
int bf16_gemm_amx_blocks(const Bf16Gemm& g);
void bf16_gemm_amx_run(const Bf16Gemm& g, int first, int count);

// The forward's softmax row on the amx path (bf16_gemm_amx.cpp, AVX-512 with AVX512-BF16):
// pt[j] = bf16(2^(s[j] scale - shift)) for j < n, returns the fp32 sum of the rounded values.
// 2^x is exp2_approx's (kernels/vec_math.h: the same clamp at -127, rounding of x, polynomial)
// with 2^n applied by VSCALEFPS and the rounding to bf16 by VCVTNEPS2BF16, which reads subnormal
// values as zero: results below 2^-126 become 0 where exp2_approx and to_bf16 would keep a
// subnormal bf16; the rest agree with bf16(exp2_approx(...)) to within an fp32 rounding before the
// bf16 one (s scale - shift is one fused step here).
float bf16_exp2_round_sum_amx(const float* s, int n, float scale, float shift, bf16* pt);
// The largest s[j] scale for j < n (-inf when n = 0) on the amx path, as the kernel's scaled_max.
float bf16_scaled_max_amx(const float* s, int n, float scale);

// The softmax rows of a chunk of the forward's amx path, for one key tile. Row i: its fp32 scores
// from s + i * lds, of which it sees columns [lo[i], hi[i]) (none when lo[i] >= hi[i]); m[i] the
// largest s scale it has seen (-inf before any) and l[i] the sum of its P so far. With m' the
// larger of m[i] and the row's largest visible s scale (bf16_scaled_max_amx): writes
// P[j] = bf16(2^(s[j] scale - m')) for j < n2 over the first 2 n2 bytes of the row (the values of
// bf16_exp2_round_sum_amx(s + lo, hi - lo, scale, m', P + lo), zero outside [lo, hi)), then
// m[i] = m', l[i] = l[i] alpha[i] + the sum of the row's P, where alpha[i] = 2^(m - m') (by
// exp2_approx's polynomial; exactly 1 when m' = m, then l[i] + the sum; 0 when m was -inf), the
// factor by which the caller multiplies its O row. A row that sees all of a tile of 256 columns is
// exponentiated against m[i] in one pass (no separate pass for its maximum) and kept when no value
// exceeds 2^0, which after the first key tiles is the common case; n2 <= 2 lds.
struct Bf16SoftmaxRows {
  float* s = nullptr;
  int64_t lds = 0;
  int rows = 0, n2 = 0;
  const int* lo = nullptr;
  const int* hi = nullptr;
  float scale = 0.0f;
  float* m = nullptr;
  float* l = nullptr;
  float* alpha = nullptr;
};
void bf16_softmax_rows_amx(const Bf16SoftmaxRows& r);

}  // namespace wallfacer::kernels::detail
