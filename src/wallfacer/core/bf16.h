#pragma once
// bfloat16 storage: the upper half of an IEEE fp32 (sign, 8 exponent bits, 7 mantissa bits), so
// it has fp32's range with 8 significant bits (unit roundoff 2^-8 ≈ 3.9e-3). Arithmetic is done in
// fp32; bf16 is how values are stored.

#include <cstdint>
#include <cstring>
#include <vector>

namespace wallfacer {

struct bf16 {
  uint16_t bits = 0;
  // Bitwise equality (a NaN equals the same NaN; +0 and -0 differ).
  friend bool operator==(bf16 a, bf16 b) { return a.bits == b.bits; }
  friend bool operator!=(bf16 a, bf16 b) { return a.bits != b.bits; }
};

// The bits of a float and back (a public header: C++17, so no std::bit_cast).
inline uint32_t float_bits(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
}
inline float bits_float(uint32_t u) {
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
}

// fp32 -> bf16 rounded to nearest, ties to even. NaN stays NaN (quiet, same sign and top payload
// bits), +-inf stay, finite values beyond the largest bf16 (about 3.39e38) become +-inf, and
// subnormals are rounded like every other value.
// The _bits forms work on the bit patterns (loops over them vectorise where the struct does not).
inline uint16_t to_bf16_bits(float x) {
  const uint32_t u = float_bits(x);
  const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  const uint32_t quiet_nan = (u >> 16) | 0x40u;
  const bool nan = (u & 0x7fffffffu) > 0x7f800000u;
  return static_cast<uint16_t>(nan ? quiet_nan : rounded);
}
inline bf16 to_bf16(float x) { return bf16{to_bf16_bits(x)}; }

// bf16 -> fp32, exact.
inline float bits_to_float(uint16_t bits) { return bits_float(uint32_t(bits) << 16); }
inline float to_float(bf16 x) { return bits_to_float(x.bits); }

// Bulk conversions of n contiguous values, elementwise as above (vectorised).
void fp32_to_bf16(const float* in, bf16* out, int64_t n);
void bf16_to_fp32(const bf16* in, float* out, int64_t n);
std::vector<bf16> to_bf16(const std::vector<float>& x);
std::vector<float> to_fp32(const std::vector<bf16>& x);

}  // namespace wallfacer
