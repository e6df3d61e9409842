#include "wallfacer/model/parts.h"

#include <algorithm>

namespace wallfacer::model {

namespace {
constexpr int64_t kConvertBlock = int64_t(1) << 14;
}

void round_to_bf16(const float* in, bf16* out, int64_t n) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; i += kConvertBlock)
    fp32_to_bf16(in + i, out + i, std::min(kConvertBlock, n - i));
}

void widen_to_fp32(const bf16* in, float* out, int64_t n) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; i += kConvertBlock)
    bf16_to_fp32(in + i, out + i, std::min(kConvertBlock, n - i));
}

}  // namespace wallfacer::model
