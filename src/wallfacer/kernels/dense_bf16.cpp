#include "wallfacer/kernels/dense_bf16.h"

#include <omp.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <oneapi/dnnl/dnnl.hpp>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "wallfacer/core/error.h"
#include "wallfacer/core/threads.h"
#include "wallfacer/kernels/attention_bf16.h"
#include "wallfacer/kernels/ops.h"
#include "wallfacer/kernels/scratch.h"
#include "wallfacer/kernels/sgemm.h"

namespace wallfacer::kernels {
namespace {

void check_shape(const char* what, int64_t N, int C, int OC) {
  WF_CHECK(N >= 0 && N < (int64_t(1) << 31) && C >= 0 && OC >= 0,
           "{}: shape N = {}, C = {}, OC = {} must be non-negative with N < 2^31", what, N, C, OC);
}

// ---- avx512 path: oneDNN matmul primitives, one per shape ----

using dnnl::memory;
using Dt = memory::data_type;

enum class Product { fwd, fwd_bias, dinp, dinp_accumulate, dweight };

struct Primitive {
  dnnl::matmul matmul;
  memory::desc src, weights, bias, dst;
};

dnnl::engine& engine() {
  static dnnl::engine e(dnnl::engine::kind::cpu, 0);
  return e;
}

memory::desc desc(int64_t rows, int64_t cols, Dt type, int64_t row_stride, int64_t col_stride) {
  return memory::desc({rows, cols}, type, {row_stride, col_stride});
}

// C (M, K) x (K, Nc) products of the three kinds, every matrix a strided view of the caller's
// row-major arrays:
//   fwd      inp (N, C) x weight^T (C, OC) -> out (N, OC) bf16 [+ bias]
//   dinp     dout (N, OC) x weight (OC, C) -> dinp (N, C) bf16 [+ dinp]
//   dweight  dout^T (OC, N) x inp (N, C) -> dweight (OC, C) fp32 + dweight
Primitive make(Product kind, int64_t N, int C, int OC) {
  Primitive p;
  dnnl::primitive_attr attr;
  dnnl::post_ops sum;
  sum.append_sum(1.0f);
  switch (kind) {
    case Product::fwd:
    case Product::fwd_bias:
      p.src = desc(N, C, Dt::bf16, C, 1);
      p.weights = desc(C, OC, Dt::bf16, 1, C);
      p.dst = desc(N, OC, Dt::bf16, OC, 1);
      if (kind == Product::fwd_bias) p.bias = desc(1, OC, Dt::f32, OC, 1);
      break;
    case Product::dinp:
    case Product::dinp_accumulate:
      p.src = desc(N, OC, Dt::bf16, OC, 1);
      p.weights = desc(OC, C, Dt::bf16, C, 1);
      p.dst = desc(N, C, Dt::bf16, C, 1);
      if (kind == Product::dinp_accumulate) attr.set_post_ops(sum);
      break;
    case Product::dweight:
      p.src = desc(OC, N, Dt::bf16, 1, OC);
      p.weights = desc(N, C, Dt::bf16, C, 1);
      p.dst = desc(OC, C, Dt::f32, C, 1);
      attr.set_post_ops(sum);
      break;
  }
  const dnnl::matmul::desc d = kind == Product::fwd_bias
                                   ? dnnl::matmul::desc(p.src, p.weights, p.bias, p.dst)
                                   : dnnl::matmul::desc(p.src, p.weights, p.dst);
  p.matmul = dnnl::matmul(dnnl::matmul::primitive_desc(d, attr, engine()));
  return p;
}

// Creating a primitive costs about a millisecond; a training step reuses a handful of shapes.
const Primitive& primitive(Product kind, int64_t N, int C, int OC) {
  static std::mutex mutex;
  static std::map<std::tuple<Product, int64_t, int, int>, Primitive> cache;
  const std::lock_guard<std::mutex> lock(mutex);
  const auto key = std::make_tuple(kind, N, C, OC);
  auto it = cache.find(key);
  if (it == cache.end()) it = cache.emplace(key, make(kind, N, C, OC)).first;
  return it->second;
}

void run(const Primitive& p, const void* src, const void* weights, const float* bias, void* dst) {
  dnnl::stream stream(engine());
  std::unordered_map<int, memory> args{
      {DNNL_ARG_SRC, memory(p.src, engine(), const_cast<void*>(src))},
      {DNNL_ARG_WEIGHTS, memory(p.weights, engine(), const_cast<void*>(weights))},
      {DNNL_ARG_DST, memory(p.dst, engine(), dst)}};
  if (bias) args.emplace(DNNL_ARG_BIAS, memory(p.bias, engine(), const_cast<float*>(bias)));
  p.matmul.execute(stream, args);
  stream.wait();
}

void run_checked(const char* what, const Primitive& p, const void* src, const void* weights,
                 const float* bias, void* dst) {
  try {
    run(p, src, weights, bias, dst);
  } catch (const dnnl::error& e) {
    WF_CHECK(false, "{}: oneDNN matmul failed: {} (status {})", what, e.what(), int(e.status));
  }
}

const Primitive& primitive_checked(const char* what, Product kind, int64_t N, int C, int OC) {
  const Primitive* p = nullptr;
  try {
    p = &primitive(kind, N, C, OC);
  } catch (const dnnl::error& e) {
    WF_CHECK(false, "{}: oneDNN could not create a bf16 matmul for N = {}, C = {}, OC = {}: {}",
             what, N, C, OC, e.what());
  }
  return *p;
}

// dbias (OC) += column sums of dout (N, OC), fp32, each thread a range of columns.
void column_sums(float* dbias, const bf16* dout, int64_t N, int OC) {
  constexpr int kCols = 256;
#pragma omp parallel for schedule(static)
  for (int o0 = 0; o0 < OC; o0 += kCols) {
    const int n_cols = std::min(kCols, OC - o0);
    float sum[kCols] = {};
    for (int64_t n = 0; n < N; ++n) {
      const uint16_t* row = reinterpret_cast<const uint16_t*>(dout + n * OC + o0);
      for (int o = 0; o < n_cols; ++o) sum[o] += bits_to_float(row[o]);
    }
    for (int o = 0; o < n_cols; ++o) dbias[o0 + o] += sum[o];
  }
}

// ---- portable path: OpenMP threads, each widening its own tiles and calling sgemm ----
//
// Like the attention kernels, the portable path runs its own OpenMP threads, each computing its
// products on its own (sgemm inside a parallel region): each thread widens the bf16 tiles it
// multiplies, calls sgemm on them and rounds its own outputs, so the conversions run on every
// core, next to the products that use them. The weight (or dout's columns, for
// dweight) is widened once per block, shared by the threads:
//   forward, dinp: the weight in blocks of OC rows of at most kWideBytes of fp32 (one block unless
//                  the layer is very large), then tiles of token rows;
//   dweight:       inp in blocks of token rows of at most kWideBytes of fp32, then tiles of OC.

constexpr int64_t kWideBytes = int64_t(64) << 20;
// Within a tile, the OC columns (forward: of out; dinp: summed over) and the token rows (dweight:
// summed over) go by in chunks of this many, so that a chunk's fp32 operand or result (at most
// 256 x 1024 floats) stays in the core's cache between its widening, its product and its
// rounding.
constexpr int64_t kChunk = 1024;

// Rows of the weight (OC, C) widened at a time by the forward and dinp: at most kWideBytes of fp32.
int weight_block_rows(int C, int OC) {
  return int(std::clamp<int64_t>(kWideBytes / (4 * int64_t(C)), 16, OC));
}

// Rows per tile when `n` rows are shared by `threads` threads: at most 256, at least 16, about
// two tiles per thread.
int64_t tile_rows(int64_t n, int threads) {
  return std::clamp<int64_t>((n + 2 * threads - 1) / (2 * threads), 16, 256);
}

// Rows [r0, r0 + rows) of a (*, cols) bf16 matrix, columns [c0, c0 + nc), widened into a
// contiguous (rows, nc) fp32 one.
void widen_rows(const bf16* x, int64_t cols, int64_t r0, int64_t rows, int64_t c0, int64_t nc,
                float* out) {
  for (int64_t r = 0; r < rows; ++r) widen_bf16(x + (r0 + r) * cols + c0, out + r * nc, nc);
}

// Widens rows [r0, r0 + rows) of a (*, cols) bf16 matrix into `out` with the threads of the
// enclosing parallel region (a barrier at the end).
void widen_shared(const bf16* x, int64_t cols, int64_t r0, int64_t rows, float* out) {
#pragma omp for schedule(static)
  for (int64_t r = 0; r < rows; ++r) widen_bf16(x + (r0 + r) * cols, out + r * cols, cols);
}

void portable_fwd(bf16* out, const bf16* inp, const bf16* weight, const float* bias, int64_t N,
                  int C, int OC) {
  const int threads = num_threads();
  const int ob_max = weight_block_rows(C, OC);
  const int64_t tile = tile_rows(N, threads);
  detail::Scratch shared(4 * int64_t(ob_max) * C, 0);
  float* w = shared.take(size_t(ob_max) * C);
#pragma omp parallel num_threads(threads)
  {
    const int64_t chunk = std::min<int64_t>(kChunk, ob_max);
    detail::Scratch own(4 * tile * (C + chunk), 1);
    float *x = own.take(size_t(tile * C)), *y = own.take(size_t(tile * chunk));
    for (int o0 = 0; o0 < OC; o0 += ob_max) {
      const int ob = std::min(ob_max, OC - o0);
      widen_shared(weight, C, o0, ob, w);
#pragma omp for schedule(dynamic, 1)
      for (int64_t n0 = 0; n0 < N; n0 += tile) {
        const int64_t rows = std::min(tile, N - n0);
        widen_bf16(inp + n0 * C, x, rows * C);
        for (int c0 = 0; c0 < ob; c0 += int(kChunk)) {
          const int nc = int(std::min<int64_t>(kChunk, ob - c0));
          sgemm(false, true, int(rows), nc, C, 1.0f, x, C, w + int64_t(c0) * C, C, 0.0f, y, nc);
          for (int64_t r = 0; r < rows; ++r) {
            float* __restrict row = y + r * nc;
            if (bias)
              for (int o = 0; o < nc; ++o) row[o] += bias[o0 + c0 + o];
            round_bf16(row, out + (n0 + r) * OC + o0 + c0, nc);
          }
        }
      }  // the barrier before the next block's weight
    }
  }
}

// dinp = bf16(dout weight [+ dinp]): tiles of token rows, each summing over the weight's blocks in
// fp32 (in dx, the size of dinp in fp32, when there are several blocks).
void portable_dinp(bf16* dinp, const bf16* dout, const bf16* weight, int64_t N, int C, int OC,
                   bool accumulate) {
  const int threads = num_threads();
  const int ob_max = weight_block_rows(C, OC);
  const bool one_block = ob_max == OC;
  const int64_t tile = tile_rows(N, threads);
  const size_t dx_floats = one_block ? 0 : size_t(N * C);
  detail::Scratch shared(4 * (int64_t(ob_max) * C + int64_t(dx_floats)), 0);
  float *w = shared.take(size_t(ob_max) * C), *dx = shared.take(dx_floats);
#pragma omp parallel num_threads(threads)
  {
    const int64_t chunk = std::min<int64_t>(kChunk, ob_max);
    detail::Scratch own(4 * tile * (chunk + C), 1);
    float *dy = own.take(size_t(tile * chunk)), *tile_acc = own.take(size_t(tile * C));
    for (int o0 = 0; o0 < OC; o0 += ob_max) {
      const int ob = std::min(ob_max, OC - o0);
      const bool first = o0 == 0, last = o0 + ob == OC;
      widen_shared(weight, C, o0, ob, w);
#pragma omp for schedule(static)
      for (int64_t n0 = 0; n0 < N; n0 += tile) {
        const int64_t rows = std::min(tile, N - n0);
        float* acc = one_block ? tile_acc : dx + n0 * C;
        if (first) {
          if (accumulate)
            widen_bf16(dinp + n0 * C, acc, rows * C);
          else
            std::fill_n(acc, rows * C, 0.0f);
        }
        for (int c0 = 0; c0 < ob; c0 += int(kChunk)) {
          const int nc = int(std::min<int64_t>(kChunk, ob - c0));
          widen_rows(dout, OC, n0, rows, o0 + c0, nc, dy);
          sgemm(false, false, int(rows), C, nc, 1.0f, dy, nc, w + int64_t(c0) * C, C, 1.0f, acc, C);
        }
        if (last) round_bf16(acc, dinp + n0 * C, rows * C);
      }
    }
  }
}

// dweight += dout^T inp: tiles of OC rows of dweight (each thread its own), each summing over the
// blocks of token rows.
void portable_dweight(float* dweight, const bf16* dout, const bf16* inp, int64_t N, int C, int OC) {
  const int threads = num_threads();
  const int64_t nb_max = std::clamp<int64_t>(kWideBytes / (4 * int64_t(C)), 16, N);
  const int64_t tile = tile_rows(OC, threads);
  detail::Scratch shared(4 * nb_max * C, 0);
  float* x = shared.take(size_t(nb_max * C));
#pragma omp parallel num_threads(threads)
  {
    const int64_t chunk = std::min<int64_t>(kChunk, nb_max);
    detail::Scratch own(4 * chunk * tile, 1);
    float* dy = own.take(size_t(chunk * tile));
    for (int64_t n0 = 0; n0 < N; n0 += nb_max) {
      const int64_t rows = std::min(nb_max, N - n0);
      widen_shared(inp, C, n0, rows, x);
#pragma omp for schedule(static)
      for (int64_t o0 = 0; o0 < OC; o0 += tile) {
        const int64_t ob = std::min<int64_t>(tile, OC - o0);
        for (int64_t r0 = 0; r0 < rows; r0 += kChunk) {
          const int64_t nr = std::min(kChunk, rows - r0);
          widen_rows(dout, OC, n0 + r0, nr, o0, ob, dy);
          sgemm(true, false, int(ob), C, int(nr), 1.0f, dy, int(ob), x + r0 * C, C, 1.0f,
                dweight + o0 * C, C);
        }
      }
    }
  }
}

}  // namespace

const char* dense_bf16_backend() {
  static const std::string name = [] {
    const dnnl_version_t* v = dnnl_version();
    return fmt::format("oneDNN {}.{}.{}", v->major, v->minor, v->patch);
  }();
  return name.c_str();
}

void matmul_fwd_bf16(bf16* out, const bf16* inp, const bf16* weight, const float* bias, int64_t N,
                     int C, int OC) {
  check_shape("matmul_fwd_bf16", N, C, OC);
  if (N == 0 || OC == 0) return;
  WF_CHECK(out && (C == 0 || (inp && weight)), "matmul_fwd_bf16: null out, inp or weight");
  if (C == 0) {  // no products: the bias, or zero
    for (int64_t n = 0; n < N; ++n)
      for (int o = 0; o < OC; ++o) out[n * OC + o] = bias ? to_bf16(bias[o]) : bf16{};
    return;
  }
  if (bf16_path() != Bf16Path::portable) {  // avx512 or amx: oneDNN
    const Primitive& p =
        primitive_checked("matmul_fwd_bf16", bias ? Product::fwd_bias : Product::fwd, N, C, OC);
    run_checked("matmul_fwd_bf16", p, inp, weight, bias, out);
    return;
  }
  portable_fwd(out, inp, weight, bias, N, C, OC);
}

void matmul_bwd_bf16(bf16* dinp, float* dweight, float* dbias, const bf16* dout, const bf16* inp,
                     const bf16* weight, int64_t N, int C, int OC, bool accumulate_dinp) {
  check_shape("matmul_bwd_bf16", N, C, OC);
  if (N == 0) return;
  if (OC == 0) {  // no products: dinp is zero (or unchanged), nothing to add
    if (dinp && !accumulate_dinp) std::fill(dinp, dinp + N * C, bf16{});
    return;
  }
  WF_CHECK(dout, "matmul_bwd_bf16: null dout");
  WF_CHECK(!dinp || C == 0 || weight, "matmul_bwd_bf16: dinp set but weight null");
  WF_CHECK(!dweight || C == 0 || inp, "matmul_bwd_bf16: dweight set but inp null");
  if (C == 0) {
    if (dbias) column_sums(dbias, dout, N, OC);
    return;
  }
  if (bf16_path() != Bf16Path::portable) {  // avx512 or amx: oneDNN
    if (dinp) {
      const Primitive& p = primitive_checked(
          "matmul_bwd_bf16", accumulate_dinp ? Product::dinp_accumulate : Product::dinp, N, C, OC);
      run_checked("matmul_bwd_bf16", p, dout, weight, nullptr, dinp);
    }
    if (dweight) {
      const Primitive& p = primitive_checked("matmul_bwd_bf16", Product::dweight, N, C, OC);
      run_checked("matmul_bwd_bf16", p, dout, inp, nullptr, dweight);
    }
    if (dbias) column_sums(dbias, dout, N, OC);
    return;
  }
  if (dinp) portable_dinp(dinp, dout, weight, N, C, OC, accumulate_dinp);
  if (dweight) portable_dweight(dweight, dout, inp, N, C, OC);
  if (dbias) column_sums(dbias, dout, N, OC);
}

}  // namespace wallfacer::kernels
