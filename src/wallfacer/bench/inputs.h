#pragma once
// Benchmark inputs: reproducible values uniform in [-1, 1].

#include <cstdint>
#include <random>
#include <vector>

namespace wallfacer::bench {

// n values uniform in [-1, 1] from a Mersenne twister seeded with `seed`.
inline std::vector<float> uniform_values(size_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> x(n);
  for (auto& v : x) v = dist(gen);
  return x;
}

}  // namespace wallfacer::bench
