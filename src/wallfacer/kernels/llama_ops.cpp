#include "wallfacer/kernels/llama_ops.h"

#include <omp.h>

#include <cmath>
#include <numbers>

#include "wallfacer/core/error.h"

namespace wallfacer::kernels {

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
inline float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }

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

RopeScalingType parse_rope_scaling_type(std::string_view name) {
  if (name == "none") return RopeScalingType::None;
  if (name == "linear") return RopeScalingType::Linear;
  if (name == "llama3") return RopeScalingType::Llama3;
  throw UsageError(fmt::format(
      "model.rope_scaling.type '{}' is not supported: use 'llama3', 'linear' or 'none'", name));
}

std::string_view rope_scaling_type_name(RopeScalingType t) {
  switch (t) {
    case RopeScalingType::Linear:
      return "linear";
    case RopeScalingType::Llama3:
      return "llama3";
    case RopeScalingType::None:
      break;
  }
  return "none";
}

std::vector<double> rope_inv_freq(int D, double theta, const RopeScaling& s) {
  WF_CHECK(D % 2 == 0, "rope: head_dim {} must be even", D);
  std::vector<double> f(size_t(D / 2));
  for (int i = 0; i < D / 2; ++i) f[size_t(i)] = std::pow(theta, -2.0 * i / D);
  if (s.type == RopeScalingType::Linear) {
    for (double& x : f) x /= s.factor;
  } else if (s.type == RopeScalingType::Llama3) {
    const double old = double(s.original_max_position_embeddings);
    const double low_wavelen = old / s.low_freq_factor, high_wavelen = old / s.high_freq_factor;
    for (double& x : f) {
      const double wavelen = 2 * std::numbers::pi / x;
      if (wavelen > low_wavelen) {
        x /= s.factor;
      } else if (!(wavelen < high_wavelen)) {
        const double smooth =
            (old / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
        x = (1 - smooth) * x / s.factor + smooth * x;
      }
    }
  }
  return f;
}

void rope_tables_freq(const int64_t* pos, int T, int D, const double* inv_freq, float* cos,
                      float* sin) {
  const int half = D / 2;
  for (int t = 0; t < T; ++t) {
    for (int i = 0; i < half; ++i) {
      const double a = double(pos[t]) * inv_freq[i];
      cos[int64_t(t) * half + i] = float(std::cos(a));
      sin[int64_t(t) * half + i] = float(std::sin(a));
    }
  }
}

}  // namespace wallfacer::kernels
