#pragma once
// <immintrin.h>, and 2^x on 16 fp32 lanes with AVX-512: exp2_approx's steps (kernels/vec_math.h:
// the clamp at -127, x = n + r with n = round(x), the degree-5 polynomial for 2^r) with 2^n applied
// by VSCALEFPS, which gives 0 below 2^-149 where exp2_approx flushes below 2^-126. Internal to the
// kernels.
//
// Include it only where AVX-512 instructions may be generated: a *_amx.cpp source (compiled with
// its own -m flags), or inside the avx512 level's region of a per-level source (after
// WALLFACER_ISA_BEGIN, under WALLFACER_ISA_AVX512_INTRINSICS; kernels/isa.h). The function is
// static and always inlined, so no object file holds a copy of it that another could link to.

// GCC 12's AVX-512 intrinsics start their results from _mm512_undefined_*(), which
// -W(maybe-)uninitialized report once they are inlined into the includer's functions.
#pragma GCC diagnostic push
#if !defined(__clang__)  // clang has no such warning (and would warn about the name)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop

namespace wallfacer::kernels::detail {

[[gnu::always_inline]] static inline __m512 exp2_avx512(__m512 xs) {
  const __m512 x = _mm512_max_ps(xs, _mm512_set1_ps(-127.0f));
  const __m512 n = _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512 r = _mm512_sub_ps(x, n);  // exact, |r| <= 1/2
  __m512 p = _mm512_set1_ps(1.339086336e-3f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(9.676031918e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.550357114e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(2.402210749e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(6.931471880e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.000000075e+0f));
  return _mm512_scalef_ps(p, n);
}

}  // namespace wallfacer::kernels::detail
