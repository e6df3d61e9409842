// Which code path computes the bf16 kernels' tile products (kernels/attention_bf16.h): one copy for
// the whole program, compiled at plain x86-64 like the rest of the library; the kernels themselves
// are compiled per instruction-set level (kernels/isa.h).

#include <cstdlib>
#include <string_view>

#if defined(__x86_64__)
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

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

namespace {

#if defined(__x86_64__)
// Whether the CPU reports amx_tile and amx_bf16 (CPUID leaf 7: EDX bits 24 and 22) and the OS
// saves the tile state (XCR0 bits 17 and 18, XTILECFG and XTILEDATA).
bool cpu_reports_amx() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (__get_cpuid_count(7, 0, &a, &b, &c, &d) == 0) return false;
  if ((d & (1u << 24)) == 0 || (d & (1u << 22)) == 0) return false;
  if (__get_cpuid(1, &a, &b, &c, &d) == 0 || (c & (1u << 27)) == 0) return false;  // OSXSAVE
  unsigned lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (lo & (3u << 17)) == (3u << 17);
}

// Linux hands out the tile registers' state only to a process that asked for it
// (arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)); the permission covers all its threads.
bool kernel_grants_amx() {
  constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
  return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
}
#endif

// Why the amx path cannot run here (null when it can); asked once per process.
const char* amx_missing() {
#if defined(__x86_64__)
  static const char* const why = []() -> const char* {
    if (!detail::bf16_gemm_amx_built()) return "this build has no AMX code";
    if (!cpu_reports_amx()) return "this CPU does not report amx_bf16 and amx_tile";
    if (!bf16_avx512_available()) return "this CPU does not report avx512_bf16";
    if (!kernel_grants_amx()) return "the kernel refused the AMX tile state (arch_prctl)";
    return nullptr;
  }();
  return why;
#else
  return "this build has no AMX code";
#endif
}

}  // namespace

bool bf16_amx_available() { return amx_missing() == nullptr; }

const char* bf16_path_name(Bf16Path path) {
  switch (path) {
    case Bf16Path::amx:
      return "amx";
    case Bf16Path::avx512:
      return "avx512";
    default:
      return "portable";
  }
}

Bf16Path bf16_path() {
  const char* env = std::getenv("WALLFACER_BF16_PATH");
  const std::string_view want = env ? env : "";
  if (want.empty() || want == "auto") {
    if (bf16_amx_available()) return Bf16Path::amx;
    return bf16_avx512_available() ? Bf16Path::avx512 : Bf16Path::portable;
  }
  if (want == "portable") return Bf16Path::portable;
  if (want == "amx") {
    WF_USAGE_CHECK(bf16_amx_available(),
                   "WALLFACER_BF16_PATH=amx, but {}; unset it or set it to avx512 or portable",
                   amx_missing());
    return Bf16Path::amx;
  }
  WF_USAGE_CHECK(want == "avx512",
                 "WALLFACER_BF16_PATH must be auto, portable, avx512 or amx, got '{}'", want);
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
