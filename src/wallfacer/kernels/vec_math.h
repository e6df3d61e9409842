#pragma once
// Elementwise float functions written so that g++ -O3 -march=native vectorises the loops that call
// them (without -ffast-math). Internal to the kernels.

#include <algorithm>
#include <bit>
#include <cstdint>

namespace wallfacer::kernels::detail {

// exp(x) for a vector of floats, written so that g++ -O3 -march=native turns the loop into SIMD
// code without -ffast-math: no float comparisons and no float-to-int conversion, which the
// default -ftrapping-math keeps the vectoriser away from. x = n ln2 + r with |r| <= ln2 / 2
// (ln2 split in two parts), e^r by its Taylor polynomial of degree 7 (truncation below 5e-9
// relative), 2^n from the exponent bits. The clamp at -88 is an unsigned min on the bit patterns
// (for x <= 0 and -inf, a larger pattern is a more negative number; positive x pass unchanged);
// there n = -127 gives exponent bits 0, so exp(-inf) and anything below about -87.7 is exactly 0
// (results that would be subnormal are flushed). n is read from the low bits of the rounding sum.
inline float exp_approx(float x) {
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kLn2Hi = 0.693145751953125f;  // 12 significant bits: n * kLn2Hi is exact
  constexpr float kLn2Lo = 1.42860682030941723e-6f;
  constexpr float kRound = 12582912.0f;  // 1.5 * 2^23: adding it rounds to the nearest integer
  constexpr float kMin = -88.0f;
  const float xc =
      std::bit_cast<float>(std::min(std::bit_cast<uint32_t>(x), std::bit_cast<uint32_t>(kMin)));
  const float t = xc * kLog2e + kRound;
  const float n = t - kRound;
  const float r = (xc - n * kLn2Hi) - n * kLn2Lo;
  float p = 1.0f / 5040.0f;
  p = p * r + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const int32_t n_int = std::bit_cast<int32_t>(t) - std::bit_cast<int32_t>(kRound);
  return p * std::bit_cast<float>((n_int + 127) << 23);
}

// 2^x, for softmax rows whose scores were scaled by log2(e) (the bf16 attention kernels): x = n + r
// with n = round(x), |r| <= 1/2 (exact), 2^r by the degree-5 polynomial that interpolates it at the
// Chebyshev nodes of [-1/2, 1/2] (relative error below 1.1e-7 in exact arithmetic, about one fp32
// rounding), 2^n from the exponent bits. Meant for x <= 0: clamped at -127 as exp_approx is, where
// n = -127 gives exponent bits 0, so exp2(-inf) is exactly 0 and anything below about -126.5 is 0.
inline float exp2_approx(float x) {
  constexpr float kRound = 12582912.0f;  // 1.5 * 2^23: adding it rounds to the nearest integer
  constexpr float kMin = -127.0f;
  const float xc =
      std::bit_cast<float>(std::min(std::bit_cast<uint32_t>(x), std::bit_cast<uint32_t>(kMin)));
  const float t = xc + kRound;
  const float n = t - kRound;
  const float r = xc - n;
  float p = 1.339086336e-3f;
  p = p * r + 9.676031918e-3f;
  p = p * r + 5.550357114e-2f;
  p = p * r + 2.402210749e-1f;
  p = p * r + 6.931471880e-1f;
  p = p * r + 1.000000075e+0f;
  const int32_t n_int = std::bit_cast<int32_t>(t) - std::bit_cast<int32_t>(kRound);
  return p * std::bit_cast<float>((n_int + 127) << 23);
}

// tanh(u) = sign(u) (1 - e) / (1 + e) with e = exp(-2|u|) in (0, 1]: no overflow, absolute error
// about 1e-7 (relative error grows only where tanh is tiny and 1 - e cancels); the sign is put back
// from the bits of u.
inline float tanh_approx(float u) {
  const uint32_t bits = std::bit_cast<uint32_t>(u);
  const float a = std::bit_cast<float>(bits & 0x7fffffffu);
  const float e = exp_approx(-2.0f * a);
  const float t = (1.0f - e) / (1.0f + e);
  return std::bit_cast<float>(std::bit_cast<uint32_t>(t) | (bits & 0x80000000u));
}

}  // namespace wallfacer::kernels::detail
