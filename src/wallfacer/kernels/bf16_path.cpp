// Which code path computes the bf16 kernels' tile products (kernels/attention_bf16.h): one copy for
// the whole program, compiled at plain x86-64 like the rest of the library; the kernels themselves
// are compiled per instruction-set level (kernels/isa.h).

#include <cstdlib>
#include <string_view>

#include "wallfacer/core/error.h"
#include "wallfacer/kernels/attention_bf16.h"
#include "wallfacer/kernels/bf16_gemm.h"

namespace wallfacer::kernels {

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

namespace detail {
int64_t& bf16_widen_budget() {
  static int64_t bytes = int64_t(256) << 20;
  return bytes;
}
}  // namespace detail

}  // namespace wallfacer::kernels
