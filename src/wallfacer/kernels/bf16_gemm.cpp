#include "wallfacer/kernels/bf16_gemm.h"

#include "wallfacer/core/error.h"

namespace wallfacer::kernels::detail {

#ifndef WALLFACER_HAVE_AVX512BF16
// The compiler could not build bf16_gemm_avx512.cpp.
bool bf16_gemm_avx512_built() { return false; }
void bf16_gemm_avx512(const Bf16Gemm&) {
  WF_CHECK(false, "bf16_gemm_avx512: this build has no AVX512-BF16 code (compiler too old)");
}
#endif

#ifndef WALLFACER_HAVE_AMX
// The compiler could not build bf16_gemm_amx.cpp.
bool bf16_gemm_amx_built() { return false; }
void bf16_gemm_amx(const Bf16Gemm&) {
  WF_CHECK(false, "bf16_gemm_amx: this build has no AMX code (compiler too old)");
}
void bf16_amx_begin() {
  WF_CHECK(false, "bf16_amx_begin: this build has no AMX code (compiler too old)");
}
void bf16_amx_end() {}
int bf16_gemm_amx_blocks(const Bf16Gemm&) { return 0; }
void bf16_gemm_amx_run(const Bf16Gemm&, int, int) {
  WF_CHECK(false, "bf16_gemm_amx_run: this build has no AMX code (compiler too old)");
}
float bf16_scaled_max_amx(const float*, int, float) {
  WF_CHECK(false, "bf16_scaled_max_amx: this build has no AMX code (compiler too old)");
  return 0.0f;
}
float bf16_exp2_round_sum_amx(const float*, int, float, float, bf16*) {
  WF_CHECK(false, "bf16_exp2_round_sum_amx: this build has no AMX code (compiler too old)");
  return 0.0f;
}
void bf16_softmax_rows_amx(const Bf16SoftmaxRows&) {
  WF_CHECK(false, "bf16_softmax_rows_amx: this build has no AMX code (compiler too old)");
}
#endif

}  // namespace wallfacer::kernels::detail
