#pragma once
// Instruction sets of the hot kernels, chosen at run time. Internal to the library.
//
// The library is built for plain x86-64 (any 64-bit x86 CPU runs it) except the hot kernel
// sources, which are compiled once per level below and picked at first use:
//
//   level     code generated for         chosen when the CPU has
//   baseline  x86-64 (SSE2)              always
//   avx2      x86-64-v3 (AVX2, FMA)      __builtin_cpu_supports("x86-64-v3")
//   avx512    x86-64-v4 (AVX-512 F/BW/CD/DQ/VL)  __builtin_cpu_supports("x86-64-v4")
//
// The environment variable WALLFACER_CPU (baseline, avx2 or avx512) forces a level, e.g. to test
// or time the baseline code on a wider machine; a level the CPU lacks, or an unknown name, is a
// UsageError at the first kernel call. Unset or empty: the widest level the CPU has.
//
// How a source takes part (kernels/attention.cpp, attention_bf16.cpp and ops.cpp do):
//   1. list it in WALLFACER_ISA_SOURCES (cmake/Sources.cmake); the build compiles it once
//      per level through a generated file that defines WALLFACER_ISA (the level's name) and, for
//      the wider levels, WALLFACER_ISA_TARGET (the level's GCC target string; cmake/Isa.cmake);
//   2. put its code between WALLFACER_ISA_BEGIN and WALLFACER_ISA_END, inside namespace
//      wallfacer::kernels::WALLFACER_ISA, so that each level's functions have their own names;
//      a call to one of them whose arguments have kernel types (AttnDims, ...) names the level,
//      WALLFACER_ISA::attn_fwd_tiling(d), since argument-dependent lookup would also find the
//      public function of that name;
//   3. define the public functions once in kernels/dispatch.cpp with WALLFACER_ISA_DECLARE and
//      WALLFACER_ISA_CALL, which call the chosen level's twin.
// The level's target applies to the functions defined between BEGIN and END (and to code inlined
// into them), not to the templates and inline functions of the headers included before: their
// out-of-line copies stay plain x86-64, so the linker can never pick a wider copy of, say,
// std::vector<float>'s members for the rest of the library. tests/package/check_portable.sh checks
// that only the wider levels' own functions use wider instructions. A source needing a feature
// beyond these levels (say AVX512-BF16) adds a level here, in cmake/Isa.cmake and in the two
// macros below.

#include <string_view>

namespace wallfacer::kernels::isa {

enum class Level { Baseline, Avx2, Avx512 };

// The level the kernels run at: chosen at the first call (CPU, WALLFACER_CPU), then fixed.
// Throws UsageError when WALLFACER_CPU names an unknown level or one this CPU lacks.
Level active();

// The widest level this CPU (and its operating system) supports.
Level widest_supported();

// The level for WALLFACER_CPU = `env` (null or empty: `widest`) on a CPU whose widest level is
// `widest`; UsageError for an unknown name or a level wider than `widest`.
Level choose(const char* env, Level widest);

std::string_view name(Level level);

}  // namespace wallfacer::kernels::isa

// WALLFACER_ISA_BEGIN / WALLFACER_ISA_END: around the code of a source compiled per level.
#if defined(WALLFACER_ISA)
#if defined(WALLFACER_ISA_TARGET) && defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#define WALLFACER_ISA_PRAGMA_(text) _Pragma(#text)
#define WALLFACER_ISA_TARGET_PRAGMA_(level_target) WALLFACER_ISA_PRAGMA_(GCC target(level_target))
#define WALLFACER_ISA_BEGIN \
  _Pragma("GCC push_options") WALLFACER_ISA_TARGET_PRAGMA_(WALLFACER_ISA_TARGET)
#define WALLFACER_ISA_END _Pragma("GCC pop_options")
// Defined where the code between BEGIN and END is compiled for x86-64-v4: AVX-512 intrinsics
// (<immintrin.h>) may be used there, guarded by #ifdef WALLFACER_ISA_AVX512_INTRINSICS.
#if defined(WALLFACER_ISA_LEVEL_avx512)
#define WALLFACER_ISA_AVX512_INTRINSICS 1
#endif
#else
#define WALLFACER_ISA_BEGIN
#define WALLFACER_ISA_END
#endif
#else
#define WALLFACER_ISA_BEGIN \
  static_assert(false, "compile this file per level: list it in WALLFACER_ISA_SOURCES");
#define WALLFACER_ISA_END
#endif

// In kernels/dispatch.cpp, namespace wallfacer::kernels: declares each level's twin of the public
// function wallfacer::kernels::fn (same signature; not overloaded) ...
#define WALLFACER_ISA_DECLARE(fn)        \
  namespace baseline {                   \
  decltype(::wallfacer::kernels::fn) fn; \
  }                                      \
  namespace avx2 {                       \
  decltype(::wallfacer::kernels::fn) fn; \
  }                                      \
  namespace avx512 {                     \
  decltype(::wallfacer::kernels::fn) fn; \
  }

// ... and calls the active level's twin with the given arguments.
#define WALLFACER_ISA_CALL(fn, ...)                  \
  switch (::wallfacer::kernels::isa::active()) {     \
    case ::wallfacer::kernels::isa::Level::Avx512:   \
      return avx512::fn(__VA_ARGS__);                \
    case ::wallfacer::kernels::isa::Level::Avx2:     \
      return avx2::fn(__VA_ARGS__);                  \
    case ::wallfacer::kernels::isa::Level::Baseline: \
      break;                                         \
  }                                                  \
  return baseline::fn(__VA_ARGS__)
