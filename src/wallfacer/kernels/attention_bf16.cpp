#include "wallfacer/kernels/attention_bf16.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <vector>

#include "wallfacer/core/error.h"
#include "wallfacer/core/memory.h"
#include "wallfacer/core/threads.h"
#include "wallfacer/kernels/attention_common.h"
#include "wallfacer/kernels/bf16_gemm.h"
#include "wallfacer/kernels/isa.h"
#include "wallfacer/kernels/scratch.h"
#include "wallfacer/kernels/vec_math.h"

// Three code paths (kernels/attention_bf16.h). The avx512 and amx paths are the tiled kernel below:
// bf16 tiles packed in pairs for VDPBF16PS (detail::bf16_gemm_avx512) or TDPBF16PS
// (detail::bf16_gemm_amx), P and dS rounded to bf16 between the products. The portable path
// (section "The portable path") widens the inputs to fp32 and runs this level's fp32 kernel
// (kernels/attention.h). Compiled once per instruction-set level (kernels/isa.h); the choice of
// path is in bf16_path.cpp.

WALLFACER_ISA_BEGIN
namespace wallfacer::kernels::WALLFACER_ISA {

// This level's fp32 kernels (kernels/attention.cpp), which the portable path runs.
void attn_fwd(const AttnFwdParams& p);
void attn_bwd(const AttnBwdParams& p);
int64_t attn_fwd_workspace_bytes(const AttnDims& dims, int threads);
int64_t attn_bwd_workspace_bytes(const AttnDims& dims, int threads);

namespace {

using detail::Bf16Gemm;
using detail::check_dims;
using detail::check_strides;
using detail::exp2_approx;
using detail::TileMask;

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
// The softmax works in base 2: scores are scaled by scale * log2(e) and exponentiated with
// exp2_approx; LSE is converted back to base e.
constexpr float kLog2e = 1.44269504088896341f;
constexpr float kLn2 = 0.693147180559945309f;
// Key tiles are multiples of 16 (the packed B rows are read in vectors of 16 columns) and query
// tiles are even (the backward pairs query rows). Measured at S = 4096, H = 8, D = 64 on 2 threads:
// the forward within 5% from 64 x 256 to 128 x 512; the backward 4-8% faster at 256 x 256 than at
// 128 x 256 (and slower at 64 or 128 keys), and 256 x 512 about 10% faster again than 256 x 256
// with a full mask, equal with a causal one (every key tile sweeps the query side: Q, dO, their
// transposes and dQ, from beyond the core's L2 at this length; 1024 keys are slower).
constexpr int kFwdBlockQ = 128, kFwdBlockK = 256;
// On the amx path the forward computes S and its softmax rows for this many query rows at a time:
// 32 x 256 fp32 scores (32 KiB) stay in L1 between the product and the softmax (S = 4096 causal,
// 2 threads, Xeon with AMX: the forward 3% faster than with 128 rows, 16 and 64 in between), and
// so does P (bf16) for O += P V of the chunk; with one tile configuration for a whole key tile the
// forward is another 6% faster (one thread, 356 against 334 GFLOP/s) than with O += P V over all
// rows at the end. Handing the AMX unit blocks of the next chunk's S between the softmax rows (for
// it to compute while the vector units run) was 12% slower.
constexpr int kFwdChunkQAmx = 32;
static_assert(kFwdChunkQAmx <= kFwdBlockQ);
// With a causal mask or packed documents (doc_of_pos) the backward keeps 256-key tiles: more of its
// tile pairs are skipped or run unmasked (S = 8192, 16 documents, causal: 4-9% faster than with 512
// keys; the GPT's causal step at S = 1024 about 6% faster).
constexpr int kBwdBlockQ = 256, kBwdBlockK = 512, kBwdBlockKNarrow = 256;
// The backward computes S and dP, then P and dS, for this many query rows of a block at a time
// (even), so that S and dP (fp32) stay in the core's caches between the products and the softmax
// rows.
constexpr int kBwdChunkQ = 32;
static_assert(kBwdChunkQ % 2 == 0);

inline int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

// The tile products: VDPBF16PS on the avx512 path, TDPBF16PS on the amx path (kernels/bf16_gemm.h);
// both read the same packed operands.
using GemmFn = void (*)(const Bf16Gemm&);
GemmFn gemm_of(Bf16Path path) {
  return path == Bf16Path::amx ? detail::bf16_gemm_amx : detail::bf16_gemm_avx512;
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
  const int pairs = hd.d2 / 2, full = hd.d / 2;
  const int64_t step = 2 * int64_t(ncols);  // from pair c to pair c + 1 of one column
  for (int j = 0; j < ncols; ++j) {
    bf16* out = dst + 2 * j;
    if (j >= rows) {
      for (int c = 0; c < pairs; ++c) out[c * step] = out[c * step + 1] = bf16{};
      continue;
    }
    const bf16* row = src + j * row_stride;
    for (int c = 0; c < full; ++c) std::memcpy(out + c * step, row + 2 * c, 2 * sizeof(bf16));
    if (full < pairs) {
      out[full * step] = row[hd.d - 1];
      out[full * step + 1] = bf16{};
    }
  }
}

// Pairs of rows: dst[(t * d16 + e) * 2 + r] = row 2t + r, element e of src, for 2t < round_up(rows,
// 2) and e < d16; zero beyond `rows` or beyond D. As B of a product over rows whose columns are D.
void pack_row_pairs(const bf16* src, int64_t row_stride, int rows, const HeadDims& hd, bf16* dst) {
  for (int t = 0; 2 * t < rows; ++t) {
    const bf16* __restrict r0 = src + 2 * t * row_stride;
    bf16* __restrict out = dst + int64_t(t) * hd.d16 * 2;
    if (2 * t + 1 < rows) {
      const bf16* __restrict r1 = r0 + row_stride;
      for (int e = 0; e < hd.d; ++e) {
        out[2 * e].bits = r0[e].bits;
        out[2 * e + 1].bits = r1[e].bits;
      }
    } else {
      for (int e = 0; e < hd.d; ++e) {
        out[2 * e].bits = r0[e].bits;
        out[2 * e + 1].bits = 0;
      }
    }
    std::fill(out + 2 * hd.d, out + 2 * hd.d16, bf16{});
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
// i = rows when rows is odd). As A of a product over rows whose rows are D. In blocks of 16 rows,
// so that the rows being read stay in cache while every e is written.
void transpose_rows(const bf16* src, int64_t row_stride, int rows, int head_dim, int64_t ld,
                    bf16* dst) {
  for (int i0 = 0; i0 < rows; i0 += 16) {
    const int ni = std::min(16, rows - i0);
    for (int e = 0; e < head_dim; ++e)
      for (int i = 0; i < ni; ++i) dst[e * ld + i0 + i] = src[(i0 + i) * row_stride + e];
  }
  if (rows % 2)
    for (int e = 0; e < head_dim; ++e) dst[e * ld + rows] = bf16{};
}

// --- Outputs ------------------------------------------------------------------------------------

void check_output(const char* name, const AttnOutput& out, Strides3 stride, bool accumulate,
                  int seq, int heads, int head_dim) {
  WF_CHECK((out.bf16_data != nullptr) != (out.fp32_data != nullptr),
           "attention bf16: set exactly one of {}.bf16_data and {}.fp32_data", name, name);
  WF_CHECK(!accumulate || out.fp32_data,
           "attention bf16: accumulate needs {} in fp32 (a bf16 {} would be rounded per block)",
           name, name);
  check_strides(name, stride, seq, heads, head_dim);
}

// Writes `rows` rows of a result held in fp32 to `out` at element offset `at` (row r at
// at + r * stride.seq): element (r, e) of the result is src[r * src_row + e * src_col]. fp32
// outputs are overwritten or added to, bf16 outputs get the value rounded.
void store_rows(const AttnOutput& out, Strides3 stride, int64_t at, int rows, int head_dim,
                const float* src, int64_t src_row, int64_t src_col, bool add) {
  for (int r = 0; r < rows; ++r) {
    const float* s = src + r * src_row;
    const int64_t row = at + r * stride.seq;
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
void zero_output(const AttnOutput& out, Strides3 stride, int batch, int seq, int heads,
                 int head_dim) {
  for (int b = 0; b < batch; ++b)
    for (int h = 0; h < heads; ++h)
      for (int s = 0; s < seq; ++s) {
        const int64_t at = b * stride.batch + s * stride.seq + h * stride.head;
        if (out.bf16_data)
          std::fill_n(out.bf16_data + at, head_dim, bf16{});
        else
          std::fill_n(out.fp32_data + at, head_dim, 0.0f);
      }
}

// --- Softmax rows (fp32) ------------------------------------------------------------------------

// The largest s[j] scale for j < n (-inf when n = 0). The scaled scores are not stored: the pass
// that exponentiates them scales them again, the same way.
[[gnu::noinline]] float scaled_max(const float* __restrict s, int n, float scale) {
  float m = kNegInf;
#pragma omp simd reduction(max : m)
  for (int j = 0; j < n; ++j) {
    const float x = s[j] * scale;
    m = m > x ? m : x;
  }
  return m;
}

// pt[j] = bf16(2^(s[j] scale - shift)) for j < n; returns the sum of the rounded values.
[[gnu::noinline]] float exp_round_sum(const float* __restrict s, int n, float scale, float shift,
                                      bf16* __restrict pt) {
  float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
  for (int j = 0; j < n; ++j) {
    const uint16_t p = to_bf16_bits(exp2_approx(s[j] * scale - shift));
    pt[j].bits = p;
    sum += bits_to_float(p);
  }
  return sum;
}

// One query row of a (query block, key tile) in the backward: its scores s and dP values dp (fp32),
// the keys [lo, hi) it sees (lo == hi when its LSE is -inf), lse2 = LSE log2(e) and delta.
struct BwdRow {
  const float* s;
  const float* dp;
  int lo, hi;
  float lse2, delta;
};

// P = 2^(scale2 s - lse2) and dS = P (dP - delta) scale of two rows for j < n (zero outside the
// keys [lo, hi) a row sees), rounded to bf16 into the pair layouts pt and dst (out[2j + r] for row
// r) and dS also into the rows ds0, ds1; scale2 = scale log2(e). Columns that both rows see first,
// without masks (so the loop vectorises well), then the rest.
[[gnu::noinline]] void bwd_row_pair(BwdRow r0, BwdRow r1, int n, float scale, float scale2,
                                    bf16* __restrict pt, bf16* __restrict dst, bf16* __restrict ds0,
                                    bf16* __restrict ds1) {
  const float* __restrict s0 = r0.s, * __restrict s1 = r1.s;
  const float* __restrict dp0 = r0.dp, * __restrict dp1 = r1.dp;
  const float l0 = r0.lse2, l1 = r1.lse2, delta0 = r0.delta, delta1 = r1.delta;
  const int lo = std::max(r0.lo, r1.lo), hi = std::max(lo, std::min(r0.hi, r1.hi));
#pragma omp simd
  for (int j = lo; j < hi; ++j) {
    const float p0 = exp2_approx(s0[j] * scale2 - l0);
    const float p1 = exp2_approx(s1[j] * scale2 - l1);
    const uint16_t d0 = to_bf16_bits(p0 * (dp0[j] - delta0) * scale);
    const uint16_t d1 = to_bf16_bits(p1 * (dp1[j] - delta1) * scale);
    pt[2 * j].bits = to_bf16_bits(p0);
    pt[2 * j + 1].bits = to_bf16_bits(p1);
    dst[2 * j].bits = d0;
    dst[2 * j + 1].bits = d1;
    ds0[j].bits = d0;
    ds1[j].bits = d1;
  }
  // Columns only one row sees (one column per row on a causal diagonal; more where a document
  // boundary falls between the rows) one at a time; zeros where neither row sees a key.
  const auto masked = [&](int j) {
    const bool in0 = j >= r0.lo && j < r0.hi, in1 = j >= r1.lo && j < r1.hi;
    const float p0 = in0 ? exp2_approx(s0[j] * scale2 - l0) : 0.0f;
    const float p1 = in1 ? exp2_approx(s1[j] * scale2 - l1) : 0.0f;
    const bf16 d0 = to_bf16(in0 ? p0 * (dp0[j] - delta0) * scale : 0.0f);
    const bf16 d1 = to_bf16(in1 ? p1 * (dp1[j] - delta1) * scale : 0.0f);
    pt[2 * j] = to_bf16(p0);
    pt[2 * j + 1] = to_bf16(p1);
    dst[2 * j] = ds0[j] = d0;
    dst[2 * j + 1] = ds1[j] = d1;
  };
  const auto zero = [&](int from, int to) {
    if (from >= to) return;
    std::fill(pt + 2 * from, pt + 2 * to, bf16{});
    std::fill(dst + 2 * from, dst + 2 * to, bf16{});
    std::fill(ds0 + from, ds0 + to, bf16{});
    std::fill(ds1 + from, ds1 + to, bf16{});
  };
  // [first, most): the columns some row sees (rows that see none do not count).
  const bool none0 = r0.lo >= r0.hi, none1 = r1.lo >= r1.hi;
  const int first = none0 ? (none1 ? n : r1.lo) : (none1 ? r0.lo : std::min(r0.lo, r1.lo));
  const int most = std::min(n, std::max(none0 ? 0 : r0.hi, none1 ? 0 : r1.hi));
  zero(0, std::min(first, n));
  for (int j = first; j < lo; ++j) masked(j);
  for (int j = hi; j < most; ++j) masked(j);
  zero(std::max(most, hi), n);
}

// --- The portable path --------------------------------------------------------------------------
//
// Without AVX512-BF16 a bf16 call is this level's fp32 kernel on its inputs widened to fp32
// (exactly): bf16 storage, fp32 arithmetic throughout (P and dS are not rounded), the outputs
// rounded once at the end when they are bf16. Widening costs a pass over the inputs, O(S D) against
// the kernel's O(S^2 D). The fp32 copies are made for a group of kv heads (with their query heads)
// at a time, at most detail::bf16_widen_budget() bytes of them, all heads of all batches in one
// call when they fit.

// How the heads are cut into fp32 calls.
struct WidenPlan {
  bool whole = false;       // one call for everything
  int kv_chunk = 1;         // kv heads per call otherwise (one batch at a time)
  int64_t slice_bytes = 0;  // the fp32 copies of the largest call
};

// The plan for `seq_k_tensors` fp32 tensors of Sk rows per kv head and `seq_q_tensors` of Sq rows
// per query head.
WidenPlan widen_plan(const AttnDims& d, int seq_k_tensors, int seq_q_tensors) {
  const int group = d.heads / d.kv_heads;
  const int64_t per_kv =  // bytes per kv head of one batch
      4 * int64_t(d.head_dim) *
      (int64_t(seq_k_tensors) * d.seq_k + int64_t(seq_q_tensors) * group * d.seq_q);
  const int64_t budget = detail::bf16_widen_budget();
  WidenPlan w;
  w.whole = per_kv * d.kv_heads * d.batch <= budget;
  w.kv_chunk = int(std::clamp<int64_t>(budget / std::max<int64_t>(per_kv, 1), 1, d.kv_heads));
  w.slice_bytes = per_kv * (w.whole ? int64_t(d.batch) * d.kv_heads : w.kv_chunk);
  return w;
}

// One fp32 call's slice: batches [b0, b0 + nb), query heads [h0, h0 + nh), kv heads
// [hk0, hk0 + nhk).
struct Slice {
  int b0, nb, h0, nh, hk0, nhk;
};

// Calls fn(slice) for every slice of the plan.
template <class Fn>
void for_each_slice(const AttnDims& d, const WidenPlan& w, Fn&& fn) {
  const int group = d.heads / d.kv_heads;
  if (w.whole) {
    fn(Slice{0, d.batch, 0, d.heads, 0, d.kv_heads});
    return;
  }
  for (int b = 0; b < d.batch; ++b)
    for (int hk0 = 0; hk0 < d.kv_heads; hk0 += w.kv_chunk) {
      const int nhk = std::min(w.kv_chunk, d.kv_heads - hk0);
      fn(Slice{b, 1, hk0 * group, nhk * group, hk0, nhk});
    }
}

// One tensor's part in a slice: heads [h0, h0 + nh) of batches [b0, b0 + nb) of a (B, S, H, D) bf16
// tensor and its contiguous (nb, S, nh, D) fp32 copy. Empty (null) parts are skipped.
struct Part {
  const bf16* src = nullptr;  // widen: from here
  bf16* dst = nullptr;        // narrow: to here
  Strides3 stride;
  int seq = 0, h0 = 0, nh = 0;
  float* wide = nullptr;
};

// Widens (src set) or rounds back (dst set) every part of a slice of batches [b0, b0 + nb), in one
// parallel region.
void convert(std::initializer_list<Part> parts, int b0, int nb, int D) {
#pragma omp parallel num_threads(num_threads())
  for (const Part& pt : parts) {
    if (!pt.src && !pt.dst) continue;
    const int64_t rows = int64_t(nb) * pt.seq;
#pragma omp for schedule(static) nowait
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t b = b0 + r / pt.seq, s = r % pt.seq;
      for (int h = 0; h < pt.nh; ++h) {
        const int64_t at = b * pt.stride.batch + s * pt.stride.seq + (pt.h0 + h) * pt.stride.head;
        float* __restrict wide = pt.wide + (r * pt.nh + h) * D;
        if (pt.src) {
          const uint16_t* __restrict in = &pt.src[at].bits;
#pragma omp simd
          for (int e = 0; e < D; ++e) wide[e] = bits_to_float(in[e]);
        } else {
          uint16_t* __restrict out = &pt.dst[at].bits;
#pragma omp simd
          for (int e = 0; e < D; ++e) out[e] = to_bf16_bits(wide[e]);
        }
      }
    }
  }
}

// The fp32 copies of a call come from one scratch buffer of the calling thread (kernels/scratch.h).
using Arena = detail::Scratch;

// Where the fp32 call writes one output of a slice: into the caller's fp32 tensor (offset to the
// slice), or into `scratch` (contiguous) for a bf16 one, rounded into it afterwards.
struct SliceOut {
  float* data;
  Strides3 stride;
};

SliceOut slice_out(const AttnOutput& out, Strides3 st, const Slice& sl, int first_head, int seq,
                   int nh, int D, Arena& arena) {
  if (out.fp32_data) return {out.fp32_data + sl.b0 * st.batch + first_head * st.head, st};
  return {arena.take(size_t(sl.nb) * seq * nh * D), Strides3::contiguous(seq, nh, D)};
}

// A part to widen (src) or to round back into (dst).
Part in(const bf16* src, Strides3 st, int seq, int h0, int nh, float* wide) {
  return {.src = src, .stride = st, .seq = seq, .h0 = h0, .nh = nh, .wide = wide};
}
Part out(bf16* dst, Strides3 st, int seq, int h0, int nh, float* wide) {
  return {.dst = dst, .stride = st, .seq = seq, .h0 = h0, .nh = nh, .wide = wide};
}

// q, k, v of a slice widened, and the fp32 kernel's arguments that read them; with dout_src (the
// backward) dout too, into *dout.
AttnArgs<float> widen_args(const AttnArgs<bf16>& p, const Slice& sl, Arena& arena,
                           const bf16* dout_src = nullptr, Strides3 dout_stride = {},
                           float** dout = nullptr) {
  const AttnDims& d = p.dims;
  const int D = d.head_dim;
  const size_t nq = size_t(sl.nb) * d.seq_q * sl.nh * D, nk = size_t(sl.nb) * d.seq_k * sl.nhk * D;
  float *q = arena.take(nq), *k = arena.take(nk), *v = arena.take(nk);
  float* wd = dout_src ? arena.take(nq) : nullptr;
  if (dout) *dout = wd;
  convert({in(p.q, p.q_stride, d.seq_q, sl.h0, sl.nh, q),
           in(p.k, p.k_stride, d.seq_k, sl.hk0, sl.nhk, k),
           in(p.v, p.v_stride, d.seq_k, sl.hk0, sl.nhk, v),
           in(dout_src, dout_stride, d.seq_q, sl.h0, sl.nh, wd)},
          sl.b0, sl.nb, D);
  return {.dims = {sl.nb, d.seq_q, d.seq_k, sl.nh, sl.nhk, D},
          .q = q,
          .q_stride = Strides3::contiguous(d.seq_q, sl.nh, D),
          .k = k,
          .k_stride = Strides3::contiguous(d.seq_k, sl.nhk, D),
          .v = v,
          .v_stride = Strides3::contiguous(d.seq_k, sl.nhk, D),
          .scale = p.scale,
          .causal = p.causal,
          .q_pos0 = p.q_pos0,
          .k_pos0 = p.k_pos0,
          .doc_of_pos = p.doc_of_pos,
          .window = p.window,
          .accumulate = p.accumulate};
}

void portable_fwd(const AttnFwdBf16Params& p) {
  const AttnDims& d = p.dims;
  const int D = d.head_dim;
  const int k_tensors = 2, q_tensors = p.o.bf16_data ? 2 : 1;
  const WidenPlan plan = widen_plan(d, k_tensors, q_tensors);
  Arena arena(plan.slice_bytes, 0);
  for_each_slice(d, plan, [&](const Slice& sl) {
    arena.reset();
    AttnFwdParams f;
    static_cast<AttnArgs<float>&>(f) = widen_args(p, sl, arena);
    const SliceOut so = slice_out(p.o, p.o_stride, sl, sl.h0, d.seq_q, sl.nh, D, arena);
    f.o = so.data, f.o_stride = so.stride;
    f.lse = p.lse + sl.b0 * p.lse_stride.batch + sl.h0 * p.lse_stride.head;
    f.lse_stride = p.lse_stride;
    WALLFACER_ISA::attn_fwd(f);
    convert({out(p.o.bf16_data, p.o_stride, d.seq_q, sl.h0, sl.nh, so.data)}, sl.b0, sl.nb, D);
  });
}

void portable_bwd(const AttnBwdBf16Params& p) {
  const AttnDims& d = p.dims;
  const int D = d.head_dim;
  const int k_tensors = 2 + (p.dk.bf16_data != nullptr) + (p.dv.bf16_data != nullptr),
            q_tensors = 2 + (p.dq.bf16_data != nullptr);
  const WidenPlan plan = widen_plan(d, k_tensors, q_tensors);
  Arena arena(plan.slice_bytes, 0);
  for_each_slice(d, plan, [&](const Slice& sl) {
    arena.reset();
    AttnBwdParams f;
    float* dout = nullptr;
    static_cast<AttnArgs<float>&>(f) = widen_args(p, sl, arena, p.dout, p.dout_stride, &dout);
    f.dout = dout;
    f.dout_stride = Strides3::contiguous(d.seq_q, sl.nh, D);
    f.lse = p.lse + sl.b0 * p.lse_stride.batch + sl.h0 * p.lse_stride.head;
    f.lse_stride = p.lse_stride;
    f.delta = p.delta + sl.b0 * p.delta_stride.batch + sl.h0 * p.delta_stride.head;
    f.delta_stride = p.delta_stride;
    const SliceOut oq = slice_out(p.dq, p.dq_stride, sl, sl.h0, d.seq_q, sl.nh, D, arena);
    const SliceOut ok = slice_out(p.dk, p.dk_stride, sl, sl.hk0, d.seq_k, sl.nhk, D, arena);
    const SliceOut ov = slice_out(p.dv, p.dv_stride, sl, sl.hk0, d.seq_k, sl.nhk, D, arena);
    f.dq = oq.data, f.dq_stride = oq.stride;
    f.dk = ok.data, f.dk_stride = ok.stride;
    f.dv = ov.data, f.dv_stride = ov.stride;
    WALLFACER_ISA::attn_bwd(f);
    // Outputs held in fp32 (dst null) are skipped.
    convert({out(p.dq.bf16_data, p.dq_stride, d.seq_q, sl.h0, sl.nh, oq.data),
             out(p.dk.bf16_data, p.dk_stride, d.seq_k, sl.hk0, sl.nhk, ok.data),
             out(p.dv.bf16_data, p.dv_stride, d.seq_k, sl.hk0, sl.nhk, ov.data)},
            sl.b0, sl.nb, D);
  });
}

// --- Forward ------------------------------------------------------------------------------------

// K and V of every (batch, kv head), packed once per call for the tile products:
//   kd: per key tile, pairs of D by keys ([d2 / 2][bk][2]), the B of S = Q K^T;
//   vj: pairs of keys by D ([round_up(Sk, 2) / 2][d16][2]), the B of O += P V.
struct FwdPacked {
  int tiles = 0;
  int64_t kd_tile = 0, kd_head = 0, vj_head = 0;
  LargeVector<bf16> kd, vj;
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

namespace {

// The backward's tiles: those of attn_bwd_bf16_tiling, narrower key tiles with a causal mask or
// documents.
AttnTiling bwd_tiling(const AttnDims& dims, bool narrow) {
  AttnTiling t = WALLFACER_ISA::attn_bwd_bf16_tiling(dims);
  if (narrow) t.block_k = kBwdBlockKNarrow;
  return t;
}

}  // namespace

int64_t attn_fwd_bf16_workspace_bytes(const AttnDims& dims, int threads) {
  if (bf16_path() == Bf16Path::portable)  // with a bf16 O
    return widen_plan(dims, 2, 2).slice_bytes +
           WALLFACER_ISA::attn_fwd_workspace_bytes(dims, threads);
  const HeadDims hd(dims.head_dim);
  const AttnTiling t = WALLFACER_ISA::attn_fwd_bf16_tiling(dims);
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
  check_output("o", p.o, p.o_stride, p.accumulate, d.seq_q, d.heads, d.head_dim);
  detail::check_window("attn_fwd_bf16", p.causal, p.window);
  if (p.doc_of_pos)
    detail::check_doc_of_pos("attn_fwd_bf16", p.doc_of_pos, p.q_pos0, d.seq_q, p.k_pos0, d.seq_k);
  const Bf16Path path = bf16_path();
  if (d.seq_q == 0) return;
  if (d.seq_k == 0) {
    if (!p.accumulate) {
      zero_output(p.o, p.o_stride, d.batch, d.seq_q, d.heads, d.head_dim);
      for (int b = 0; b < d.batch; ++b)
        for (int h = 0; h < d.heads; ++h)
          std::fill_n(p.lse + b * p.lse_stride.batch + h * p.lse_stride.head, d.seq_q, kNegInf);
    }
    return;
  }
  if (path == Bf16Path::portable) return portable_fwd(p);
  const GemmFn gemm = gemm_of(path);
  const bool amx = path == Bf16Path::amx;

  const AttnTiling tile = WALLFACER_ISA::attn_fwd_bf16_tiling(d);
  const int bq = tile.block_q, bk = tile.block_k;
  const HeadDims hd(d.head_dim);
  const int D = hd.d;
  const int group = d.heads / d.kv_heads;
  const int nthreads = num_threads();
  const float scale2 = p.scale * kLog2e;

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
      if (amx) detail::bf16_amx_begin();
      detail::for_each_key_tile(
          d.seq_k, p.k_pos0, bk, qpos_first, qpos_last, p.causal, p.window, p.doc_of_pos,
          [&](int j0, int nk, const TileMask& mask) {
            const int jt = j0 / bk, nk2 = nk + nk % 2;
            // Softmax row i of the avx512 path, its scores at srow: P rounded into pt, m and l
            // updated, O rescaled.
            const auto softmax_row = [&](int i, const float* srow, bf16* prow) {
              int lo = 0, hi = nk;
              if (!mask.whole()) mask.keys(i, nk, &lo, &hi);
              const float m_new = std::max(m[i], scaled_max(srow + lo, hi - lo, scale2));
              if (m_new == kNegInf) {  // nothing visible yet: the row stays (0, 0)
                std::fill_n(prow, nk2, bf16{});
                return;
              }
              const float alpha = exp2_approx(m[i] - m_new);
              const float sum = exp_round_sum(srow + lo, hi - lo, scale2, m_new, prow + lo);
              std::fill(prow, prow + lo, bf16{});
              std::fill(prow + hi, prow + nk2, bf16{});
              l[i] = l[i] * alpha + sum;
              m[i] = m_new;
              if (alpha != 1.0f) {
                float* orow = oacc + int64_t(i) * D;
                for (int e = 0; e < D; ++e) orow[e] *= alpha;
              }
            };
            // S of query rows [r0, r0 + n) into sbuf; O += P V of those rows.
            const auto s_product = [&](int r0, int n, float* sbuf) -> Bf16Gemm {
              return {.m = n,
                      .n = nk,
                      .kp = hd.d2 / 2,
                      .a = qb + int64_t(r0) * hd.d2,
                      .lda = hd.d2,
                      .b = pk.kd.data() + bhk * pk.kd_head + jt * pk.kd_tile,
                      .ldb = 2 * bk,
                      .c = sbuf,
                      .ldc = bk,
                      .accumulate = false};
            };
            const auto pv_product = [&](const bf16* p_rows, int64_t ldp, int r0,
                                        int n) -> Bf16Gemm {
              return {.m = n,
                      .n = D,
                      .kp = nk2 / 2,
                      .a = p_rows,
                      .lda = ldp,
                      .b = pk.vj.data() + bhk * pk.vj_head + int64_t(j0) * hd.d16,
                      .ldb = 2 * hd.d16,
                      .c = oacc + int64_t(r0) * D,
                      .ldc = D,
                      .accumulate = true};
            };
            if (!amx) {
              gemm(s_product(0, nq, s));
              for (int i = 0; i < nq; ++i)
                softmax_row(i, s + int64_t(i) * bk, pt + int64_t(i) * bk);
              gemm(pv_product(pt, bk, 0, nq));
              return;
            }
            // The amx path: a chunk of kFwdChunkQAmx rows at a time, S, its softmax rows (the
            // scores still in L1), O += P V (P still in L1), under the task's tile
            // configuration. P row i is written over the first half of its own score row (each
            // softmax row reads its scores before it writes over them, bf16 at byte 2j behind
            // fp32 at byte 4j), so that scores, P, O and Q of the chunk fit in L1 together (32
            // rows: 32 + 8 + 4 KiB). The softmax rows of a chunk are one call
            // (detail::bf16_softmax_rows_amx): a whole row of 256 keys whose scores stay at or
            // below its running maximum takes one pass over them and leaves its O row as it is.
            const auto run_all = [](const Bf16Gemm& g) {
              detail::bf16_gemm_amx_run(g, 0, detail::bf16_gemm_amx_blocks(g));
            };
            int lo[kFwdChunkQAmx], hi[kFwdChunkQAmx];
            float alpha[kFwdChunkQAmx];
            for (int r0 = 0; r0 < nq; r0 += kFwdChunkQAmx) {
              const int nc = std::min(kFwdChunkQAmx, nq - r0);
              run_all(s_product(r0, nc, s));
              for (int i = 0; i < nc; ++i) {
                lo[i] = 0, hi[i] = nk;
                if (!mask.whole()) mask.keys(r0 + i, nk, &lo[i], &hi[i]);
              }
              detail::bf16_softmax_rows_amx({.s = s,
                                             .lds = bk,
                                             .rows = nc,
                                             .n2 = nk2,
                                             .lo = lo,
                                             .hi = hi,
                                             .scale = scale2,
                                             .m = m + r0,
                                             .l = l + r0,
                                             .alpha = alpha});
              for (int i = 0; i < nc; ++i)
                if (alpha[i] != 1.0f) {
                  float* orow = oacc + int64_t(r0 + i) * D;
                  for (int e = 0; e < D; ++e) orow[e] *= alpha[i];
                }
              run_all(pv_product(reinterpret_cast<const bf16*>(s), 2 * int64_t(bk), r0, nc));
            }
          });
      if (amx) detail::bf16_amx_end();
      for (int i = 0; i < nq; ++i) {
        if (l[i] == 0.0f) {
          lb[i] = kNegInf;
          continue;
        }
        const float inv = 1.0f / l[i];
        float* orow = oacc + int64_t(i) * D;
        for (int e = 0; e < D; ++e) orow[e] *= inv;
        lb[i] = m[i] * kLn2 + std::log(l[i]);
      }
      const int64_t o_at = b * p.o_stride.batch + i0 * p.o_stride.seq + h * p.o_stride.head;
      float* lse = p.lse + b * p.lse_stride.batch + h * p.lse_stride.head + i0;
      if (p.accumulate) {
        lse_merge_rows(nq, D, p.o.fp32_data + o_at, p.o_stride.seq, lse, 1, oacc, D, lb, 1);
      } else {
        store_rows(p.o, p.o_stride, o_at, nq, D, oacc, D, 1, false);
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
  detail::bwd_delta(dims, o, o_stride, dout, dout_stride, delta, delta_stride, num_threads());
}

// --- Backward -----------------------------------------------------------------------------------

namespace {

// Q and dO of every (batch, head) transposed once per call ([D][round_up(Sq, 2)]): the A of
// dK^T += Q^T dS and dV^T += dO^T P, whose sums run over query rows.
struct BwdPacked {
  int64_t ld = 0, head = 0;
  LargeVector<bf16> qt, dot;
  explicit BwdPacked(const AttnDims& d) : ld(round_up(d.seq_q, 2)), head(ld * d.head_dim) {}
  static int64_t elements(const AttnDims& d) {
    return 2 * int64_t(d.batch) * d.heads * BwdPacked(d).head;
  }
};

// Scratch of one thread.
struct BwdTile {
  int bq, bk, chunk;
  HeadDims hd;
  std::vector<bf16> kd, vd, kj;    // key tile packed: pairs of D ([d2/2][bk][2]) / of keys
  std::vector<bf16> qb, dob;       // query block rows (bq, d2)
  std::vector<float> s, dp;        // (chunk, bk): scores S and dP of a chunk of rows
  std::vector<bf16> pt, dst, dsr;  // P, dS in pairs of rows ([bq/2][bk][2]); dS in rows
  std::vector<float> dkt, dvt;     // (D, bk): dK^T, dV^T of the key tile
  BwdTile(int block_q, int block_k, int chunk_q, const HeadDims& h)
      : bq(block_q),
        bk(block_k),
        chunk(chunk_q),
        hd(h),
        kd(size_t(h.d2) * block_k),
        vd(kd.size()),
        kj(size_t(block_k) * h.d16),
        qb(size_t(block_q) * h.d2),
        dob(qb.size()),
        s(size_t(chunk_q) * block_k),
        dp(s.size()),
        pt(size_t(block_q) * block_k),
        dst(pt.size()),
        dsr(pt.size()),
        dkt(size_t(h.d) * block_k),
        dvt(dkt.size()) {}
  static int64_t bytes(int bq, int bk, int chunk, const HeadDims& h) {
    return 2 * (2 * int64_t(h.d2) * bk + int64_t(bk) * h.d16 + 2 * int64_t(bq) * h.d2 +
                3 * int64_t(bq) * bk) +
           4 * (2 * int64_t(chunk) * bk + 2 * int64_t(h.d) * bk);
  }
};

using detail::BwdTask;

// Backward of one kv head over key rows [j_begin, j_end), all query heads of its group: adds into
// task.dq and writes (or adds into) the rows of dk, dv it owns.
void bwd_kv_range(const AttnBwdBf16Params& p, const BwdPacked& pk, const BwdTask& task, BwdTile& w,
                  GemmFn gemm) {
  const AttnDims& d = p.dims;
  const HeadDims& hd = w.hd;
  const int bq = w.bq, bk = w.bk, D = hd.d;
  const float scale2 = p.scale * kLog2e;
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
      const detail::BwdHead<bf16> head = detail::bwd_head(p, task, g);
      const bf16 *q = head.q, *dout = head.dout;
      const float *lse = head.lse, *delta = head.delta;
      float* dq = head.dq;
      const bf16* qt = pk.qt.data() + (int64_t(b) * d.heads + h) * pk.head;
      const bf16* dot = pk.dot.data() + (int64_t(b) * d.heads + h) * pk.head;
      detail::for_each_query_block(
          d, p.q_pos0, bq, kpos_first, kpos_last, p.causal, p.window, p.doc_of_pos,
          [&](int i0, int nq, const TileMask& mask) {
            const int nq2 = nq + nq % 2;
            // Q and dO rows are the A of the products over D as they are, unless D is odd (then
            // copied with a zero after the last element).
            const bf16 *qi = q + i0 * p.q_stride.seq, *doi = dout + i0 * p.dout_stride.seq;
            int64_t ldq = p.q_stride.seq, lddo = p.dout_stride.seq;
            if (hd.d2 != D) {
              copy_rows(qi, ldq, nq, hd, w.qb.data());
              copy_rows(doi, lddo, nq, hd, w.dob.data());
              qi = w.qb.data(), doi = w.dob.data();
              ldq = lddo = hd.d2;
            }
            // S, dP, then P and dS, a chunk of rows at a time, so that S and dP are read back
            // from the cache close to the core.
            for (int c0 = 0; c0 < nq; c0 += w.chunk) {
              const int nc = std::min(w.chunk, nq - c0);
              gemm({.m = nc,
                    .n = nk,
                    .kp = hd.d2 / 2,
                    .a = qi + c0 * ldq,
                    .lda = ldq,
                    .b = w.kd.data(),
                    .ldb = 2 * bk,
                    .c = w.s.data(),
                    .ldc = bk,
                    .accumulate = false});
              gemm({.m = nc,
                    .n = nk,
                    .kp = hd.d2 / 2,
                    .a = doi + c0 * lddo,
                    .lda = lddo,
                    .b = w.vd.data(),
                    .ldb = 2 * bk,
                    .c = w.dp.data(),
                    .ldc = bk,
                    .accumulate = false});
              // P and dS by pairs of rows (chunks are even, so a missing second row still has
              // buffer rows).
              for (int i = c0; i < c0 + nc; i += 2) {
                BwdRow rows[2];
                for (int r = 0; r < 2; ++r) {
                  const int ii = i + r;
                  BwdRow& row = rows[r];
                  row.s = w.s.data() + int64_t(ii - c0) * bk;
                  row.dp = w.dp.data() + int64_t(ii - c0) * bk;
                  row.lo = row.hi = 0, row.lse2 = 0.0f, row.delta = 0.0f;
                  if (ii >= nq || lse[i0 + ii] == kNegInf) continue;
                  row.hi = nk;
                  if (!mask.whole()) mask.keys(ii, nk, &row.lo, &row.hi);
                  row.lse2 = lse[i0 + ii] * kLog2e;
                  row.delta = delta[i0 + ii];
                }
                bwd_row_pair(rows[0], rows[1], nk2, p.scale, scale2, w.pt.data() + int64_t(i) * bk,
                             w.dst.data() + int64_t(i) * bk, w.dsr.data() + int64_t(i) * bk,
                             w.dsr.data() + int64_t(i + 1) * bk);
              }
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
          });
    }
    const int64_t dk_at = b * p.dk_stride.batch + hk * p.dk_stride.head + j0 * p.dk_stride.seq;
    const int64_t dv_at = b * p.dv_stride.batch + hk * p.dv_stride.head + j0 * p.dv_stride.seq;
    store_rows(p.dk, p.dk_stride, dk_at, nk, D, w.dkt.data(), 1, bk, p.accumulate);
    store_rows(p.dv, p.dv_stride, dv_at, nk, D, w.dvt.data(), 1, bk, p.accumulate);
  }
}

}  // namespace

int64_t attn_bwd_bf16_workspace_bytes(const AttnDims& dims, int threads, bool dq_is_bf16) {
  if (bf16_path() == Bf16Path::portable)  // with bf16 dK, dV
    return widen_plan(dims, 4, 2 + int(dq_is_bf16)).slice_bytes +
           WALLFACER_ISA::attn_bwd_workspace_bytes(dims, threads);
  int64_t most = 0;  // the larger of the two tilings
  for (bool narrow : {false, true}) {
    const AttnTiling t = bwd_tiling(dims, narrow);
    const int parts = detail::bwd_key_parts(dims, threads, t.block_k);
    const int64_t dq_floats =
        (dq_is_bf16 ? int64_t(dims.batch) * dims.seq_q * dims.heads * dims.head_dim : 0) +
        detail::bwd_extra_dq_floats(dims, parts);
    most = std::max(most, 2 * BwdPacked::elements(dims) +
                              threads * BwdTile::bytes(t.block_q, t.block_k, kBwdChunkQ,
                                                       HeadDims(dims.head_dim)) +
                              4 * dq_floats);
  }
  return most;
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
  check_output("dq", p.dq, p.dq_stride, p.accumulate, d.seq_q, d.heads, d.head_dim);
  check_output("dk", p.dk, p.dk_stride, p.accumulate, d.seq_k, d.kv_heads, d.head_dim);
  check_output("dv", p.dv, p.dv_stride, p.accumulate, d.seq_k, d.kv_heads, d.head_dim);
  detail::check_window("attn_bwd_bf16", p.causal, p.window);
  if (p.doc_of_pos)
    detail::check_doc_of_pos("attn_bwd_bf16", p.doc_of_pos, p.q_pos0, d.seq_q, p.k_pos0, d.seq_k);
  const Bf16Path path = bf16_path();
  const int D = d.head_dim;
  if (d.seq_q == 0 || d.seq_k == 0) {
    if (!p.accumulate) {
      zero_output(p.dq, p.dq_stride, d.batch, d.seq_q, d.heads, D);
      zero_output(p.dk, p.dk_stride, d.batch, d.seq_k, d.kv_heads, D);
      zero_output(p.dv, p.dv_stride, d.batch, d.seq_k, d.kv_heads, D);
    }
    return;
  }
  if (path == Bf16Path::portable) return portable_bwd(p);
  const GemmFn gemm = gemm_of(path);
  const AttnTiling tile = bwd_tiling(d, p.causal || p.doc_of_pos != nullptr);
  const HeadDims hd(D);
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
  Strides3 dq_main_stride = p.dq_stride;
  if (p.dq.bf16_data) {
    dq_fp32.assign(size_t(d.batch) * d.seq_q * d.heads * D, 0.0f);
    dq_main = dq_fp32.data();
    dq_main_stride = Strides3::contiguous(d.seq_q, d.heads, D);
  }
  std::vector<BwdTile> tiles;
  for (int t = 0; t < nthreads; ++t) tiles.emplace_back(tile.block_q, tile.block_k, kBwdChunkQ, hd);
  detail::run_bwd_tasks(
      d, p.causal, p.window, p.q_pos0, p.k_pos0, tile.block_k, nthreads, dq_main, dq_main_stride,
      !p.accumulate && p.dq.fp32_data != nullptr,
      [&](const BwdTask& task, int thread) { bwd_kv_range(p, pk, task, tiles[thread], gemm); });
  if (!p.dq.bf16_data) return;
#pragma omp parallel for num_threads(nthreads) schedule(static)
  for (int64_t r = 0; r < int64_t(d.batch) * d.heads * d.seq_q; ++r) {
    const int64_t b = r / (int64_t(d.heads) * d.seq_q), h = r / d.seq_q % d.heads, i = r % d.seq_q;
    fp32_to_bf16(
        dq_fp32.data() + b * dq_main_stride.batch + i * dq_main_stride.seq +
            h * dq_main_stride.head,
        p.dq.bf16_data + b * p.dq_stride.batch + i * p.dq_stride.seq + h * p.dq_stride.head, D);
  }
}

}  // namespace wallfacer::kernels::WALLFACER_ISA
WALLFACER_ISA_END
