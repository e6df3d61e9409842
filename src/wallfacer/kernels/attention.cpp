#include "wallfacer/kernels/attention.h"

#include <omp.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "wallfacer/core/error.h"
#include "wallfacer/core/threads.h"
#include "wallfacer/kernels/attention_common.h"
#include "wallfacer/kernels/isa.h"
#include "wallfacer/kernels/scratch.h"
#include "wallfacer/kernels/sgemm.h"
#include "wallfacer/kernels/vec_math.h"

// Compiled once per instruction-set level (kernels/isa.h).
WALLFACER_ISA_BEGIN
namespace wallfacer::kernels::WALLFACER_ISA {
namespace {

using detail::check_dims;
using detail::check_strides;
using detail::exp_approx;
using detail::TileMask;
using detail::zero_rows;

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
constexpr int kFwdBlockQ = 128, kFwdBlockK = 256;
constexpr int kBwdBlockQ = 128, kBwdBlockK = 256;
// The one-row forward keeps G = H / Hkv rows of scores per task on the stack's 1 / l: H / Hkv is at
// most this (checked; more takes the tiled path).
constexpr int kMaxHeadsPerKvHeadOneRow = 64;

// p[j] = exp(s[j] - shift) for j < n; returns the sum of the p[j]. Kept out of line so that it is
// vectorised on its own rather than inside the (unvectorisable) tile loops it is called from.
[[gnu::noinline]] float exp_shift_sum(float* __restrict s, int n, float shift) {
  float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
  for (int j = 0; j < n; ++j) {
    const float e = exp_approx(s[j] - shift);
    s[j] = e;
    sum += e;
  }
  return sum;
}

[[gnu::noinline]] float row_max(const float* __restrict s, int n) {
  float m = kNegInf;
#pragma omp simd reduction(max : m)
  for (int j = 0; j < n; ++j) m = m > s[j] ? m : s[j];
  return m;
}

// Leading dimension for BLAS: at least head_dim even when a single row makes the stride moot.
inline int ld(int64_t stride, int head_dim) {
  return static_cast<int>(std::max<int64_t>(stride, head_dim));
}

}  // namespace

// Merges one row (o2, lse2) into (o, lse): the single place the LSE-combine formula lives.
static inline void merge_row(int head_dim, float* o, float* lse, const float* o2, float lse2) {
  if (lse2 == kNegInf) return;
  const float l1 = *lse;
  if (l1 == kNegInf) {
    std::memcpy(o, o2, sizeof(float) * head_dim);
    *lse = lse2;
    return;
  }
  const float mx = std::max(l1, lse2);
  const float lse_new = mx + std::log1p(std::exp(-std::fabs(l1 - lse2)));
  const float a = std::exp(l1 - lse_new);
  const float b = std::exp(lse2 - lse_new);
  for (int d = 0; d < head_dim; ++d) o[d] = a * o[d] + b * o2[d];
  *lse = lse_new;
}

void lse_merge_rows(int rows, int head_dim, float* o, int64_t o_row_stride, float* lse,
                    int64_t lse_row_stride, const float* o2, int64_t o2_row_stride,
                    const float* lse2, int64_t lse2_row_stride) {
  for (int i = 0; i < rows; ++i) {
    merge_row(head_dim, o + i * o_row_stride, lse + i * lse_row_stride, o2 + i * o2_row_stride,
              lse2[i * lse2_row_stride]);
  }
}

void lse_merge(const AttnDims& dims, float* o, Strides3 o_stride, float* lse, Strides2 lse_stride,
               const float* o2, Strides3 o2_stride, const float* lse2, Strides2 lse2_stride) {
  WF_CHECK(o && lse && o2 && lse2, "lse_merge: null pointer");
  WF_CHECK(dims.batch >= 1 && dims.heads >= 1 && dims.seq_q >= 0 && dims.head_dim >= 1,
           "lse_merge: bad dims batch={} heads={} seq={} head_dim={}", dims.batch, dims.heads,
           dims.seq_q, dims.head_dim);
  const int64_t tasks = int64_t(dims.batch) * dims.heads;
#pragma omp parallel for num_threads(num_threads()) schedule(static)
  for (int64_t t = 0; t < tasks; ++t) {
    const int64_t b = t / dims.heads, h = t % dims.heads;
    lse_merge_rows(dims.seq_q, dims.head_dim, o + b * o_stride.batch + h * o_stride.head,
                   o_stride.seq, lse + b * lse_stride.batch + h * lse_stride.head, 1,
                   o2 + b * o2_stride.batch + h * o2_stride.head, o2_stride.seq,
                   lse2 + b * lse2_stride.batch + h * lse2_stride.head, 1);
  }
}

void attn_fwd_init_output(const AttnDims& dims, float* o, Strides3 o_stride, float* lse,
                          Strides2 lse_stride) {
  WF_CHECK(o && lse, "attn_fwd_init_output: null pointer");
  for (int b = 0; b < dims.batch; ++b)
    for (int h = 0; h < dims.heads; ++h)
      for (int i = 0; i < dims.seq_q; ++i) {
        float* row = o + b * o_stride.batch + i * o_stride.seq + h * o_stride.head;
        std::fill(row, row + dims.head_dim, 0.0f);
        lse[b * lse_stride.batch + h * lse_stride.head + i] = kNegInf;
      }
}

AttnTiling attn_fwd_tiling(const AttnDims&) { return {kFwdBlockQ, kFwdBlockK}; }
AttnTiling attn_bwd_tiling(const AttnDims&) { return {kBwdBlockQ, kBwdBlockK}; }

int64_t attn_bwd_workspace_bytes(const AttnDims& dims, int threads) {
  const AttnTiling t = WALLFACER_ISA::attn_bwd_tiling(dims);
  // per thread: P tile and dP tile (bq x bk each); plus the private dQ of a key split
  const int64_t per = 2 * int64_t(t.block_q) * t.block_k;
  return (per * threads +
          detail::bwd_extra_dq_floats(dims, detail::bwd_key_parts(dims, threads, kBwdBlockK))) *
         int64_t(sizeof(float));
}

namespace {

// Keys per part of the one-row forward: its scores (the query heads of one kv head by the part's
// keys) stay in the L1/L2 cache.
constexpr int kRowPartKeys = 2048;

// The forward of one query row (a decode step's attention over a KV cache): the keys it sees are
// one run [lo, hi) under every mask (causal, window, documents), so each (batch, kv head, part of
// kRowPartKeys keys) is two products over the part, reading the part's K and V rows once for all
// the query heads that share them (with GQA the tiled path would read them once per query head),
// and the parts' partial results are merged in key order: the same bits for any thread count.
void attn_fwd_one_row(const AttnFwdParams& p) {
  const AttnDims& d = p.dims;
  const int D = d.head_dim, G = d.heads / d.kv_heads;
  const int64_t qp = p.q_pos0;
  int lo = 0, hi = d.seq_k;
  if (p.causal) hi = detail::visible_keys(qp, p.k_pos0, d.seq_k);
  if (p.window > 0) lo = detail::window_first_key(qp, p.window, p.k_pos0, d.seq_k);
  if (p.doc_of_pos) {
    int dlo = 0, dhi = 0;
    detail::doc_key_range(p.doc_of_pos, qp, p.k_pos0, d.seq_k, &dlo, &dhi);
    lo = std::max(lo, dlo);
    hi = std::min(hi, dhi);
  }
  if (hi <= lo) {  // sees no key: O = 0, LSE = -inf (nothing to merge into an accumulated result)
    if (!p.accumulate) WALLFACER_ISA::attn_fwd_init_output(d, p.o, p.o_stride, p.lse, p.lse_stride);
    return;
  }
  const int parts = (hi - lo + kRowPartKeys - 1) / kRowPartKeys;
  const int64_t tasks = int64_t(d.batch) * d.kv_heads * parts;
  // Each task's partial result: G rows of (O, LSE).
  std::vector<float> part_o(size_t(tasks) * size_t(G) * size_t(D)), part_lse(size_t(tasks) * G);
  const int nthreads = int(std::min<int64_t>(num_threads(), tasks));
  std::vector<float> work(size_t(nthreads) * size_t(G) * kRowPartKeys);
#pragma omp parallel num_threads(nthreads)
  {
    float* s = work.data() + size_t(omp_get_thread_num()) * size_t(G) * kRowPartKeys;
#pragma omp for schedule(dynamic, 1)
    for (int64_t t = 0; t < tasks; ++t) {
      const int part = int(t % parts);
      const int64_t bg = t / parts;
      const int b = int(bg / d.kv_heads), g = int(bg % d.kv_heads);
      const int j0 = lo + part * kRowPartKeys, nk = std::min(kRowPartKeys, hi - j0);
      const float* q = p.q + b * p.q_stride.batch + int64_t(g) * G * p.q_stride.head;
      const float* k = p.k + b * p.k_stride.batch + g * p.k_stride.head + j0 * p.k_stride.seq;
      const float* v = p.v + b * p.v_stride.batch + g * p.v_stride.head + j0 * p.v_stride.seq;
      float* o = part_o.data() + size_t(t) * size_t(G) * size_t(D);
      float* lse = part_lse.data() + size_t(t) * size_t(G);
      sgemm(false, true, G, nk, D, p.scale, q, ld(p.q_stride.head, D), k, ld(p.k_stride.seq, D),
            0.0f, s, nk);
      float inv[kMaxHeadsPerKvHeadOneRow];
      for (int i = 0; i < G; ++i) {
        float* srow = s + int64_t(i) * nk;
        const float m = row_max(srow, nk);
        const float l = exp_shift_sum(srow, nk, m);
        lse[i] = m + std::log(l);
        inv[i] = 1.0f / l;
      }
      sgemm(false, false, G, D, nk, 1.0f, s, nk, v, ld(p.v_stride.seq, D), 0.0f, o, D);
      for (int i = 0; i < G; ++i)
        for (int c = 0; c < D; ++c) o[int64_t(i) * D + c] *= inv[i];
    }
  }
  // The parts merged in key order into each head's row.
  for (int b = 0; b < d.batch; ++b)
    for (int h = 0; h < d.heads; ++h) {
      float* o = p.o + b * p.o_stride.batch + h * p.o_stride.head;
      float* lse = p.lse + b * p.lse_stride.batch + h * p.lse_stride.head;
      if (!p.accumulate) {
        std::fill(o, o + D, 0.0f);
        *lse = kNegInf;
      }
      const int g = h / G, i = h % G;
      for (int part = 0; part < parts; ++part) {
        const size_t t =
            (size_t(b) * size_t(d.kv_heads) + size_t(g)) * size_t(parts) + size_t(part);
        merge_row(D, o, lse, part_o.data() + (t * size_t(G) + size_t(i)) * size_t(D),
                  part_lse[t * size_t(G) + size_t(i)]);
      }
    }
}

}  // namespace

#ifdef WALLFACER_ISA_AVX512_INTRINSICS
}  // namespace wallfacer::kernels::WALLFACER_ISA
#include "wallfacer/kernels/exp2_avx512.h"
namespace wallfacer::kernels::WALLFACER_ISA {
// The forward with AVX-512 intrinsics, for head dims that are a multiple of 16 (the others take
// the tiled path below). Each task, the query rows of one block of one head, walks the key tiles
// of for_each_key_tile; per tile, each strip of kFusedRows rows computes its scores (register
// blocks of kFusedRows rows by 64 keys over K^T, packed once per call), its online softmax and its
// P V (register blocks of kFusedRows rows by up to 64 columns of O) while the strip's scores stay
// in L1: no score tile goes to memory and back, and the keys a strip's rows do not see are not
// computed. Scores are in units of log2: Q is multiplied by scale * log2(e) once, so the softmax
// is 2^(s - max) by exp2_avx512 (kernels/exp2_avx512.h).
namespace {

constexpr int kFusedRows = 6;      // query rows of a register block
constexpr int kFusedBlockK = 256;  // keys of a tile of packed K^T
constexpr int kFusedChunk = 64;    // keys of a score register block
constexpr float kLog2e = 1.44269504088896341f, kLn2 = 0.693147180559945309f;

bool fused_fwd_fits(const AttnDims& d) { return d.head_dim >= 16 && d.head_dim % 16 == 0; }

// Query rows of a task: 1,536 for head dims up to 64 (each key tile is read from L2 once for 256
// strips), fewer for wider heads, so that the block's Q and O (2 x 384 KB) stay in a 1 MiB L2 with
// the tile.
int fused_block_q(int D) { return kFusedRows * std::clamp(16384 / D, 32, 256); }

// Lanes [lo, hi) of the 16 from column c.
inline __mmask16 lanes(int c, int lo, int hi) {
  const int a = std::clamp(lo - c, 0, 16), b = std::clamp(hi - c, 0, 16);
  return b > a ? __mmask16(((1u << b) - 1) & ~((1u << a) - 1)) : __mmask16(0);
}

// Scores of one strip for the key chunk at column c of a tile: s[r][c + j] = sum_d q[r][d] kt[d][c
// + j] for r < kFusedRows, j < 64 (q rows of D floats, kt rows of kFusedBlockK, s rows of
// kFusedBlockK).
void strip_scores(const float* __restrict q, int D, const float* __restrict kt, int c,
                  float* __restrict s) {
  const __m512 zero = _mm512_setzero_ps();
  __m512 a00 = zero, a01 = zero, a02 = zero, a03 = zero, a10 = zero, a11 = zero, a12 = zero;
  __m512 a13 = zero, a20 = zero, a21 = zero, a22 = zero, a23 = zero, a30 = zero, a31 = zero;
  __m512 a32 = zero, a33 = zero, a40 = zero, a41 = zero, a42 = zero, a43 = zero, a50 = zero;
  __m512 a51 = zero, a52 = zero, a53 = zero;
  const float* k = kt + c;
  for (int d = 0; d < D; ++d, k += kFusedBlockK) {
    const __m512 k0 = _mm512_loadu_ps(k), k1 = _mm512_loadu_ps(k + 16);
    const __m512 k2 = _mm512_loadu_ps(k + 32), k3 = _mm512_loadu_ps(k + 48);
#define WF_ROW(r)                                  \
  {                                                \
    const __m512 x = _mm512_set1_ps(q[r * D + d]); \
    a##r##0 = _mm512_fmadd_ps(x, k0, a##r##0);     \
    a##r##1 = _mm512_fmadd_ps(x, k1, a##r##1);     \
    a##r##2 = _mm512_fmadd_ps(x, k2, a##r##2);     \
    a##r##3 = _mm512_fmadd_ps(x, k3, a##r##3);     \
  }
    WF_ROW(0) WF_ROW(1) WF_ROW(2) WF_ROW(3) WF_ROW(4) WF_ROW(5)
#undef WF_ROW
  }
#define WF_STORE(r)                                         \
  _mm512_storeu_ps(s + r * kFusedBlockK + c, a##r##0);      \
  _mm512_storeu_ps(s + r * kFusedBlockK + c + 16, a##r##1); \
  _mm512_storeu_ps(s + r * kFusedBlockK + c + 32, a##r##2); \
  _mm512_storeu_ps(s + r * kFusedBlockK + c + 48, a##r##3);
  WF_STORE(0) WF_STORE(1) WF_STORE(2) WF_STORE(3) WF_STORE(4) WF_STORE(5)
#undef WF_STORE
}

// o[r][0, 16 N) = alpha[r] o[r][...] + sum_{j in [j0, j1)} p[r][j] v[j][0, 16 N) for the strip's
// rows (o rows of D floats, p rows of kFusedBlockK, v rows of ldv).
template <int N>
void strip_pv(const float* __restrict p, const float* __restrict v, int64_t ldv, int j0, int j1,
              float* __restrict o, int D, const float* alpha) {
  __m512 acc[kFusedRows][N];
  for (int r = 0; r < kFusedRows; ++r) {
    const __m512 a = _mm512_set1_ps(alpha[r]);
    for (int x = 0; x < N; ++x) acc[r][x] = _mm512_mul_ps(a, _mm512_loadu_ps(o + r * D + 16 * x));
  }
  for (int j = j0; j < j1; ++j) {
    const float* vr = v + j * ldv;
    __m512 vx[N];
    for (int x = 0; x < N; ++x) vx[x] = _mm512_loadu_ps(vr + 16 * x);
    for (int r = 0; r < kFusedRows; ++r) {
      const __m512 w = _mm512_set1_ps(p[r * kFusedBlockK + j]);
      for (int x = 0; x < N; ++x) acc[r][x] = _mm512_fmadd_ps(w, vx[x], acc[r][x]);
    }
  }
  for (int r = 0; r < kFusedRows; ++r)
    for (int x = 0; x < N; ++x) _mm512_storeu_ps(o + r * D + 16 * x, acc[r][x]);
}

// Floats of one thread's arrays (attn_fwd_fused).
int64_t fused_fwd_thread_floats(int D) {
  const int64_t bq = fused_block_q(D);
  return 2 * bq * D + int64_t(kFusedRows) * kFusedBlockK + 2 * bq + int64_t(kFusedRows) * D;
}

// Floats of the packed K^T of a call (attn_fwd_fused): whole tiles of every batch and kv head.
int64_t fused_fwd_keys_floats(const AttnDims& d) {
  const int64_t tiles = (d.seq_k + kFusedBlockK - 1) / kFusedBlockK;
  return int64_t(d.batch) * d.kv_heads * tiles * d.head_dim * kFusedBlockK;
}

// The 16 x 16 block r[0..15] (row x of 16 floats in r[x]) transposed in place.
inline void transpose16(__m512 r[16]) {
  __m512 t[16];
  for (int x = 0; x < 16; x += 2) {  // pairs of rows interleaved
    t[x] = _mm512_unpacklo_ps(r[x], r[x + 1]);
    t[x + 1] = _mm512_unpackhi_ps(r[x], r[x + 1]);
  }
  for (int x = 0; x < 16; x += 4) {  // then pairs of pairs
    r[x] = _mm512_shuffle_ps(t[x], t[x + 2], 0x44);
    r[x + 1] = _mm512_shuffle_ps(t[x], t[x + 2], 0xee);
    r[x + 2] = _mm512_shuffle_ps(t[x + 1], t[x + 3], 0x44);
    r[x + 3] = _mm512_shuffle_ps(t[x + 1], t[x + 3], 0xee);
  }
  for (int x = 0; x < 4; ++x) {  // 128-bit lanes: rows x, x + 4, x + 8, x + 12
    t[x] = _mm512_shuffle_f32x4(r[x], r[x + 4], 0x88);
    t[x + 4] = _mm512_shuffle_f32x4(r[x], r[x + 4], 0xdd);
    t[x + 8] = _mm512_shuffle_f32x4(r[x + 8], r[x + 12], 0x88);
    t[x + 12] = _mm512_shuffle_f32x4(r[x + 8], r[x + 12], 0xdd);
  }
  for (int x = 0; x < 4; ++x) {
    r[x] = _mm512_shuffle_f32x4(t[x], t[x + 8], 0x88);
    r[x + 8] = _mm512_shuffle_f32x4(t[x], t[x + 8], 0xdd);
    r[x + 4] = _mm512_shuffle_f32x4(t[x + 4], t[x + 12], 0x88);
    r[x + 12] = _mm512_shuffle_f32x4(t[x + 4], t[x + 12], 0xdd);
  }
}

// kt (D rows of kFusedBlockK) = K^T of the nk key rows from k (rows of ld floats), zero from
// column nk to the next multiple of kFusedChunk; by blocks of 16 keys by 16 columns.
void pack_keys(const float* __restrict k, int64_t ld, int nk, int D, float* __restrict kt) {
  const int padded = (nk + kFusedChunk - 1) / kFusedChunk * kFusedChunk;
  for (int j = 0; j < padded; j += 16)
    for (int c = 0; c < D; c += 16) {
      __m512 r[16];
      for (int x = 0; x < 16; ++x)
        r[x] = j + x < nk ? _mm512_loadu_ps(k + int64_t(j + x) * ld + c) : _mm512_setzero_ps();
      transpose16(r);
      for (int x = 0; x < 16; ++x) _mm512_storeu_ps(kt + int64_t(c + x) * kFusedBlockK + j, r[x]);
    }
}

void attn_fwd_fused(const AttnFwdParams& p) {
  const AttnDims& d = p.dims;
  const int D = d.head_dim, group = d.heads / d.kv_heads;
  const int nthreads = num_threads();
  // K^T of every (batch, kv head, tile), packed once for all the query heads and blocks that read
  // it.
  const int tiles = (d.seq_k + kFusedBlockK - 1) / kFusedBlockK;
  const int64_t tile_floats = int64_t(D) * kFusedBlockK;
  const int64_t kt_tasks = int64_t(d.batch) * d.kv_heads * tiles;
  detail::Scratch kt_scratch(fused_fwd_keys_floats(d) * int64_t(sizeof(float)), 2);
  float* kt = kt_scratch.take(size_t(kt_tasks * tile_floats));
#pragma omp parallel for num_threads(nthreads) schedule(static)
  for (int64_t t = 0; t < kt_tasks; ++t) {
    const int tile = int(t % tiles);
    const int64_t bh = t / tiles;
    const int b = int(bh / d.kv_heads), hk = int(bh % d.kv_heads), j0 = tile * kFusedBlockK;
    pack_keys(p.k + b * p.k_stride.batch + hk * p.k_stride.head + j0 * p.k_stride.seq,
              p.k_stride.seq, std::min(kFusedBlockK, d.seq_k - j0), D, kt + t * tile_floats);
  }
  const int bq = fused_block_q(D);
  const int64_t nqb = (d.seq_q + bq - 1) / bq;
  const int64_t tasks = int64_t(d.batch) * d.heads * nqb;
  const float qscale = p.scale * kLog2e;
#pragma omp parallel num_threads(nthreads)
  {
    // Per thread: Q scaled (block x D), O unnormalised (block x D), a strip's scores, the
    // softmax state of the block's rows (running max m in log2 units, sum l) and a strip of O.
    const int64_t floats = fused_fwd_thread_floats(D);
    detail::Scratch scratch(floats * int64_t(sizeof(float)), 1);
    float* qs = scratch.take(size_t(bq) * size_t(D));
    float* ob = scratch.take(size_t(bq) * size_t(D));
    float* sb = scratch.take(size_t(kFusedRows) * kFusedBlockK);
    float* m = scratch.take(size_t(bq));
    float* l = scratch.take(size_t(bq));
    float* saved = scratch.take(size_t(kFusedRows) * size_t(D));
#pragma omp for schedule(dynamic, 1)
    for (int64_t t = 0; t < tasks; ++t) {
      // Largest query blocks first: under a causal mask they carry the most work.
      const int64_t qb = nqb - 1 - t % nqb;
      const int64_t bh = t / nqb;
      const int b = int(bh / d.heads), h = int(bh % d.heads), hk = h / group;
      const int i0 = int(qb * bq), nq = std::min(bq, d.seq_q - i0);
      const int strips = (nq + kFusedRows - 1) / kFusedRows;
      const float* q = p.q + b * p.q_stride.batch + i0 * p.q_stride.seq + h * p.q_stride.head;
      const float* v = p.v + b * p.v_stride.batch + hk * p.v_stride.head;
      float* o = p.o + b * p.o_stride.batch + i0 * p.o_stride.seq + h * p.o_stride.head;
      float* lse = p.lse + b * p.lse_stride.batch + h * p.lse_stride.head + i0;
      for (int i = 0; i < strips * kFusedRows; ++i) {  // rows past nq repeat the last (unused)
        const float* qrow = q + int64_t(std::min(i, nq - 1)) * p.q_stride.seq;
        for (int c = 0; c < D; ++c) qs[i * D + c] = qrow[c] * qscale;
        const bool given = i < nq && p.accumulate && lse[i] != kNegInf;
        m[i] = given ? lse[i] * kLog2e : kNegInf;
        l[i] = given ? 1.0f : 0.0f;
        if (given)
          std::copy_n(o + int64_t(i) * p.o_stride.seq, D, ob + int64_t(i) * D);
        else
          std::fill_n(ob + int64_t(i) * D, D, 0.0f);
      }
      const int64_t qpos_first = p.q_pos0 + i0, qpos_last = qpos_first + nq - 1;
      const float* kt_bh = kt + (int64_t(b) * d.kv_heads + hk) * tiles * tile_floats;
      detail::for_each_key_tile(
          d.seq_k, p.k_pos0, kFusedBlockK, qpos_first, qpos_last, p.causal, p.window, p.doc_of_pos,
          [&](int j0, int nk, const TileMask& mask) {
            const float* ktile = kt_bh + (j0 / kFusedBlockK) * tile_floats;
            const float* vtile = v + j0 * p.v_stride.seq;
            for (int st = 0; st < strips; ++st) {
              const int r0 = st * kFusedRows;
              int lo[kFusedRows], hi[kFusedRows], ulo = nk, uhi = 0;
              for (int r = 0; r < kFusedRows; ++r) {
                if (r0 + r < nq) {
                  mask.keys(r0 + r, nk, &lo[r], &hi[r]);
                } else {
                  lo[r] = hi[r] = 0;
                }
                if (hi[r] > lo[r]) {
                  ulo = std::min(ulo, lo[r]);
                  uhi = std::max(uhi, hi[r]);
                }
              }
              if (uhi <= ulo) continue;  // no row of the strip sees a key of the tile
              const float* qst = qs + int64_t(r0) * D;
              const int c_lo = ulo / kFusedChunk * kFusedChunk;
              for (int c = c_lo; c < uhi; c += kFusedChunk) strip_scores(qst, D, ktile, c, sb);
              float alpha[kFusedRows];
              const int v_lo = ulo / 16 * 16;
              for (int r = 0; r < kFusedRows; ++r) {
                float* srow = sb + r * kFusedBlockK;
                if (hi[r] <= lo[r]) {  // this row sees none: P = 0, O and its state unchanged
                  for (int c = v_lo; c < uhi; c += 16)
                    _mm512_storeu_ps(srow + c, _mm512_setzero_ps());
                  alpha[r] = 1.0f;
                  continue;
                }
                __m512 vmax = _mm512_set1_ps(kNegInf);
                for (int c = lo[r] / 16 * 16; c < hi[r]; c += 16)
                  vmax = _mm512_mask_max_ps(vmax, lanes(c, lo[r], hi[r]), vmax,
                                            _mm512_loadu_ps(srow + c));
                const float mr = m[r0 + r];
                const float mnew = std::max(mr, _mm512_reduce_max_ps(vmax));
                const __m512 shift = _mm512_set1_ps(mnew);
                __m512 vsum = _mm512_setzero_ps();
                for (int c = v_lo; c < uhi; c += 16) {
                  const __m512 e = _mm512_maskz_mov_ps(
                      lanes(c, lo[r], hi[r]),
                      detail::exp2_avx512(_mm512_sub_ps(_mm512_loadu_ps(srow + c), shift)));
                  _mm512_storeu_ps(srow + c, e);
                  vsum = _mm512_add_ps(vsum, e);
                }
                const float a = mr == mnew ? 1.0f : mr == kNegInf ? 0.0f : std::exp2(mr - mnew);
                alpha[r] = a;
                l[r0 + r] = l[r0 + r] * a + _mm512_reduce_add_ps(vsum);
                m[r0 + r] = mnew;
              }
              float* ost = ob + int64_t(r0) * D;
              // A row that sees none of the union's keys keeps its O as it is: P = 0 there, but
              // 0 * V is not 0 for a V that is not finite (keys of another document, say).
              bool empty = false;
              for (int r = 0; r < kFusedRows; ++r) empty = empty || hi[r] <= lo[r];
              if (empty)
                for (int r = 0; r < kFusedRows; ++r)
                  if (hi[r] <= lo[r]) std::copy_n(ost + r * D, D, saved + r * D);
              for (int c = 0; c < D; c += 64) {
                switch (std::min(4, (D - c) / 16)) {
                  case 4:
                    strip_pv<4>(sb, vtile + c, p.v_stride.seq, ulo, uhi, ost + c, D, alpha);
                    break;
                  case 3:
                    strip_pv<3>(sb, vtile + c, p.v_stride.seq, ulo, uhi, ost + c, D, alpha);
                    break;
                  case 2:
                    strip_pv<2>(sb, vtile + c, p.v_stride.seq, ulo, uhi, ost + c, D, alpha);
                    break;
                  default:
                    strip_pv<1>(sb, vtile + c, p.v_stride.seq, ulo, uhi, ost + c, D, alpha);
                    break;
                }
              }
              if (empty)
                for (int r = 0; r < kFusedRows; ++r)
                  if (hi[r] <= lo[r]) std::copy_n(saved + r * D, D, ost + r * D);
            }
          });
      for (int i = 0; i < nq; ++i) {  // O = ob / l, LSE = (m + log2 l) ln 2; (0, -inf) for none
        float* orow = o + int64_t(i) * p.o_stride.seq;
        const float* src = ob + int64_t(i) * D;
        if (l[i] > 0) {
          const float inv = 1.0f / l[i];
          for (int c = 0; c < D; ++c) orow[c] = src[c] * inv;
          lse[i] = (m[i] + std::log2(l[i])) * kLn2;
        } else {
          std::fill(orow, orow + D, 0.0f);
          lse[i] = kNegInf;
        }
      }
    }
  }
}

}  // namespace
#endif

int64_t attn_fwd_workspace_bytes(const AttnDims& dims, int threads) {
#ifdef WALLFACER_ISA_AVX512_INTRINSICS
  if (fused_fwd_fits(dims))
    return (fused_fwd_thread_floats(dims.head_dim) * threads + fused_fwd_keys_floats(dims)) *
           int64_t(sizeof(float));
#endif
  const AttnTiling t = WALLFACER_ISA::attn_fwd_tiling(dims);
  // per thread: score tile (bq x bk), block output (bq x D), block lse and 1 / rowsum (bq each)
  const int64_t per =
      int64_t(t.block_q) * t.block_k + int64_t(t.block_q) * dims.head_dim + 2 * int64_t(t.block_q);
  return per * threads * int64_t(sizeof(float));
}

void attn_fwd(const AttnFwdParams& p) {
  const AttnDims& d = p.dims;
  check_dims(d);
  WF_CHECK(p.q && p.k && p.v && p.o && p.lse, "attn_fwd: null pointer among q, k, v, o, lse");
  check_strides("q", p.q_stride, d.seq_q, d.heads, d.head_dim);
  check_strides("k", p.k_stride, d.seq_k, d.kv_heads, d.head_dim);
  check_strides("v", p.v_stride, d.seq_k, d.kv_heads, d.head_dim);
  check_strides("o", p.o_stride, d.seq_q, d.heads, d.head_dim);
  detail::check_window("attn_fwd", p.causal, p.window);
  if (p.doc_of_pos)
    detail::check_doc_of_pos("attn_fwd", p.doc_of_pos, p.q_pos0, d.seq_q, p.k_pos0, d.seq_k);
  if (d.seq_q == 0) return;
  if (d.seq_k == 0) {
    if (!p.accumulate) WALLFACER_ISA::attn_fwd_init_output(d, p.o, p.o_stride, p.lse, p.lse_stride);
    return;
  }
  if (d.seq_q == 1 && d.heads / d.kv_heads <= kMaxHeadsPerKvHeadOneRow) return attn_fwd_one_row(p);
#ifdef WALLFACER_ISA_AVX512_INTRINSICS
  if (fused_fwd_fits(d)) return attn_fwd_fused(p);
#endif

  const AttnTiling tile = WALLFACER_ISA::attn_fwd_tiling(d);
  const int bq = tile.block_q, bk = tile.block_k, D = d.head_dim;
  const int group = d.heads / d.kv_heads;
  const int64_t nqb = (d.seq_q + bq - 1) / bq;
  const int64_t tasks = int64_t(d.batch) * d.heads * nqb;
  const int nthreads = num_threads();
  const int64_t per_thread = int64_t(bq) * bk + int64_t(bq) * D + 2 * bq;
  std::vector<float> work(per_thread * nthreads);

  // Each query block keeps the online softmax's running state per row: the largest score so far
  // (mx), the sum of exp(score - mx) (sum) and O unnormalised (ob, contiguous), rescaled by
  // exp(old mx - new mx) when a key tile raises the maximum; O and LSE are written once, after the
  // last key tile (an accumulated call starts from the given (O, LSE): mx = LSE, sum = 1).
#pragma omp parallel num_threads(nthreads)
  {
    float* s = work.data() + per_thread * omp_get_thread_num();
    float* ob = s + int64_t(bq) * bk;
    float* mx = ob + int64_t(bq) * D;
    float* sum = mx + bq;
#pragma omp for schedule(dynamic, 1)
    for (int64_t t = 0; t < tasks; ++t) {
      // Largest query blocks first: under a causal mask they carry the most work.
      const int64_t qb = nqb - 1 - t % nqb;
      const int64_t bh = t / nqb;
      const int b = static_cast<int>(bh / d.heads), h = static_cast<int>(bh % d.heads);
      const int hk = h / group;
      const int i0 = static_cast<int>(qb * bq);
      const int nq = std::min(bq, d.seq_q - i0);
      const float* q = p.q + b * p.q_stride.batch + i0 * p.q_stride.seq + h * p.q_stride.head;
      const float* k = p.k + b * p.k_stride.batch + hk * p.k_stride.head;
      const float* v = p.v + b * p.v_stride.batch + hk * p.v_stride.head;
      float* o = p.o + b * p.o_stride.batch + i0 * p.o_stride.seq + h * p.o_stride.head;
      float* lse = p.lse + b * p.lse_stride.batch + h * p.lse_stride.head + i0;
      const int64_t qpos_first = p.q_pos0 + i0, qpos_last = qpos_first + nq - 1;
      for (int i = 0; i < nq; ++i) {  // the start: nothing seen, or the given partial result
        float* orow = ob + int64_t(i) * D;
        const bool given = p.accumulate && lse[i] != kNegInf;
        mx[i] = given ? lse[i] : kNegInf;
        sum[i] = given ? 1.0f : 0.0f;
        if (given) {
          std::copy_n(o + int64_t(i) * p.o_stride.seq, D, orow);
        } else {
          std::fill(orow, orow + D, 0.0f);
        }
      }
      detail::for_each_key_tile(
          d.seq_k, p.k_pos0, bk, qpos_first, qpos_last, p.causal, p.window, p.doc_of_pos,
          [&](int j0, int nk, const TileMask& mask) {
            sgemm(false, true, nq, nk, D, p.scale, q, ld(p.q_stride.seq, D),
                  k + j0 * p.k_stride.seq, ld(p.k_stride.seq, D), 0.0f, s, nk);
            for (int i = 0; i < nq; ++i) {
              float* srow = s + int64_t(i) * nk;
              int lo, hi;
              mask.keys(i, nk, &lo, &hi);
              const float m = hi > lo ? std::max(mx[i], row_max(srow + lo, hi - lo)) : kNegInf;
              if (hi <= lo || m == kNegInf) {  // no key of this tile for the row
                std::fill(srow, srow + nk, 0.0f);
                continue;
              }
              const float l = exp_shift_sum(srow + lo, hi - lo, m);
              std::fill(srow, srow + lo, 0.0f);
              std::fill(srow + hi, srow + nk, 0.0f);
              if (m != mx[i]) {  // a larger maximum: what came before is rescaled to it
                const float a = mx[i] == kNegInf ? 0.0f : std::exp(mx[i] - m);
                float* orow = ob + int64_t(i) * D;
                for (int c = 0; c < D; ++c) orow[c] *= a;
                sum[i] *= a;
                mx[i] = m;
              }
              sum[i] += l;
            }
            sgemm(false, false, nq, D, nk, 1.0f, s, nk, v + j0 * p.v_stride.seq,
                  ld(p.v_stride.seq, D), 1.0f, ob, D);
          });
      for (int i = 0; i < nq; ++i) {  // O = ob / sum, LSE = mx + log(sum); (0, -inf) for none
        float* orow = o + int64_t(i) * p.o_stride.seq;
        const float* src = ob + int64_t(i) * D;
        if (sum[i] > 0) {
          const float inv = 1.0f / sum[i];
          for (int c = 0; c < D; ++c) orow[c] = src[c] * inv;
          lse[i] = mx[i] + std::log(sum[i]);
        } else {
          std::fill(orow, orow + D, 0.0f);
          lse[i] = kNegInf;
        }
      }
    }
  }
}

void attn_bwd_preprocess(const AttnDims& dims, const float* o, Strides3 o_stride, const float* dout,
                         Strides3 dout_stride, float* delta, Strides2 delta_stride) {
  check_dims(dims);
  WF_CHECK(o && dout && delta, "attn_bwd_preprocess: null pointer among o, dout, delta");
  detail::bwd_delta(dims, o, o_stride, dout, dout_stride, delta, delta_stride, num_threads());
}

namespace {

using detail::BwdTask;

// Backward of one kv head over key rows [j_begin, j_end), all query heads of its group,
// accumulating into dq (given target) and into dk, dv (rows owned by this call).
void bwd_kv_range(const AttnBwdParams& p, const BwdTask& task, float* ps, float* dps) {
  const AttnDims& d = p.dims;
  const AttnTiling tile = WALLFACER_ISA::attn_bwd_tiling(d);
  const int bq = tile.block_q, bk = tile.block_k, D = d.head_dim;
  const int group = d.heads / d.kv_heads;
  const int b = task.b, hk = task.hk;
  const float* k = p.k + b * p.k_stride.batch + hk * p.k_stride.head;
  const float* v = p.v + b * p.v_stride.batch + hk * p.v_stride.head;
  float* dk = p.dk + b * p.dk_stride.batch + hk * p.dk_stride.head;
  float* dv = p.dv + b * p.dv_stride.batch + hk * p.dv_stride.head;
  const int ldk = ld(p.k_stride.seq, D), ldv = ld(p.v_stride.seq, D);
  const int lddk = ld(p.dk_stride.seq, D), lddv = ld(p.dv_stride.seq, D);
  const int ldq = ld(p.q_stride.seq, D), lddo = ld(p.dout_stride.seq, D);
  const int lddq = ld(task.dq_seq, D);
  const int32_t* doc = p.doc_of_pos;
  for (int j0 = task.j_begin; j0 < task.j_end; j0 += bk) {
    const int nk = std::min(bk, task.j_end - j0);
    const int64_t kpos_first = p.k_pos0 + j0, kpos_last = kpos_first + nk - 1;
    float* dkj = dk + j0 * p.dk_stride.seq;
    float* dvj = dv + j0 * p.dv_stride.seq;
    if (!p.accumulate) {
      zero_rows(dkj, p.dk_stride.seq, nk, D);
      zero_rows(dvj, p.dv_stride.seq, nk, D);
    }
    for (int g = 0; g < group; ++g) {
      const detail::BwdHead<float> head = detail::bwd_head(p, task, g);
      const float *q = head.q, *dout = head.dout, *lse = head.lse, *delta = head.delta;
      float* dq = head.dq;
      detail::for_each_query_block(
          d, p.q_pos0, bq, kpos_first, kpos_last, p.causal, p.window, doc,
          [&](int i0, int nq, const TileMask& mask) {
            const float* qi = q + i0 * p.q_stride.seq;
            const float* doi = dout + i0 * p.dout_stride.seq;
            sgemm(false, true, nq, nk, D, p.scale, qi, ldq, k + j0 * p.k_stride.seq, ldk, 0.0f, ps,
                  nk);
            sgemm(false, true, nq, nk, D, 1.0f, doi, lddo, v + j0 * p.v_stride.seq, ldv, 0.0f, dps,
                  nk);
            for (int i = 0; i < nq; ++i) {
              float* prow = ps + int64_t(i) * nk;
              float* dprow = dps + int64_t(i) * nk;
              const float l = lse[i0 + i];
              int lo, hi;
              mask.keys(i, nk, &lo, &hi);
              if (l == kNegInf) {
                std::fill(prow, prow + nk, 0.0f);
                std::fill(dprow, dprow + nk, 0.0f);
                continue;
              }
              const float dl = delta[i0 + i];
              exp_shift_sum(prow + lo, hi - lo, l);
              for (int j = 0; j < lo; ++j) prow[j] = 0.0f;
              for (int j = hi; j < nk; ++j) prow[j] = 0.0f;
#pragma omp simd
              for (int j = 0; j < nk; ++j) dprow[j] = prow[j] * (dprow[j] - dl) * p.scale;
            }
            // dV += P^T dO ; dK += dS^T Q ; dQ += dS K
            sgemm(true, false, nk, D, nq, 1.0f, ps, nk, doi, lddo, 1.0f, dvj, lddv);
            sgemm(true, false, nk, D, nq, 1.0f, dps, nk, qi, ldq, 1.0f, dkj, lddk);
            sgemm(false, false, nq, D, nk, 1.0f, dps, nk, k + j0 * p.k_stride.seq, ldk, 1.0f,
                  dq + i0 * task.dq_seq, lddq);
          });
    }
  }
}

}  // namespace

void attn_bwd(const AttnBwdParams& p) {
  const AttnDims& d = p.dims;
  check_dims(d);
  WF_CHECK(p.q && p.k && p.v && p.dout && p.lse && p.delta && p.dq && p.dk && p.dv,
           "attn_bwd: null pointer among q, k, v, dout, lse, delta, dq, dk, dv");
  check_strides("q", p.q_stride, d.seq_q, d.heads, d.head_dim);
  check_strides("k", p.k_stride, d.seq_k, d.kv_heads, d.head_dim);
  check_strides("v", p.v_stride, d.seq_k, d.kv_heads, d.head_dim);
  check_strides("dout", p.dout_stride, d.seq_q, d.heads, d.head_dim);
  check_strides("dq", p.dq_stride, d.seq_q, d.heads, d.head_dim);
  check_strides("dk", p.dk_stride, d.seq_k, d.kv_heads, d.head_dim);
  check_strides("dv", p.dv_stride, d.seq_k, d.kv_heads, d.head_dim);
  detail::check_window("attn_bwd", p.causal, p.window);
  if (p.doc_of_pos)
    detail::check_doc_of_pos("attn_bwd", p.doc_of_pos, p.q_pos0, d.seq_q, p.k_pos0, d.seq_k);
  const int D = d.head_dim;
  if (d.seq_q == 0 || d.seq_k == 0) {
    if (!p.accumulate) {
      for (int b = 0; b < d.batch; ++b)
        for (int h = 0; h < d.heads; ++h)
          zero_rows(p.dq + b * p.dq_stride.batch + h * p.dq_stride.head, p.dq_stride.seq, d.seq_q,
                    D);
      for (int b = 0; b < d.batch; ++b)
        for (int h = 0; h < d.kv_heads; ++h) {
          zero_rows(p.dk + b * p.dk_stride.batch + h * p.dk_stride.head, p.dk_stride.seq, d.seq_k,
                    D);
          zero_rows(p.dv + b * p.dv_stride.batch + h * p.dv_stride.head, p.dv_stride.seq, d.seq_k,
                    D);
        }
    }
    return;
  }
  const AttnTiling tile = WALLFACER_ISA::attn_bwd_tiling(d);
  const int nthreads = num_threads();
  const int64_t per_thread = 2 * int64_t(tile.block_q) * tile.block_k;
  std::vector<float> work(per_thread * nthreads);
  detail::run_bwd_tasks(d, p.causal, p.window, p.q_pos0, p.k_pos0, tile.block_k, nthreads, p.dq,
                        p.dq_stride, !p.accumulate, [&](const BwdTask& task, int thread) {
                          float* ps = work.data() + per_thread * thread;
                          bwd_kv_range(p, task, ps, ps + per_thread / 2);
                        });
}

}  // namespace wallfacer::kernels::WALLFACER_ISA
WALLFACER_ISA_END
