#include "wallfacer/kernels/ops.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "wallfacer/core/bf16.h"
#include "wallfacer/core/error.h"
#include "wallfacer/kernels/isa.h"
#include "wallfacer/kernels/sgemm.h"
#include "wallfacer/kernels/vec_math.h"

// Compiled once per instruction-set level (kernels/isa.h).
WALLFACER_ISA_BEGIN
namespace wallfacer::kernels::WALLFACER_ISA {

namespace {

// One row (a decode step): out = weight inp [+ bias], a matrix-vector product that reads each
// weight once, blocks of kMatvecRows output rows shared among the threads (oneDNN's sgemm ran it
// on one thread while the other waited). Each output is one dot product in a fixed order: the same
// bits for any thread count.
constexpr int kMatvecRows = 8;
void matvec(float* out, const float* inp, const float* weight, const float* bias, int C, int OC) {
  const int blocks = (OC + kMatvecRows - 1) / kMatvecRows;
#pragma omp parallel for schedule(static)
  for (int blk = 0; blk < blocks; ++blk) {
    const int o0 = blk * kMatvecRows, rows = std::min(kMatvecRows, OC - o0);
    for (int r = 0; r < rows; ++r) {
      const float* __restrict w = weight + int64_t(o0 + r) * C;
      float s = 0.0f;
#pragma omp simd reduction(+ : s)
      for (int c = 0; c < C; ++c) s += w[c] * inp[c];
      out[o0 + r] = bias ? s + bias[o0 + r] : s;
    }
  }
}

}  // namespace

void matmul_fwd(float* out, const float* inp, const float* weight, const float* bias, int64_t N,
                int C, int OC) {
  WF_CHECK(N >= 0 && N < (int64_t(1) << 31), "matmul_fwd: {} rows do not fit a BLAS int", N);
  if (N == 0) return;
  float beta = 0.0f;
  if (N == 1) return matvec(out, inp, weight, bias, C, OC);
  if (bias) {
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < N; ++n) {
      for (int o = 0; o < OC; ++o) out[n * OC + o] = bias[o];
    }
    beta = 1.0f;
  }
  sgemm(false, true, int(N), OC, C, 1.0f, inp, C, weight, C, beta, out, OC);
}

void matmul_bwd(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                const float* weight, int64_t N, int C, int OC, bool accumulate_dinp) {
  WF_CHECK(N >= 0 && N < (int64_t(1) << 31), "matmul_bwd: {} rows do not fit a BLAS int", N);
  if (N == 0) return;
  if (dinp) {
    sgemm(false, false, int(N), C, OC, 1.0f, dout, OC, weight, C, accumulate_dinp ? 1.0f : 0.0f,
          dinp, C);
  }
  if (dweight) {
    sgemm(true, false, OC, C, int(N), 1.0f, dout, OC, inp, C, 1.0f, dweight, C);
  }
  if (dbias) {
#pragma omp parallel for schedule(static)
    for (int o = 0; o < OC; ++o) {
      double s = 0;
      for (int64_t n = 0; n < N; ++n) s += dout[n * OC + o];
      dbias[o] += float(s);
    }
  }
}

void layernorm_fwd(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                   const float* bias, int64_t N, int C) {
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const float* x = inp + n * C;
    float s = 0.0f;
    for (int c = 0; c < C; ++c) s += x[c];
    const float m = s / float(C);
    float v = 0.0f;
    for (int c = 0; c < C; ++c) {
      const float d = x[c] - m;
      v += d * d;
    }
    const float r = 1.0f / std::sqrt(v / float(C) + kLayerNormEps);
    float* y = out + n * C;
    for (int c = 0; c < C; ++c) y[c] = (x[c] - m) * r * weight[c] + bias[c];
    mean[n] = m;
    rstd[n] = r;
  }
}

void layernorm_bwd(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                   const float* weight, const float* mean, const float* rstd, int64_t N, int C) {
  const int nt = omp_get_max_threads();
  // Per-thread partial sums of the parameter gradients, reduced in a fixed order (deterministic).
  std::vector<float> part(size_t(nt) * 2 * C, 0.0f);
#pragma omp parallel num_threads(nt)
  {
    float* pw = part.data() + size_t(omp_get_thread_num()) * 2 * C;
    float* pb = pw + C;
#pragma omp for schedule(static)
    for (int64_t n = 0; n < N; ++n) {
      const float* x = inp + n * C;
      const float* dy = dout + n * C;
      const float m = mean[n], r = rstd[n];
      float sum_dn = 0.0f, sum_dn_xhat = 0.0f;
      for (int c = 0; c < C; ++c) {
        const float xhat = (x[c] - m) * r;
        const float dn = dy[c] * weight[c];
        sum_dn += dn;
        sum_dn_xhat += dn * xhat;
        pw[c] += dy[c] * xhat;
        pb[c] += dy[c];
      }
      sum_dn /= float(C);
      sum_dn_xhat /= float(C);
      float* dx = dinp + n * C;
      for (int c = 0; c < C; ++c) {
        const float xhat = (x[c] - m) * r;
        dx[c] += r * (dy[c] * weight[c] - sum_dn - xhat * sum_dn_xhat);
      }
    }
  }
  for (int t = 0; t < nt; ++t) {
    const float* pw = part.data() + size_t(t) * 2 * C;
    for (int c = 0; c < C; ++c) {
      dweight[c] += pw[c];
      dbias[c] += pw[C + c];
    }
  }
}

namespace {
constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2 / pi)

inline float gelu(float x) {
  return 0.5f * x * (1.0f + detail::tanh_approx(kGeluScale * (x + 0.044715f * x * x * x)));
}

// d gelu(x) / dx
inline float gelu_grad(float x) {
  const float u = kGeluScale * (x + 0.044715f * x * x * x);
  const float t = detail::tanh_approx(u);
  const float du = kGeluScale * (1.0f + 3.0f * 0.044715f * x * x);
  return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * du;
}
}  // namespace

void gelu_fwd(float* out, const float* inp, int64_t n) {
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) out[i] = gelu(inp[i]);
}

void gelu_bwd(float* dinp, const float* inp, const float* dout, int64_t n) {
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) dinp[i] = dout[i] * gelu_grad(inp[i]);
}

// The bf16 twins (declared in kernels/dense_bf16.h): bf16 in and out, the same fp32 arithmetic.
void gelu_fwd_bf16(bf16* out, const bf16* inp, int64_t n) {
  auto* o = reinterpret_cast<uint16_t*>(out);
  const auto* x = reinterpret_cast<const uint16_t*>(inp);
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) o[i] = to_bf16_bits(gelu(bits_to_float(x[i])));
}

void gelu_bwd_bf16(bf16* dinp, const bf16* inp, const bf16* dout, int64_t n) {
  auto* d = reinterpret_cast<uint16_t*>(dinp);
  const auto* x = reinterpret_cast<const uint16_t*>(inp);
  const auto* g = reinterpret_cast<const uint16_t*>(dout);
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i)
    d[i] = to_bf16_bits(bits_to_float(g[i]) * gelu_grad(bits_to_float(x[i])));
}

// The Llama family's RMSNorm and SwiGLU (declared in kernels/llama_ops.h).
void rmsnorm_fwd(float* out, float* rstd, const float* inp, const float* weight, int64_t N, int C,
                 float eps) {
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const float* x = inp + n * C;
    float s = 0.0f;
    for (int c = 0; c < C; ++c) s += x[c] * x[c];
    const float r = 1.0f / std::sqrt(s / float(C) + eps);
    float* y = out + n * C;
    for (int c = 0; c < C; ++c) y[c] = x[c] * r * weight[c];
    rstd[n] = r;
  }
}

void rmsnorm_bwd(float* dinp, float* dweight, const float* dout, const float* inp,
                 const float* weight, const float* rstd, int64_t N, int C) {
  const int nt = omp_get_max_threads();
  // Per-thread partial sums of the weight gradient, reduced in a fixed order (deterministic).
  std::vector<float> part(size_t(nt) * C, 0.0f);
#pragma omp parallel num_threads(nt)
  {
    float* pw = part.data() + size_t(omp_get_thread_num()) * C;
#pragma omp for schedule(static)
    for (int64_t n = 0; n < N; ++n) {
      const float* x = inp + n * C;
      const float* dy = dout + n * C;
      const float r = rstd[n];
      float gx = 0.0f;
      for (int c = 0; c < C; ++c) {
        gx += dy[c] * weight[c] * x[c];
        pw[c] += dy[c] * x[c] * r;
      }
      const float k = r * r * r * gx / float(C);
      float* dx = dinp + n * C;
      for (int c = 0; c < C; ++c) dx[c] += r * dy[c] * weight[c] - x[c] * k;
    }
  }
  for (int t = 0; t < nt; ++t) {
    const float* pw = part.data() + size_t(t) * C;
    for (int c = 0; c < C; ++c) dweight[c] += pw[c];
  }
}

namespace {
// 1 / (1 + e^-x) with exp_approx, so that the SwiGLU loops vectorise. -x is clamped at 88 (e^88 is
// still finite; below x = -88 the sigmoid is under 7e-39, 0 in effect) by a signed min on the bit
// patterns, as exp_approx clamps (negative floats are negative integers; positive ones keep their
// order): no float comparison to keep the vectoriser away.
inline float sigmoid(float x) {
  const float e =
      std::bit_cast<float>(std::min(std::bit_cast<int32_t>(-x), std::bit_cast<int32_t>(88.0f)));
  return 1.0f / (1.0f + detail::exp_approx(e));
}

// The SwiGLU of one row (T: float or uint16_t bf16 bits), fp32 arithmetic.
inline float load(float x) { return x; }
inline float load(uint16_t x) { return bits_to_float(x); }
inline void store(float& o, float v) { o = v; }
inline void store(uint16_t& o, float v) { o = to_bf16_bits(v); }

template <class T>
void swiglu_fwd_t(T* out, const T* inp, int64_t N, int I) {
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const T* g = inp + n * 2 * I;
    const T* u = g + I;
    T* y = out + n * I;
#pragma omp simd
    for (int i = 0; i < I; ++i) {
      const float a = load(g[i]);
      store(y[i], a * sigmoid(a) * load(u[i]));
    }
  }
}

template <class T>
void swiglu_bwd_t(T* dinp, const T* inp, const T* dout, int64_t N, int I) {
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const T* g = inp + n * 2 * I;
    const T* u = g + I;
    const T* dy = dout + n * I;
    T* dg = dinp + n * 2 * I;
    T* du = dg + I;
#pragma omp simd
    for (int i = 0; i < I; ++i) {
      const float a = load(g[i]), s = sigmoid(a), d = load(dy[i]);
      store(du[i], d * a * s);
      store(dg[i], d * load(u[i]) * s * (1.0f + a * (1.0f - s)));
    }
  }
}
}  // namespace

void swiglu_fwd(float* out, const float* inp, int64_t N, int I) { swiglu_fwd_t(out, inp, N, I); }

void swiglu_bwd(float* dinp, const float* inp, const float* dout, int64_t N, int I) {
  swiglu_bwd_t(dinp, inp, dout, N, I);
}

void swiglu_fwd_bf16(bf16* out, const bf16* inp, int64_t N, int I) {
  swiglu_fwd_t(reinterpret_cast<uint16_t*>(out), reinterpret_cast<const uint16_t*>(inp), N, I);
}

void swiglu_bwd_bf16(bf16* dinp, const bf16* inp, const bf16* dout, int64_t N, int I) {
  swiglu_bwd_t(reinterpret_cast<uint16_t*>(dinp), reinterpret_cast<const uint16_t*>(inp),
               reinterpret_cast<const uint16_t*>(dout), N, I);
}

void rope_tables(const int64_t* pos, int T, int D, double theta, float* cos, float* sin) {
  WF_CHECK(D % 2 == 0, "rope: head_dim {} must be even", D);
  const int half = D / 2;
  for (int t = 0; t < T; ++t) {
    for (int i = 0; i < half; ++i) {
      const double freq = std::pow(theta, -2.0 * i / D);
      const double a = double(pos[t]) * freq;
      cos[int64_t(t) * half + i] = float(std::cos(a));
      sin[int64_t(t) * half + i] = float(std::sin(a));
    }
  }
}

namespace {
// dst row = R(sign * angle) src row for every head, rows of B*T tokens with the given strides.
void rope_rotate(float* dst, int64_t dst_stride, const float* src, int64_t src_stride,
                 const float* cos, const float* sin, float sign, int B, int T, int H, int D) {
  const int half = D / 2;
#pragma omp parallel for collapse(2) schedule(static)
  for (int b = 0; b < B; ++b) {
    for (int t = 0; t < T; ++t) {
      const int64_t row = int64_t(b) * T + t;
      const float* x = src + row * src_stride;
      float* y = dst + row * dst_stride;
      const float* c = cos + int64_t(t) * half;
      const float* s = sin + int64_t(t) * half;
      for (int h = 0; h < H; ++h) {
        for (int i = 0; i < half; ++i) {
          const float x0 = x[h * D + 2 * i], x1 = x[h * D + 2 * i + 1], si = sign * s[i];
          y[h * D + 2 * i] = x0 * c[i] - x1 * si;
          y[h * D + 2 * i + 1] = x0 * si + x1 * c[i];
        }
      }
    }
  }
}
}  // namespace

void rope_fwd(float* out, const float* inp, int64_t inp_stride, const float* cos, const float* sin,
              int B, int T, int H, int D) {
  rope_rotate(out, int64_t(H) * D, inp, inp_stride, cos, sin, 1.0f, B, T, H, D);
}

void rope_bwd(float* din, int64_t din_stride, const float* dout, const float* cos, const float* sin,
              int B, int T, int H, int D) {
  rope_rotate(din, din_stride, dout, int64_t(H) * D, cos, sin, -1.0f, B, T, H, D);
}

void embedding_fwd(float* out, const int32_t* tokens, const float* wte, int64_t N, int C, int V) {
  for (int64_t n = 0; n < N; ++n) {
    WF_CHECK(tokens[n] >= 0 && tokens[n] < V, "embedding: token {} at row {} outside [0, {})",
             tokens[n], n, V);
  }
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const float* e = wte + int64_t(tokens[n]) * C;
    float* y = out + n * C;
    for (int c = 0; c < C; ++c) y[c] = e[c];
  }
}

void embedding_bwd(float* dwte, const int32_t* tokens, const float* dout, int64_t N, int C) {
  // Threads own disjoint channel ranges, so rows are added in order (deterministic, race-free).
#pragma omp parallel
  {
    const int nt = omp_get_num_threads(), t = omp_get_thread_num();
    const int c0 = int(int64_t(C) * t / nt), c1 = int(int64_t(C) * (t + 1) / nt);
    for (int64_t n = 0; n < N; ++n) {
      float* d = dwte + int64_t(tokens[n]) * C;
      const float* g = dout + n * C;
      for (int c = c0; c < c1; ++c) d[c] += g[c];
    }
  }
}

namespace {
// Lanes of the partial maxima and sums of a row: independent accumulators that the compiler keeps
// in vector registers (the loops vectorise without -ffast-math), combined in a fixed order at the
// end, so a row's result does not depend on the thread count or the instruction set.
constexpr int kLanes = 16;

// max and log-sum-exp of one row (exp_approx: vec_math.h).
inline float row_lse(const float* x, int V) {
  float mx[kLanes], s[kLanes];
  for (int j = 0; j < kLanes; ++j) mx[j] = x[0];
  int i = 0;
  for (; i + kLanes <= V; i += kLanes)
    for (int j = 0; j < kLanes; ++j) mx[j] = mx[j] > x[i + j] ? mx[j] : x[i + j];
  for (; i < V; ++i) mx[0] = std::max(mx[0], x[i]);
  float m = mx[0];
  for (int j = 1; j < kLanes; ++j) m = std::max(m, mx[j]);
  for (int j = 0; j < kLanes; ++j) s[j] = 0.0f;
  for (i = 0; i + kLanes <= V; i += kLanes)
    for (int j = 0; j < kLanes; ++j) s[j] += detail::exp_approx(x[i + j] - m);
  for (; i < V; ++i) s[0] += detail::exp_approx(x[i] - m);
  float sum = 0.0f;
  for (int j = 0; j < kLanes; ++j) sum += s[j];
  return m + std::log(sum);
}
}  // namespace

void softmax_xent_fwd(float* losses, const float* logits, const int32_t* targets, int64_t N,
                      int V) {
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const float* x = logits + n * V;
    losses[n] = row_lse(x, V) - x[targets[n]];
  }
}

void softmax_xent_bwd(float* dlogits, const float* logits, const int32_t* targets, float dloss,
                      int64_t N, int V) {
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const float* x = logits + n * V;
    float* d = dlogits + n * V;
    const float lse = row_lse(x, V);
    // Through a block of lanes: dlogits may be logits itself (the loops still vectorise).
    float p[kLanes];
    int i = 0;
    for (; i + kLanes <= V; i += kLanes) {
      for (int j = 0; j < kLanes; ++j) p[j] = detail::exp_approx(x[i + j] - lse);
      for (int j = 0; j < kLanes; ++j) d[i + j] = dloss * p[j];
    }
    for (; i < V; ++i) d[i] = dloss * detail::exp_approx(x[i] - lse);
    d[targets[n]] -= dloss;
  }
}

void adamw(float* params, const float* grads, float* m, float* v, int64_t n, const AdamWParams& p) {
  const float bc1 = 1.0f - std::pow(p.beta1, float(p.step));
  const float bc2 = 1.0f - std::pow(p.beta2, float(p.step));
  const float decay = 1.0f - p.lr * p.weight_decay;
  const float step_size = p.lr / bc1;
  const float inv_sqrt_bc2 = 1.0f / std::sqrt(bc2);
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const float g = grads[i];
    const float mi = p.beta1 * m[i] + (1.0f - p.beta1) * g;
    const float vi = p.beta2 * v[i] + (1.0f - p.beta2) * g * g;
    m[i] = mi;
    v[i] = vi;
    params[i] = params[i] * decay - step_size * mi / (std::sqrt(vi) * inv_sqrt_bc2 + p.eps);
  }
}

double sum_squares(const float* x, int64_t n) {
  double s = 0.0;
  // Fixed-size chunks summed in order: the result does not depend on the thread count.
  constexpr int64_t kChunk = 1 << 14;
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  std::vector<double> part(size_t(chunks), 0.0);
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < chunks; ++c) {
    double a = 0.0;
    const int64_t end = std::min(n, (c + 1) * kChunk);
    for (int64_t i = c * kChunk; i < end; ++i) a += double(x[i]) * x[i];
    part[size_t(c)] = a;
  }
  for (double a : part) s += a;
  return s;
}

void scale(float* x, int64_t n, float s) {
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) x[i] *= s;
}

void widen_bf16(const bf16* in, float* out, int64_t n) {
  const uint16_t* __restrict b = reinterpret_cast<const uint16_t*>(in);
  float* __restrict o = out;
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) o[i] = bits_to_float(b[i]);
}

void round_bf16(const float* in, bf16* out, int64_t n) {
  const float* __restrict x = in;
  uint16_t* __restrict o = reinterpret_cast<uint16_t*>(out);
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) o[i] = to_bf16_bits(x[i]);
}

}  // namespace wallfacer::kernels::WALLFACER_ISA
WALLFACER_ISA_END
