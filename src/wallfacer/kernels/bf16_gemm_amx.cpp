// The AMX code path of bf16_gemm.h. This file alone is compiled with -mamx-tile -mamx-bf16
// -mavx512f -mavx512bf16 -mavx512vl -mavx512bw (no -march), so the rest of the program runs on any
// x86-64; it is called only after bf16_amx_available() (kernels/attention_bf16.h) said yes, which
// includes avx512_bf16 and the kernel's permission to use the tile registers.
//
// The 8 tile registers: C 0-3 (a 32 x 32 block of C as 2 x 2 tiles of 16 x 16 fp32), A 4-5 (16 rows
// by 16 pairs), B 6-7 (16 pairs of rows by 16 columns, the pair layout of Bf16Gemm, which is the
// layout TDPBF16PS reads). Every tile is configured whole (16 rows of 64 bytes) for the whole call;
// tiles at the edges of A, B and C go through zero-padded copies on the thread's stack.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "wallfacer/kernels/bf16_gemm.h"
#include "wallfacer/kernels/exp2_avx512.h"

namespace wallfacer::kernels::detail {
namespace {

// Tile register numbers (gcc's intrinsics take them as literal tokens, hence macros).
#define WF_C00 0
#define WF_C01 1
#define WF_C10 2
#define WF_C11 3
#define WF_A0 4
#define WF_A1 5
#define WF_B0 6
#define WF_B1 7

// The tile configuration (palette 1): every tile 16 rows of 64 bytes.
struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
  TileConfig() {
    for (int t = 0; t < 8; ++t) colsb[t] = 64, rows[t] = 16;
  }
};
static_assert(sizeof(TileConfig) == 64);

// Zero-padded copies of the edge tiles of one block.
// (bytes: left uninitialised, each is written before it is read).
struct alignas(64) EdgeTiles {
  unsigned char a[2][1024], b[2][1024], c[4][1024];
};

// Where the A tile of rows [i0, i0 + 16) and pairs [t0, t0 + 16) is read from (a byte stride):
// A itself when whole, else a zero-padded copy.
inline const void* a_tile(const Bf16Gemm& g, int i0, int t0, unsigned char* pad, int64_t* stride) {
  const bf16* src = g.a + i0 * g.lda + 2 * t0;
  if (i0 + 16 <= g.m && t0 + 16 <= g.kp) {
    *stride = g.lda * int64_t(sizeof(bf16));
    return src;
  }
  const int rows = std::min(16, g.m - i0), pairs = std::min(16, g.kp - t0);
  std::memset(pad, 0, 1024);
  for (int r = 0; r < rows; ++r) std::memcpy(pad + 64 * r, src + r * g.lda, 4 * size_t(pairs));
  *stride = 64;
  return pad;
}

// The B tile of pairs [t0, t0 + 16) and columns [c0, c0 + 16) (readable whole, bf16_gemm.h).
inline const void* b_tile(const Bf16Gemm& g, int t0, int c0, unsigned char* pad, int64_t* stride) {
  const bf16* src = g.b + t0 * g.ldb + 2 * c0;
  if (t0 + 16 <= g.kp) {
    *stride = g.ldb * int64_t(sizeof(bf16));
    return src;
  }
  const int pairs = g.kp - t0;
  std::memset(pad, 0, 1024);
  for (int t = 0; t < pairs; ++t) std::memcpy(pad + 64 * t, src + t * g.ldb, 64);
  *stride = 64;
  return pad;
}

inline bool c_whole(const Bf16Gemm& g, int i0, int c0) { return i0 + 16 <= g.m && c0 + 16 <= g.n; }

// Where C tile (i0, c0) starts from with accumulate (null: from zero): C itself when whole, else
// a zero-padded copy.
inline const void* c_source(const Bf16Gemm& g, int i0, int c0, unsigned char* pad,
                            int64_t* stride) {
  if (!g.accumulate) return nullptr;
  float* c = g.c + i0 * g.ldc + c0;
  if (c_whole(g, i0, c0)) {
    *stride = g.ldc * int64_t(sizeof(float));
    return c;
  }
  const int rows = std::min(16, g.m - i0), cols = std::min(16, g.n - c0);
  std::memset(pad, 0, 1024);
  for (int r = 0; r < rows; ++r) std::memcpy(pad + 64 * r, c + r * g.ldc, 4 * size_t(cols));
  *stride = 64;
  return pad;
}

// Where C tile (i0, c0) is stored: C itself when whole, else the pad (then c_copy_back).
inline void* c_dest(const Bf16Gemm& g, int i0, int c0, unsigned char* pad, int64_t* stride) {
  if (c_whole(g, i0, c0)) {
    *stride = g.ldc * int64_t(sizeof(float));
    return g.c + i0 * g.ldc + c0;
  }
  *stride = 64;
  return pad;
}

inline void c_copy_back(const Bf16Gemm& g, int i0, int c0, const unsigned char* pad) {
  if (c_whole(g, i0, c0)) return;
  float* c = g.c + i0 * g.ldc + c0;
  const int rows = std::min(16, g.m - i0), cols = std::min(16, g.n - c0);
  for (int r = 0; r < rows; ++r) std::memcpy(c + r * g.ldc, pad + 64 * r, 4 * size_t(cols));
}

// gcc's _tile_loadd is an asm statement that does not tell the compiler it reads memory: every
// tile load that may read a pad (block's edge tiles, held_a's) is fenced on both sides, so that the
// pad's writes come before it and the next writes to the same pad after it.
#define WF_LOAD_FENCED(T, src, stride) \
  do {                                 \
    const void* fenced_ = (src);       \
    __asm__ volatile("" ::: "memory"); \
    _tile_loadd(T, fenced_, stride);   \
    __asm__ volatile("" ::: "memory"); \
  } while (0)

#define WF_C_START(T, i0, c0, pad)                         \
  do {                                                     \
    int64_t stride_ = 0;                                   \
    const void* src_ = c_source(g, i0, c0, pad, &stride_); \
    if (src_)                                              \
      WF_LOAD_FENCED(T, src_, stride_);                    \
    else                                                   \
      _tile_zero(T);                                       \
  } while (0)

#define WF_C_FINISH(T, i0, c0, pad)                \
  do {                                             \
    int64_t stride_ = 0;                           \
    void* dst_ = c_dest(g, i0, c0, pad, &stride_); \
    _tile_stored(T, dst_, stride_);                \
    c_copy_back(g, i0, c0, pad);                   \
  } while (0)

// One block of C: MT tiles of 16 rows from i0 by NT tiles of 16 columns from c0, over every pair.
template <int MT, int NT>
void block(const Bf16Gemm& g, int i0, int c0, EdgeTiles& e) {
  WF_C_START(WF_C00, i0, c0, e.c[0]);
  if constexpr (NT > 1) WF_C_START(WF_C01, i0, c0 + 16, e.c[1]);
  if constexpr (MT > 1) WF_C_START(WF_C10, i0 + 16, c0, e.c[2]);
  if constexpr (MT > 1 && NT > 1) WF_C_START(WF_C11, i0 + 16, c0 + 16, e.c[3]);
  for (int t0 = 0; t0 < g.kp; t0 += 16) {
    int64_t sa0, sa1, sb0, sb1;
    WF_LOAD_FENCED(WF_A0, a_tile(g, i0, t0, e.a[0], &sa0), sa0);
    WF_LOAD_FENCED(WF_B0, b_tile(g, t0, c0, e.b[0], &sb0), sb0);
    _tile_dpbf16ps(WF_C00, WF_A0, WF_B0);
    if constexpr (NT > 1) {
      WF_LOAD_FENCED(WF_B1, b_tile(g, t0, c0 + 16, e.b[1], &sb1), sb1);
      _tile_dpbf16ps(WF_C01, WF_A0, WF_B1);
    }
    if constexpr (MT > 1) {
      WF_LOAD_FENCED(WF_A1, a_tile(g, i0 + 16, t0, e.a[1], &sa1), sa1);
      _tile_dpbf16ps(WF_C10, WF_A1, WF_B0);
      if constexpr (NT > 1) _tile_dpbf16ps(WF_C11, WF_A1, WF_B1);
    }
  }
  WF_C_FINISH(WF_C00, i0, c0, e.c[0]);
  if constexpr (NT > 1) WF_C_FINISH(WF_C01, i0, c0 + 16, e.c[1]);
  if constexpr (MT > 1) WF_C_FINISH(WF_C10, i0 + 16, c0, e.c[2]);
  if constexpr (MT > 1 && NT > 1) WF_C_FINISH(WF_C11, i0 + 16, c0 + 16, e.c[3]);
}

// The whole product for m <= 32 and kp <= 32 without accumulate (the scores of a chunk of 32 query
// rows when the head dimension is at most 64): the MT x KT tiles of A are loaded once and held in
// registers 4-7 (row tile r, step k in 4 + 2r + k), and each 16 columns of C take 2 B tiles (2, 3),
// MT C tiles (0, 1) and MT KT products. Each element of C is the same chain as in block<>, so the
// result is the same bit for bit. Whole B tiles are loaded with the TILELOADDT1 hint: B (the key
// side of the attention's scores, 32-64 KiB at 256-512 columns) is read once per call and would
// push C (the scores, which the vector units read next) and A out of L1 (S = 4096, H = 8, D = 64,
// causal, one thread: the backward about 10% faster).
template <int MT, int KT>
void held_a(const Bf16Gemm& g, EdgeTiles& e) {
  int64_t sa = 0;
  WF_LOAD_FENCED(4, a_tile(g, 0, 0, e.a[0], &sa), sa);
  if constexpr (KT > 1) WF_LOAD_FENCED(5, a_tile(g, 0, 16, e.a[0], &sa), sa);
  if constexpr (MT > 1) {
    WF_LOAD_FENCED(6, a_tile(g, 16, 0, e.a[0], &sa), sa);
    if constexpr (KT > 1) WF_LOAD_FENCED(7, a_tile(g, 16, 16, e.a[0], &sa), sa);
  }
  const bool b_whole = g.kp % 16 == 0, c_rows_whole = g.m == 16 * MT;
  const int64_t sb = g.ldb * int64_t(sizeof(bf16)), sc = g.ldc * int64_t(sizeof(float));
  const bf16* b1 = g.b + 16 * g.ldb;
  float* c1 = g.c + 16 * g.ldc;
  const int n_whole = g.n / 16 * 16;
  for (int c0 = 0; c0 < g.n; c0 += 16) {
    _tile_zero(0);
    if constexpr (MT > 1) _tile_zero(1);
    if (b_whole) {
      _tile_stream_loadd(2, g.b + 2 * c0, sb);
      if constexpr (KT > 1) _tile_stream_loadd(3, b1 + 2 * c0, sb);
    } else {
      int64_t s = 0;
      WF_LOAD_FENCED(2, b_tile(g, 0, c0, e.b[0], &s), s);
      if constexpr (KT > 1) WF_LOAD_FENCED(3, b_tile(g, 16, c0, e.b[1], &s), s);
    }
    _tile_dpbf16ps(0, 4, 2);
    if constexpr (MT > 1) _tile_dpbf16ps(1, 6, 2);
    if constexpr (KT > 1) {
      _tile_dpbf16ps(0, 5, 3);
      if constexpr (MT > 1) _tile_dpbf16ps(1, 7, 3);
    }
    if (c_rows_whole && c0 < n_whole) {
      _tile_stored(0, g.c + c0, sc);
      if constexpr (MT > 1) _tile_stored(1, c1 + c0, sc);
    } else {
      WF_C_FINISH(0, 0, c0, e.c[0]);
      if constexpr (MT > 1) WF_C_FINISH(1, 16, c0, e.c[1]);
    }
  }
}

// 2^(s scale - shift) on 16 lanes (s scale - shift in one fused step).
inline __m512 exp2_lanes(__m512 s, __m512 scale, __m512 shift) {
  return exp2_avx512(_mm512_fmsub_ps(s, scale, shift));
}

// 32 values of bf16_exp2_round_sum_amx: rounded in one VCVTNE2PS2BF16, stored, and added to sum
// by VDPBF16PS with ones (the products are exact; each lane adds a pair).
inline void exp2_round_32(const float* s, __m512 scale, __m512 shift, bf16* pt, __m512& sum) {
  const __m512bh b = _mm512_cvtne2ps_pbh(exp2_lanes(_mm512_loadu_ps(s + 16), scale, shift),
                                         exp2_lanes(_mm512_loadu_ps(s), scale, shift));
  _mm512_storeu_si512(static_cast<void*>(pt), (__m512i)b);
  sum = _mm512_dpbf16_ps(sum, b, (__m512bh)_mm512_set1_epi16(0x3f80));  // bf16 1.0
}

// The lanes of `keep` of 16 values, stored, their widened values added to sum.
inline void exp2_round_16(const float* s, __m512 scale, __m512 shift, bf16* pt, __mmask16 keep,
                          __m512& sum) {
  const __m256i b =
      (__m256i)_mm512_cvtneps_pbh(exp2_lanes(_mm512_maskz_loadu_ps(keep, s), scale, shift));
  _mm256_mask_storeu_epi16(pt, keep, b);
  const __m512 back = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(b), 16));
  sum = _mm512_add_ps(sum, _mm512_maskz_mov_ps(keep, back));
}

// A row of kSoftmaxRow scores exponentiated against `shift` (exp2_round_32's values) into
// registers; stored, with their sum (in the order of bf16_exp2_round_sum_amx), only when no
// s scale - shift exceeds 0, i.e. when shift is at least the row's largest s scale (as the
// kernel's scaled_max computes it: the fused s scale - shift is positive wherever the rounded
// s scale exceeds shift, and maybe where it equals it). Returns whether it stored them.
constexpr int kSoftmaxRow = 256;

inline bool exp2_round_row_below(const float* s, __m512 scale, __m512 shift, bf16* pt, float* sum) {
  __m512bh e[kSoftmaxRow / 32];
  __m512 top = _mm512_set1_ps(-__builtin_inff());
#pragma GCC unroll 8
  for (int b = 0; b < kSoftmaxRow / 32; ++b) {
    const __m512 x0 = _mm512_fmsub_ps(_mm512_loadu_ps(s + 32 * b), scale, shift);
    const __m512 x1 = _mm512_fmsub_ps(_mm512_loadu_ps(s + 32 * b + 16), scale, shift);
    top = _mm512_max_ps(top, _mm512_max_ps(x0, x1));
    e[b] = _mm512_cvtne2ps_pbh(exp2_avx512(x1), exp2_avx512(x0));
  }
  if (_mm512_cmp_ps_mask(top, _mm512_setzero_ps(), _CMP_GT_OQ)) return false;
  const __m512bh ones = (__m512bh)_mm512_set1_epi16(0x3f80);  // bf16 1.0
  __m512 sum0 = _mm512_setzero_ps(), sum1 = _mm512_setzero_ps();
#pragma GCC unroll 8
  for (int b = 0; b < kSoftmaxRow / 32; b += 2) {
    _mm512_storeu_si512(static_cast<void*>(pt + 32 * b), (__m512i)e[b]);
    _mm512_storeu_si512(static_cast<void*>(pt + 32 * b + 32), (__m512i)e[b + 1]);
    sum0 = _mm512_dpbf16_ps(sum0, e[b], ones);
    sum1 = _mm512_dpbf16_ps(sum1, e[b + 1], ones);
  }
  *sum = _mm512_reduce_add_ps(_mm512_add_ps(sum0, sum1));
  return true;
}

}  // namespace

bool bf16_gemm_amx_built() { return true; }

float bf16_scaled_max_amx(const float* s, int n, float scale) {
  const __m512 vscale = _mm512_set1_ps(scale), ninf = _mm512_set1_ps(-__builtin_inff());
  __m512 m0 = ninf, m1 = ninf, m2 = ninf, m3 = ninf;
  int j = 0;
  for (; j + 64 <= n; j += 64) {
    m0 = _mm512_max_ps(m0, _mm512_mul_ps(_mm512_loadu_ps(s + j), vscale));
    m1 = _mm512_max_ps(m1, _mm512_mul_ps(_mm512_loadu_ps(s + j + 16), vscale));
    m2 = _mm512_max_ps(m2, _mm512_mul_ps(_mm512_loadu_ps(s + j + 32), vscale));
    m3 = _mm512_max_ps(m3, _mm512_mul_ps(_mm512_loadu_ps(s + j + 48), vscale));
  }
  for (; j < n; j += 16) {
    const __mmask16 keep = n - j >= 16 ? __mmask16(0xffff) : __mmask16((1u << (n - j)) - 1);
    m0 =
        _mm512_mask_max_ps(m0, keep, m0, _mm512_mul_ps(_mm512_maskz_loadu_ps(keep, s + j), vscale));
  }
  return _mm512_reduce_max_ps(_mm512_max_ps(_mm512_max_ps(m0, m1), _mm512_max_ps(m2, m3)));
}

float bf16_exp2_round_sum_amx(const float* s, int n, float scale, float shift, bf16* pt) {
  const __m512 vscale = _mm512_set1_ps(scale), vshift = _mm512_set1_ps(shift);
  __m512 sum0 = _mm512_setzero_ps(), sum1 = _mm512_setzero_ps();
  int j = 0;
  for (; j + 64 <= n; j += 64) {
    exp2_round_32(s + j, vscale, vshift, pt + j, sum0);
    exp2_round_32(s + j + 32, vscale, vshift, pt + j + 32, sum1);
  }
  for (; j + 32 <= n; j += 32) exp2_round_32(s + j, vscale, vshift, pt + j, sum0);
  for (; j < n; j += 16) {
    const __mmask16 keep = n - j >= 16 ? __mmask16(0xffff) : __mmask16((1u << (n - j)) - 1);
    exp2_round_16(s + j, vscale, vshift, pt + j, keep, sum1);
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(sum0, sum1));
}

void bf16_softmax_rows_amx(const Bf16SoftmaxRows& r) {
  const float ninf = -__builtin_inff();
  const __m512 vscale = _mm512_set1_ps(r.scale);
  for (int i = 0; i < r.rows; ++i) {
    float* s = r.s + i * r.lds;
    bf16* pt = reinterpret_cast<bf16*>(s);
    const int lo = r.lo[i], hi = std::max(r.lo[i], r.hi[i]);
    const float m_old = r.m[i];
    r.alpha[i] = 1.0f;
    // A whole row whose scores stay at or below m: its values against m, and m, l unchanged but
    // for the sum (not tried for a row's first visible keys, m = -inf).
    float sum = 0.0f;
    if (lo == 0 && hi == kSoftmaxRow && r.n2 == kSoftmaxRow && m_old != ninf &&
        exp2_round_row_below(s, vscale, _mm512_set1_ps(m_old), pt, &sum)) {
      r.l[i] += sum;
      continue;
    }
    const float m_new = std::max(m_old, bf16_scaled_max_amx(s + lo, hi - lo, r.scale));
    if (m_new == ninf) {  // nothing visible yet: the row stays (0, 0)
      std::fill(pt, pt + r.n2, bf16{});
      continue;
    }
    sum = bf16_exp2_round_sum_amx(s + lo, hi - lo, r.scale, m_new, pt + lo);
    std::fill(pt, pt + lo, bf16{});
    std::fill(pt + hi, pt + r.n2, bf16{});
    if (m_old == ninf)
      r.alpha[i] = 0.0f;  // (l and the O row are zero)
    else if (m_new != m_old)
      r.alpha[i] = _mm512_cvtss_f32(exp2_avx512(_mm512_set1_ps(m_old - m_new)));
    r.l[i] = r.l[i] * r.alpha[i] + sum;
    r.m[i] = m_new;
  }
}

void bf16_amx_begin() {
  static const TileConfig config;
  _tile_loadconfig(&config);
}

void bf16_amx_end() { _tile_release(); }

int bf16_gemm_amx_blocks(const Bf16Gemm& g) {
  if (g.m <= 0 || g.n <= 0) return 0;
  return ((g.m + 31) / 32) * ((g.n + 31) / 32);
}

void bf16_gemm_amx_run(const Bf16Gemm& g, int first, int count) {
  // Blocks of 32 columns outermost: their slice of B (kp x 32 column pairs) stays in L1 across the
  // rows.
  const int row_blocks = (g.m + 31) / 32;
  EdgeTiles edges;
  if (first == 0 && count == bf16_gemm_amx_blocks(g) && !g.accumulate && g.m <= 32 && g.kp > 0 &&
      g.kp <= 32) {
    const bool two_rows = g.m > 16, two_steps = g.kp > 16;
    if (two_rows && two_steps)
      held_a<2, 2>(g, edges);
    else if (two_rows)
      held_a<2, 1>(g, edges);
    else if (two_steps)
      held_a<1, 2>(g, edges);
    else
      held_a<1, 1>(g, edges);
    return;
  }
  for (int x = first; x < first + count; ++x) {
    const int c0 = x / row_blocks * 32, i0 = x % row_blocks * 32;
    if (g.kp <= 0) {  // no steps: C untouched, or zero
      if (!g.accumulate)
        for (int i = i0; i < std::min(g.m, i0 + 32); ++i)
          std::fill_n(g.c + i * g.ldc + c0, std::min(32, g.n - c0), 0.0f);
      continue;
    }
    const bool two_cols = c0 + 16 < g.n, two_rows = i0 + 16 < g.m;
    if (two_rows && two_cols)
      block<2, 2>(g, i0, c0, edges);
    else if (two_rows)
      block<2, 1>(g, i0, c0, edges);
    else if (two_cols)
      block<1, 2>(g, i0, c0, edges);
    else
      block<1, 1>(g, i0, c0, edges);
  }
}

void bf16_gemm_amx(const Bf16Gemm& g) {
  const int blocks = bf16_gemm_amx_blocks(g);
  if (blocks == 0) return;
  // The configuration is loaded at every call (a tile user in between, oneDNN's among them, may
  // have changed or released it) and the tiles released at the end.
  bf16_amx_begin();
  bf16_gemm_amx_run(g, 0, blocks);
  bf16_amx_end();
}

}  // namespace wallfacer::kernels::detail
