#include "wallfacer/kernels/llama_ops.h"

#include <cmath>
#include <numbers>

#include "wallfacer/core/error.h"

namespace wallfacer::kernels {

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
