#include "wallfacer/core/bf16.h"

namespace wallfacer {

// Integer operations and selects only, so g++ -O3 turns both loops into SIMD code.
void fp32_to_bf16(const float* __restrict in, bf16* __restrict out, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) out[i] = to_bf16(in[i]);
}

void bf16_to_fp32(const bf16* __restrict in, float* __restrict out, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) out[i] = to_float(in[i]);
}

std::vector<bf16> to_bf16(const std::vector<float>& x) {
  std::vector<bf16> y(x.size());
  fp32_to_bf16(x.data(), y.data(), int64_t(x.size()));
  return y;
}

std::vector<float> to_fp32(const std::vector<bf16>& x) {
  std::vector<float> y(x.size());
  bf16_to_fp32(x.data(), y.data(), int64_t(x.size()));
  return y;
}

}  // namespace wallfacer
