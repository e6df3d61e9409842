#include "wallfacer/kernels/isa.h"

#include <cstdlib>
#include <string>

#include "wallfacer/core/error.h"

namespace wallfacer::kernels::isa {

std::string_view name(Level level) {
  switch (level) {
    case Level::Baseline:
      return "baseline";
    case Level::Avx2:
      return "avx2";
    case Level::Avx512:
      return "avx512";
  }
  return "?";
}

Level widest_supported() {
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("x86-64-v4")) return Level::Avx512;
  if (__builtin_cpu_supports("x86-64-v3")) return Level::Avx2;
#endif
  return Level::Baseline;
}

Level choose(const char* env, Level widest) {
  if (!env || !*env) return widest;
  const std::string_view want = env;
  for (Level l : {Level::Baseline, Level::Avx2, Level::Avx512}) {
    if (want != name(l)) continue;
    WF_USAGE_CHECK(
        l <= widest,
        "WALLFACER_CPU={} asks for kernels this CPU cannot run (its widest level is {}); "
        "set WALLFACER_CPU to {} or lower, or unset it",
        want, name(widest), name(widest));
    return l;
  }
  throw UsageError(fmt::format(
      "WALLFACER_CPU={} is not a level of the kernels; use baseline, avx2 or avx512, or unset it",
      want));
}

Level active() {
  static const Level level = choose(std::getenv("WALLFACER_CPU"), widest_supported());
  return level;
}

}  // namespace wallfacer::kernels::isa
