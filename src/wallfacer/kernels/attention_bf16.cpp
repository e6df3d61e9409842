#include "wallfacer/kernels/attention_bf16.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <string_view>
#include <vector>

#include "wallfacer/core/error.h"
#include "wallfacer/core/threads.h"
#include "wallfacer/kernels/attention_common.h"
#include "wallfacer/kernels/bf16_gemm.h"
#include "wallfacer/kernels/vec_math.h"

// Everything here except the tile products (detail::Bf16Gemm) is shared by both code paths: the
// packing, the softmax rows, the rounding of P and dS and the write-back run the same code
// whichever path multiplies, so the two paths agree bit for bit when their products do.

namespace wallfacer::kernels {
namespace {

using detail::Bf16Gemm;
using detail::check_dims;
using detail::check_strides;
using detail::exp_approx;
using detail::visible_keys;

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
// Key tiles are multiples of 16 (the packed B rows are read in vectors of 16 columns) and query
// tiles are even (the backward pairs query rows).
constexpr int kFwdBlockQ = 128, kFwdBlockK = 256;
constexpr int kBwdBlockQ = 128, kBwdBlockK = 256;

using GemmFn = void (*)(const Bf16Gemm&);

inline int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

GemmFn gemm_of(Bf16Path path) {
  return path == Bf16Path::avx512 ? detail::bf16_gemm_avx512 : detail::bf16_gemm_portable;
}

// Padded head dimensions: pairs along D (the scores' products) and vectors of 16 along D (the
// products whose columns are D).
struct HeadDims {
  int d, d2, d16;
  explicit HeadDims(int head_dim)
      : d(head_dim), d2(int(round_up(head_dim, 2))), d16(int(round_up(head_dim, 16))) {}
};

// --- Packing (exact data movement) --------------------------------------------------------------

// Pairs of columns: dst[(c * ncols + j) * 2 + r] = row j, element 2c + r of src, for c < d2 / 2
// and j < ncols; zero beyond `rows` or beyond D. As B of a product over D whose columns are rows.
void pack_column_pairs(const bf16* src, int64_t row_stride, int rows, const HeadDims& hd, int ncols,
                       bf16* dst) {
  for (int c = 0; c < hd.d2 / 2; ++c)
    for (int j = 0; j < ncols; ++j)
      for (int r = 0; r < 2; ++r) {
        const int e = 2 * c + r;
        dst[(int64_t(c) * ncols + j) * 2 + r] =
            j < rows && e < hd.d ? src[j * row_stride + e] : bf16{};
      }
}

// Pairs of rows: dst[(t * d16 + e) * 2 + r] = row 2t + r, element e of src, for 2t < round_up(rows,
// 2) and e < d16; zero beyond `rows` or beyond D. As B of a product over rows whose columns are D.
void pack_row_pairs(const bf16* src, int64_t row_stride, int rows, const HeadDims& hd, bf16* dst) {
  const int pairs = (rows + 1) / 2;
  for (int t = 0; t < pairs; ++t)
    for (int e = 0; e < hd.d16; ++e)
      for (int r = 0; r < 2; ++r) {
        const int j = 2 * t + r;
        dst[(int64_t(t) * hd.d16 + e) * 2 + r] =
            j < rows && e < hd.d ? src[j * row_stride + e] : bf16{};
      }
}

// Rows copied with D padded to d2 (zero): as A of a product over D.
void copy_rows(const bf16* src, int64_t row_stride, int rows, const HeadDims& hd, bf16* dst) {
  for (int i = 0; i < rows; ++i) {
    std::copy_n(src + i * row_stride, hd.d, dst + int64_t(i) * hd.d2);
    if (hd.d2 > hd.d) dst[int64_t(i) * hd.d2 + hd.d] = bf16{};
  }
}

// Transposed: dst[e * ld + i] = row i, element e of src for e < D, i < round_up(rows, 2) (zero at
// i = rows when rows is odd). As A of a product over rows whose rows are D.
void transpose_rows(const bf16* src, int64_t row_stride, int rows, int head_dim, int64_t ld,
                    bf16* dst) {
  for (int e = 0; e < head_dim; ++e) {
    bf16* out = dst + e * ld;
    for (int i = 0; i < rows; ++i) out[i] = src[i * row_stride + e];
    if (rows % 2) out[rows] = bf16{};
  }
}

// --- Outputs ------------------------------------------------------------------------------------

void check_output(const char* name, const AttnOutput& out, bool accumulate, int seq, int heads,
                  int head_dim) {
  WF_CHECK((out.bf16_data != nullptr) != (out.fp32_data != nullptr),
           "attention bf16: set exactly one of {}.bf16_data and {}.fp32_data", name, name);
  WF_CHECK(!accumulate || out.fp32_data,
           "attention bf16: accumulate needs {} in fp32 (a bf16 {} would be rounded per block)",
           name, name);
  check_strides(name, out.stride, seq, heads, head_dim);
}

// Writes `rows` rows of a result held in fp32 to `out` at element offset `at` (row r at
// at + r * out.stride.seq): element (r, e) of the result is src[r * src_row + e * src_col]. fp32
// outputs are overwritten or added to, bf16 outputs get the value rounded.
void store_rows(const AttnOutput& out, int64_t at, int rows, int head_dim, const float* src,
                int64_t src_row, int64_t src_col, bool add) {
  for (int r = 0; r < rows; ++r) {
    const float* s = src + r * src_row;
    const int64_t row = at + r * out.stride.seq;
    if (out.bf16_data) {
      for (int e = 0; e < head_dim; ++e) out.bf16_data[row + e] = to_bf16(s[e * src_col]);
    } else if (add) {
      for (int e = 0; e < head_dim; ++e) out.fp32_data[row + e] += s[e * src_col];
    } else {
      for (int e = 0; e < head_dim; ++e) out.fp32_data[row + e] = s[e * src_col];
    }
  }
}

// Sets every (b, s, h) row of an output to zero.
void zero_output(const AttnOutput& out, int batch, int seq, int heads, int head_dim) {
  for (int b = 0; b < batch; ++b)
    for (int h = 0; h < heads; ++h)
      for (int s = 0; s < seq; ++s) {
        const int64_t at = b * out.stride.batch + s * out.stride.seq + h * out.stride.head;
        if (out.bf16_data)
          std::fill_n(out.bf16_data + at, head_dim, bf16{});
        else
          std::fill_n(out.fp32_data + at, head_dim, 0.0f);
      }
}

// --- Softmax rows (fp32) ------------------------------------------------------------------------

// s[j] *= scale for j < n; returns the largest s[j] (-inf when n = 0).
[[gnu::noinline]] float scale_max(float* __restrict s, int n, float scale) {
  float m = kNegInf;
#pragma omp simd reduction(max : m)
  for (int j = 0; j < n; ++j) {
    s[j] *= scale;
    m = m > s[j] ? m : s[j];
  }
  return m;
}

// pt[j] = bf16(exp(s[j] - shift)) for j < n; returns the sum of the rounded values.
[[gnu::noinline]] float exp_round_sum(const float* __restrict s, int n, float shift,
                                      bf16* __restrict pt) {
  float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
  for (int j = 0; j < n; ++j) {
    const bf16 p = to_bf16(exp_approx(s[j] - shift));
    pt[j] = p;
    sum += to_float(p);
  }
  return sum;
}

// p[j] = exp(scale s[j] - lse) and dp[j] = p[j] (dp[j] - delta) scale for j < n (in place).
[[gnu::noinline]] void probs_and_grads(float* __restrict s, float* __restrict dp, int n,
                                       float scale, float lse, float delta) {
#pragma omp simd
  for (int j = 0; j < n; ++j) {
    const float p = exp_approx(s[j] * scale - lse);
    s[j] = p;
    dp[j] = p * (dp[j] - delta) * scale;
  }
}

// Rounds two fp32 rows (x1 may be null: zeros) to bf16 pairs out[2j + r] = bf16(x_r[j]), j < n.
[[gnu::noinline]] void round_row_pair(const float* __restrict x0, const float* __restrict x1, int n,
                                      bf16* __restrict out) {
  if (x1) {
#pragma omp simd
    for (int j = 0; j < n; ++j) {
      out[2 * j] = to_bf16(x0[j]);
      out[2 * j + 1] = to_bf16(x1[j]);
    }
  } else {
#pragma omp simd
    for (int j = 0; j < n; ++j) {
      out[2 * j] = to_bf16(x0[j]);
      out[2 * j + 1] = bf16{};
    }
  }
}

// --- Forward ------------------------------------------------------------------------------------

// K and V of every (batch, kv head), packed once per call for the tile products:
//   kd: per key tile, pairs of D by keys ([d2 / 2][bk][2]), the B of S = Q K^T;
//   vj: pairs of keys by D ([round_up(Sk, 2) / 2][d16][2]), the B of O += P V.
struct FwdPacked {
  int tiles = 0;
  int64_t kd_tile = 0, kd_head = 0, vj_head = 0;
  std::vector<bf16> kd, vj;
  FwdPacked(const AttnDims& d, const HeadDims& hd, int bk)
      : tiles(int((d.seq_k + bk - 1) / bk)),
        kd_tile(int64_t(hd.d2) * bk),
        kd_head(tiles * kd_tile),
        vj_head(round_up(d.seq_k, 2) * hd.d16) {}
  static int64_t elements(const AttnDims& d, const HeadDims& hd, int bk) {
    const FwdPacked f(d, hd, bk);
    return int64_t(d.batch) * d.kv_heads * (f.kd_head + f.vj_head);
  }
};

// Scratch of one thread.
struct FwdTile {
  std::vector<bf16> qb;          // query block rows (bq, d2)
  std::vector<float> s;          // scores (bq, bk)
  std::vector<bf16> pt;          // P rounded (bq, bk)
  std::vector<float> oacc;       // O accumulator (bq, D)
  std::vector<float> m, l, lse;  // running max, running sum of rounded P, the block's LSE
  FwdTile(int bq, int bk, const HeadDims& h)
      : qb(size_t(bq) * h.d2),
        s(size_t(bq) * bk),
        pt(s.size()),
        oacc(size_t(bq) * h.d),
        m(bq),
        l(bq),
        lse(bq) {}
  static int64_t bytes(int bq, int bk, const HeadDims& h) {
    return 2 * (int64_t(bq) * h.d2 + int64_t(bq) * bk) +
           4 * (int64_t(bq) * bk + int64_t(bq) * h.d + 3 * int64_t(bq));
  }
};

}  // namespace

AttnTiling attn_fwd_bf16_tiling(const AttnDims&) { return {kFwdBlockQ, kFwdBlockK}; }
AttnTiling attn_bwd_bf16_tiling(const AttnDims&) { return {kBwdBlockQ, kBwdBlockK}; }

bool bf16_avx512_available() {
#if defined(__x86_64__) || defined(__i386__)
  static const bool ok =
      detail::bf16_gemm_avx512_built() && __builtin_cpu_supports("avx512bf16") != 0;
  return ok;
#else
  return false;
#endif
}

const char* bf16_path_name(Bf16Path path) {
  return path == Bf16Path::avx512 ? "avx512" : "portable";
}

Bf16Path bf16_path() {
  const char* env = std::getenv("WALLFACER_BF16_PATH");
  const std::string_view want = env ? env : "";
  if (want.empty() || want == "auto")
    return bf16_avx512_available() ? Bf16Path::avx512 : Bf16Path::portable;
  if (want == "portable") return Bf16Path::portable;
  WF_USAGE_CHECK(want == "avx512", "WALLFACER_BF16_PATH must be auto, portable or avx512, got '{}'",
                 want);
  WF_USAGE_CHECK(bf16_avx512_available(),
                 "WALLFACER_BF16_PATH=avx512, but {}; unset it or set it to portable",
                 detail::bf16_gemm_avx512_built() ? "this CPU does not report avx512_bf16"
                                                  : "this build has no AVX512-BF16 code");
  return Bf16Path::avx512;
}

int64_t attn_fwd_bf16_workspace_bytes(const AttnDims& dims, int threads) {
  const HeadDims hd(dims.head_dim);
  const AttnTiling t = attn_fwd_bf16_tiling(dims);
  return 2 * FwdPacked::elements(dims, hd, t.block_k) +
         threads * FwdTile::bytes(t.block_q, t.block_k, hd);
}

void attn_fwd_bf16(const AttnFwdBf16Params& p) {
  const AttnDims& d = p.dims;
  check_dims(d);
  WF_CHECK(p.q && p.k && p.v && p.lse, "attn_fwd_bf16: null pointer among q, k, v, lse");
  check_strides("q", p.q_stride, d.seq_q, d.heads, d.head_dim);
  check_strides("k", p.k_stride, d.seq_k, d.kv_heads, d.head_dim);
  check_strides("v", p.v_stride, d.seq_k, d.kv_heads, d.head_dim);
  check_output("o", p.o, p.accumulate, d.seq_q, d.heads, d.head_dim);
  const GemmFn gemm = gemm_of(bf16_path());
  if (d.seq_q == 0) return;
  if (d.seq_k == 0) {
    if (!p.accumulate) {
      zero_output(p.o, d.batch, d.seq_q, d.heads, d.head_dim);
      for (int b = 0; b < d.batch; ++b)
        for (int h = 0; h < d.heads; ++h)
          std::fill_n(p.lse + b * p.lse_stride.batch + h * p.lse_stride.head, d.seq_q, kNegInf);
    }
    return;
  }

  const AttnTiling tile = attn_fwd_bf16_tiling(d);
  const int bq = tile.block_q, bk = tile.block_k;
  const HeadDims hd(d.head_dim);
  const int D = hd.d;
  const int group = d.heads / d.kv_heads;
  const int nthreads = num_threads();

  FwdPacked pk(d, hd, bk);
  pk.kd.resize(size_t(d.batch) * d.kv_heads * pk.kd_head);
  pk.vj.resize(size_t(d.batch) * d.kv_heads * pk.vj_head);
  const int64_t pack_units = int64_t(d.batch) * d.kv_heads * pk.tiles;
#pragma omp parallel for num_threads(nthreads) schedule(static)
  for (int64_t u = 0; u < pack_units; ++u) {
    const int64_t bh = u / pk.tiles;
    const int jt = int(u % pk.tiles);
    const int b = int(bh / d.kv_heads), hk = int(bh % d.kv_heads);
    const int j0 = jt * bk, nk = std::min(bk, d.seq_k - j0);
    const bf16* k = p.k + b * p.k_stride.batch + hk * p.k_stride.head + j0 * p.k_stride.seq;
    const bf16* v = p.v + b * p.v_stride.batch + hk * p.v_stride.head + j0 * p.v_stride.seq;
    pack_column_pairs(k, p.k_stride.seq, nk, hd, bk,
                      pk.kd.data() + bh * pk.kd_head + jt * pk.kd_tile);
    pack_row_pairs(v, p.v_stride.seq, nk, hd,
                   pk.vj.data() + bh * pk.vj_head + int64_t(j0) * hd.d16);
  }

  const int64_t nqb = (d.seq_q + bq - 1) / bq;
  const int64_t tasks = int64_t(d.batch) * d.heads * nqb;
#pragma omp parallel num_threads(nthreads)
  {
    FwdTile w(bq, bk, hd);
    float *s = w.s.data(), *oacc = w.oacc.data(), *m = w.m.data(), *l = w.l.data();
    float* lb = w.lse.data();
    bf16 *qb = w.qb.data(), *pt = w.pt.data();
#pragma omp for schedule(dynamic, 1)
    for (int64_t t = 0; t < tasks; ++t) {
      // Largest query blocks first: under a causal mask they carry the most work.
      const int64_t qblk = nqb - 1 - t % nqb;
      const int64_t bh = t / nqb;
      const int b = static_cast<int>(bh / d.heads), h = static_cast<int>(bh % d.heads);
      const int64_t bhk = int64_t(b) * d.kv_heads + h / group;
      const int i0 = static_cast<int>(qblk * bq);
      const int nq = std::min(bq, d.seq_q - i0);
      const int64_t qpos_first = p.q_pos0 + i0, qpos_last = qpos_first + nq - 1;
      copy_rows(p.q + b * p.q_stride.batch + i0 * p.q_stride.seq + h * p.q_stride.head,
                p.q_stride.seq, nq, hd, qb);
      std::fill_n(m, nq, kNegInf);
      std::fill_n(l, nq, 0.0f);
      std::fill_n(oacc, int64_t(nq) * D, 0.0f);
      for (int jt = 0; jt < pk.tiles; ++jt) {
        const int j0 = jt * bk, nk = std::min(bk, d.seq_k - j0), nk2 = nk + nk % 2;
        const int64_t kpos_first = p.k_pos0 + j0, kpos_last = kpos_first + nk - 1;
        if (p.causal && kpos_first > qpos_last) break;  // this tile and all later ones are future
        const bool partial = p.causal && kpos_last > qpos_first;
        gemm({.m = nq,
              .n = nk,
              .kp = hd.d2 / 2,
              .a = qb,
              .lda = hd.d2,
              .b = pk.kd.data() + bhk * pk.kd_head + jt * pk.kd_tile,
              .ldb = 2 * bk,
              .c = s,
              .ldc = bk,
              .accumulate = false});
        for (int i = 0; i < nq; ++i) {
          float* srow = s + int64_t(i) * bk;
          bf16* prow = pt + int64_t(i) * bk;
          const int vis = partial ? visible_keys(qpos_first + i, kpos_first, nk) : nk;
          const float m_new = std::max(m[i], scale_max(srow, vis, p.scale));
          if (m_new == kNegInf) {  // nothing visible yet: the row stays (0, 0)
            std::fill_n(prow, nk2, bf16{});
            continue;
          }
          const float alpha = exp_approx(m[i] - m_new);
          const float sum = exp_round_sum(srow, vis, m_new, prow);
          std::fill(prow + vis, prow + nk2, bf16{});
          l[i] = l[i] * alpha + sum;
          m[i] = m_new;
          if (alpha != 1.0f) {
            float* orow = oacc + int64_t(i) * D;
            for (int e = 0; e < D; ++e) orow[e] *= alpha;
          }
        }
        gemm({.m = nq,
              .n = D,
              .kp = nk2 / 2,
              .a = pt,
              .lda = bk,
              .b = pk.vj.data() + bhk * pk.vj_head + int64_t(j0) * hd.d16,
              .ldb = 2 * hd.d16,
              .c = oacc,
              .ldc = D,
              .accumulate = true});
      }
      for (int i = 0; i < nq; ++i) {
        if (l[i] == 0.0f) {
          lb[i] = kNegInf;
          continue;
        }
        const float inv = 1.0f / l[i];
        float* orow = oacc + int64_t(i) * D;
        for (int e = 0; e < D; ++e) orow[e] *= inv;
        lb[i] = m[i] + std::log(l[i]);
      }
      const int64_t o_at = b * p.o.stride.batch + i0 * p.o.stride.seq + h * p.o.stride.head;
      float* lse = p.lse + b * p.lse_stride.batch + h * p.lse_stride.head + i0;
      if (p.accumulate) {
        lse_merge_rows(nq, D, p.o.fp32_data + o_at, p.o.stride.seq, lse, 1, oacc, D, lb, 1);
      } else {
        store_rows(p.o, o_at, nq, D, oacc, D, 1, false);
        std::copy_n(lb, nq, lse);
      }
    }
  }
}

void attn_bwd_preprocess_bf16(const AttnDims& dims, const bf16* o, Strides3 o_stride,
                              const bf16* dout, Strides3 dout_stride, float* delta,
                              Strides2 delta_stride) {
  check_dims(dims);
  WF_CHECK(o && dout && delta, "attn_bwd_preprocess_bf16: null pointer among o, dout, delta");
  const int64_t tasks = int64_t(dims.batch) * dims.heads;
#pragma omp parallel for num_threads(num_threads()) schedule(static)
  for (int64_t t = 0; t < tasks; ++t) {
    const int64_t b = t / dims.heads, h = t % dims.heads;
    for (int i = 0; i < dims.seq_q; ++i) {
      const bf16* orow = o + b * o_stride.batch + i * o_stride.seq + h * o_stride.head;
      const bf16* grow = dout + b * dout_stride.batch + i * dout_stride.seq + h * dout_stride.head;
      float acc = 0.0f;
#pragma omp simd reduction(+ : acc)
      for (int e = 0; e < dims.head_dim; ++e) acc += to_float(orow[e]) * to_float(grow[e]);
      delta[b * delta_stride.batch + h * delta_stride.head + i] = acc;
    }
  }
}

// --- Backward -----------------------------------------------------------------------------------

namespace {

// Q and dO of every (batch, head) transposed once per call ([D][round_up(Sq, 2)]): the A of
// dK^T += Q^T dS and dV^T += dO^T P, whose sums run over query rows.
struct BwdPacked {
  int64_t ld = 0, head = 0;
  std::vector<bf16> qt, dot;
  explicit BwdPacked(const AttnDims& d) : ld(round_up(d.seq_q, 2)), head(ld * d.head_dim) {}
  static int64_t elements(const AttnDims& d) {
    return 2 * int64_t(d.batch) * d.heads * BwdPacked(d).head;
  }
};

// Scratch of one thread.
struct BwdTile {
  int bq, bk;
  HeadDims hd;
  std::vector<bf16> kd, vd, kj;    // key tile packed: pairs of D ([d2/2][bk][2]) / of keys
  std::vector<bf16> qb, dob;       // query block rows (bq, d2)
  std::vector<float> s, dp;        // (bq, bk): scores then P; dP then dS
  std::vector<bf16> pt, dst, dsr;  // P, dS in pairs of rows ([bq/2][bk][2]); dS in rows
  std::vector<float> dkt, dvt;     // (D, bk): dK^T, dV^T of the key tile
  BwdTile(int block_q, int block_k, const HeadDims& h)
      : bq(block_q),
        bk(block_k),
        hd(h),
        kd(size_t(h.d2) * block_k),
        vd(kd.size()),
        kj(size_t(block_k) * h.d16),
        qb(size_t(block_q) * h.d2),
        dob(qb.size()),
        s(size_t(block_q) * block_k),
        dp(s.size()),
        pt(size_t(block_q) * block_k),
        dst(pt.size()),
        dsr(pt.size()),
        dkt(size_t(h.d) * block_k),
        dvt(dkt.size()) {}
  static int64_t bytes(int bq, int bk, const HeadDims& h) {
    return 2 * (2 * int64_t(h.d2) * bk + int64_t(bk) * h.d16 + 2 * int64_t(bq) * h.d2 +
                3 * int64_t(bq) * bk) +
           4 * (2 * int64_t(bq) * bk + 2 * int64_t(h.d) * bk);
  }
};

struct BwdTask {
  int b, hk;
  int j_begin, j_end;  // key rows [j_begin, j_end)
  float* dq;           // dQ (fp32): head h at dq + (h - first head) * dq_head
  int64_t dq_head, dq_seq;
};

// Backward of one kv head over key rows [j_begin, j_end), all query heads of its group: adds into
// task.dq and writes (or adds into) the rows of dk, dv it owns.
void bwd_kv_range(const AttnBwdBf16Params& p, const BwdPacked& pk, GemmFn gemm, const BwdTask& task,
                  BwdTile& w) {
  const AttnDims& d = p.dims;
  const HeadDims& hd = w.hd;
  const int bq = w.bq, bk = w.bk, D = hd.d;
  const int group = d.heads / d.kv_heads;
  const int b = task.b, hk = task.hk;
  const bf16* k = p.k + b * p.k_stride.batch + hk * p.k_stride.head;
  const bf16* v = p.v + b * p.v_stride.batch + hk * p.v_stride.head;
  for (int j0 = task.j_begin; j0 < task.j_end; j0 += bk) {
    const int nk = std::min(bk, task.j_end - j0), nk2 = nk + nk % 2;
    const int64_t kpos_first = p.k_pos0 + j0, kpos_last = kpos_first + nk - 1;
    pack_column_pairs(k + j0 * p.k_stride.seq, p.k_stride.seq, nk, hd, bk, w.kd.data());
    pack_column_pairs(v + j0 * p.v_stride.seq, p.v_stride.seq, nk, hd, bk, w.vd.data());
    pack_row_pairs(k + j0 * p.k_stride.seq, p.k_stride.seq, nk, hd, w.kj.data());
    std::fill(w.dkt.begin(), w.dkt.end(), 0.0f);
    std::fill(w.dvt.begin(), w.dvt.end(), 0.0f);
    for (int g = 0; g < group; ++g) {
      const int h = hk * group + g;
      const bf16* q = p.q + b * p.q_stride.batch + h * p.q_stride.head;
      const bf16* dout = p.dout + b * p.dout_stride.batch + h * p.dout_stride.head;
      const float* lse = p.lse + b * p.lse_stride.batch + h * p.lse_stride.head;
      const float* delta = p.delta + b * p.delta_stride.batch + h * p.delta_stride.head;
      const bf16* qt = pk.qt.data() + (int64_t(b) * d.heads + h) * pk.head;
      const bf16* dot = pk.dot.data() + (int64_t(b) * d.heads + h) * pk.head;
      float* dq = task.dq + g * task.dq_head;
      // Query blocks that end before the key tile starts are entirely masked under causal.
      int i_start = 0;
      if (p.causal) {
        const int64_t first = kpos_first - p.q_pos0;  // first query row that sees a key of the tile
        if (first >= d.seq_q) continue;
        i_start = static_cast<int>(std::max<int64_t>(0, first) / bq * bq);
      }
      for (int i0 = i_start; i0 < d.seq_q; i0 += bq) {
        const int nq = std::min(bq, d.seq_q - i0), nq2 = nq + nq % 2;
        const int64_t qpos_first = p.q_pos0 + i0, qpos_last = qpos_first + nq - 1;
        if (p.causal && kpos_first > qpos_last) continue;
        const bool partial = p.causal && kpos_last > qpos_first;
        copy_rows(q + i0 * p.q_stride.seq, p.q_stride.seq, nq, hd, w.qb.data());
        copy_rows(dout + i0 * p.dout_stride.seq, p.dout_stride.seq, nq, hd, w.dob.data());
        gemm({.m = nq,
              .n = nk,
              .kp = hd.d2 / 2,
              .a = w.qb.data(),
              .lda = hd.d2,
              .b = w.kd.data(),
              .ldb = 2 * bk,
              .c = w.s.data(),
              .ldc = bk,
              .accumulate = false});
        gemm({.m = nq,
              .n = nk,
              .kp = hd.d2 / 2,
              .a = w.dob.data(),
              .lda = hd.d2,
              .b = w.vd.data(),
              .ldb = 2 * bk,
              .c = w.dp.data(),
              .ldc = bk,
              .accumulate = false});
        for (int i = 0; i < nq; ++i) {
          float* prow = w.s.data() + int64_t(i) * bk;
          float* dsrow = w.dp.data() + int64_t(i) * bk;
          const float l = lse[i0 + i];
          const int vis = l == kNegInf ? 0
                          : partial    ? visible_keys(qpos_first + i, kpos_first, nk)
                                       : nk;
          probs_and_grads(prow, dsrow, vis, p.scale, l, delta[i0 + i]);
          std::fill(prow + vis, prow + nk2, 0.0f);
          std::fill(dsrow + vis, dsrow + nk2, 0.0f);
          fp32_to_bf16(dsrow, w.dsr.data() + int64_t(i) * bk, nk2);
        }
        for (int i = 0; i < nq; i += 2) {
          const bool two = i + 1 < nq;
          const float* s0 = w.s.data() + int64_t(i) * bk;
          const float* ds0 = w.dp.data() + int64_t(i) * bk;
          round_row_pair(s0, two ? s0 + bk : nullptr, nk, w.pt.data() + int64_t(i) * bk);
          round_row_pair(ds0, two ? ds0 + bk : nullptr, nk, w.dst.data() + int64_t(i) * bk);
        }
        // dV^T += dO^T P ; dK^T += Q^T dS (sums over query rows) ; dQ += dS K (over keys)
        gemm({.m = D,
              .n = nk,
              .kp = nq2 / 2,
              .a = dot + i0,
              .lda = pk.ld,
              .b = w.pt.data(),
              .ldb = 2 * bk,
              .c = w.dvt.data(),
              .ldc = bk,
              .accumulate = true});
        gemm({.m = D,
              .n = nk,
              .kp = nq2 / 2,
              .a = qt + i0,
              .lda = pk.ld,
              .b = w.dst.data(),
              .ldb = 2 * bk,
              .c = w.dkt.data(),
              .ldc = bk,
              .accumulate = true});
        gemm({.m = nq,
              .n = D,
              .kp = nk2 / 2,
              .a = w.dsr.data(),
              .lda = bk,
              .b = w.kj.data(),
              .ldb = 2 * hd.d16,
              .c = dq + i0 * task.dq_seq,
              .ldc = task.dq_seq,
              .accumulate = true});
      }
    }
    const int64_t dk_at = b * p.dk.stride.batch + hk * p.dk.stride.head + j0 * p.dk.stride.seq;
    const int64_t dv_at = b * p.dv.stride.batch + hk * p.dv.stride.head + j0 * p.dv.stride.seq;
    store_rows(p.dk, dk_at, nk, D, w.dkt.data(), 1, bk, p.accumulate);
    store_rows(p.dv, dv_at, nk, D, w.dvt.data(), 1, bk, p.accumulate);
  }
}

}  // namespace

int64_t attn_bwd_bf16_workspace_bytes(const AttnDims& dims, int threads, bool dq_is_bf16) {
  const AttnTiling t = attn_bwd_bf16_tiling(dims);
  const int parts = detail::bwd_key_parts(dims, threads, t.block_k);
  const int64_t dq_floats =
      (dq_is_bf16 ? int64_t(dims.batch) * dims.seq_q * dims.heads * dims.head_dim : 0) +
      detail::bwd_extra_dq_floats(dims, parts);
  return 2 * BwdPacked::elements(dims) +
         threads * BwdTile::bytes(t.block_q, t.block_k, HeadDims(dims.head_dim)) + 4 * dq_floats;
}

void attn_bwd_bf16(const AttnBwdBf16Params& p) {
  const AttnDims& d = p.dims;
  check_dims(d);
  WF_CHECK(p.q && p.k && p.v && p.dout && p.lse && p.delta,
           "attn_bwd_bf16: null pointer among q, k, v, dout, lse, delta");
  check_strides("q", p.q_stride, d.seq_q, d.heads, d.head_dim);
  check_strides("k", p.k_stride, d.seq_k, d.kv_heads, d.head_dim);
  check_strides("v", p.v_stride, d.seq_k, d.kv_heads, d.head_dim);
  check_strides("dout", p.dout_stride, d.seq_q, d.heads, d.head_dim);
  check_output("dq", p.dq, p.accumulate, d.seq_q, d.heads, d.head_dim);
  check_output("dk", p.dk, p.accumulate, d.seq_k, d.kv_heads, d.head_dim);
  check_output("dv", p.dv, p.accumulate, d.seq_k, d.kv_heads, d.head_dim);
  const GemmFn gemm = gemm_of(bf16_path());
  const int D = d.head_dim;
  if (d.seq_q == 0 || d.seq_k == 0) {
    if (!p.accumulate) {
      zero_output(p.dq, d.batch, d.seq_q, d.heads, D);
      zero_output(p.dk, d.batch, d.seq_k, d.kv_heads, D);
      zero_output(p.dv, d.batch, d.seq_k, d.kv_heads, D);
    }
    return;
  }
  const AttnTiling tile = attn_bwd_bf16_tiling(d);
  const HeadDims hd(D);
  const int group = d.heads / d.kv_heads;
  const int nthreads = num_threads();

  BwdPacked pk(d);
  pk.qt.resize(size_t(d.batch) * d.heads * pk.head);
  pk.dot.resize(pk.qt.size());
  const int64_t bh_count = int64_t(d.batch) * d.heads;
#pragma omp parallel for num_threads(nthreads) schedule(static)
  for (int64_t bh = 0; bh < bh_count; ++bh) {
    const int64_t b = bh / d.heads, h = bh % d.heads;
    transpose_rows(p.q + b * p.q_stride.batch + h * p.q_stride.head, p.q_stride.seq, d.seq_q, D,
                   pk.ld, pk.qt.data() + bh * pk.head);
    transpose_rows(p.dout + b * p.dout_stride.batch + h * p.dout_stride.head, p.dout_stride.seq,
                   d.seq_q, D, pk.ld, pk.dot.data() + bh * pk.head);
  }

  // dQ accumulates in fp32: in dq itself when it is fp32, else in a buffer rounded at the end.
  std::vector<float> dq_fp32;
  float* dq_main = p.dq.fp32_data;
  Strides3 dq_main_stride = p.dq.stride;
  if (p.dq.bf16_data) {
    dq_fp32.assign(size_t(d.batch) * d.seq_q * d.heads * D, 0.0f);
    dq_main = dq_fp32.data();
    dq_main_stride = Strides3::contiguous(d.seq_q, d.heads, D);
  }
  const int tasks = d.batch * d.kv_heads;
  const int parts = detail::bwd_key_parts(d, nthreads, tile.block_k);
  const std::vector<int> cut =
      detail::split_keys(d, p.causal, p.q_pos0, p.k_pos0, tile.block_k, parts);
  const int64_t dq_task = int64_t(group) * d.seq_q * D;  // private dQ of one (task, part)
  std::vector<float> dq_extra(detail::bwd_extra_dq_floats(d, parts));

#pragma omp parallel num_threads(nthreads)
  {
    BwdTile w(tile.block_q, tile.block_k, hd);
#pragma omp for schedule(dynamic, 1)
    for (int64_t u = 0; u < int64_t(tasks) * parts; ++u) {
      const int t = static_cast<int>(u / parts), part = static_cast<int>(u % parts);
      BwdTask task;
      task.b = t / d.kv_heads;
      task.hk = t % d.kv_heads;
      task.j_begin = cut[part];
      task.j_end = cut[part + 1];
      if (part == 0) {
        task.dq = dq_main + task.b * dq_main_stride.batch +
                  int64_t(task.hk) * group * dq_main_stride.head;
        task.dq_head = dq_main_stride.head;
        task.dq_seq = dq_main_stride.seq;
        if (!p.accumulate && p.dq.fp32_data)
          for (int g = 0; g < group; ++g)
            detail::zero_rows(task.dq + g * task.dq_head, task.dq_seq, d.seq_q, D);
      } else {
        task.dq = dq_extra.data() + (int64_t(part - 1) * tasks + t) * dq_task;
        task.dq_head = int64_t(d.seq_q) * D;
        task.dq_seq = D;
      }
      bwd_kv_range(p, pk, gemm, task, w);
    }
  }
  if (parts == 1 && !p.dq.bf16_data) return;
  // dq = dq_main + the private parts, in part order (rounded when dq is bf16).
  const int64_t rows = int64_t(tasks) * group * d.seq_q;
#pragma omp parallel for num_threads(nthreads) schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t t = r / (int64_t(group) * d.seq_q), g = r / d.seq_q % group, i = r % d.seq_q;
    const int64_t b = t / d.kv_heads, h = (t % d.kv_heads) * group + g;
    float* acc =
        dq_main + b * dq_main_stride.batch + i * dq_main_stride.seq + h * dq_main_stride.head;
    for (int part = 1; part < parts; ++part) {
      const float* add =
          dq_extra.data() + (int64_t(part - 1) * tasks + t) * dq_task + (g * d.seq_q + i) * D;
      for (int c = 0; c < D; ++c) acc[c] += add[c];
    }
    if (p.dq.bf16_data) {
      bf16* out =
          p.dq.bf16_data + b * p.dq.stride.batch + i * p.dq.stride.seq + h * p.dq.stride.head;
      fp32_to_bf16(acc, out, D);
    }
  }
}

}  // namespace wallfacer::kernels
