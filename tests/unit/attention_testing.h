#pragma once
// What the fp32 and bf16 attention tests share: problem cases, random inputs, the error measure
// of docs/numerics.md, and a guard that sets an environment variable for one scope.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "wallfacer/kernels/attention.h"
#include "wallfacer/kernels/reference/attention_ref.h"

namespace wallfacer::kernels::attn_testing {

struct Case {
  int batch = 1, seq_q = 0, seq_k = 0, heads = 1, kv_heads = 1, head_dim = 0;
  bool causal = false;
  int64_t q_pos0 = 0, k_pos0 = 0;
  std::string name;
};

inline void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

inline std::vector<float> random_floats(size_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> x(n);
  for (auto& v : x) v = dist(gen);
  return x;
}

template <typename T>
std::vector<double> to_double(const std::vector<T>& x) {
  return {x.begin(), x.end()};
}

// Relative error max |x - ref| / max |ref|; rows where ref is -inf must be -inf in x as well
// (and count as error 1e30 otherwise). When ref is all zero the absolute error is returned.
inline double rel_err(const std::vector<float>& x, const std::vector<double>& ref) {
  EXPECT_EQ(x.size(), ref.size());
  double max_ref = 0, max_err = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    if (std::isinf(ref[i])) {
      if (x[i] != ref[i]) max_err = 1e30;
      continue;
    }
    if (!std::isfinite(x[i])) return 1e30;
    max_ref = std::max(max_ref, std::fabs(ref[i]));
    max_err = std::max(max_err, std::fabs(double(x[i]) - ref[i]));
  }
  return max_ref > 0 ? max_err / max_ref : max_err;
}

inline AttnDims dims_of(const Case& c) {
  return {c.batch, c.seq_q, c.seq_k, c.heads, c.kv_heads, c.head_dim};
}

inline reference::AttnRefProblem ref_problem(const Case& c) {
  return {dims_of(c), 1.0 / std::sqrt(double(c.head_dim)), c.causal, c.q_pos0, c.k_pos0};
}

// Sets an environment variable for the lifetime of the object (null value: unset), then restores
// it. wallfacer::num_threads() (OMP_NUM_THREADS) and the bf16 kernels (WALLFACER_BF16_PATH) read
// theirs at every call.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) saved_ = old, had_ = true;
    if (value)
      setenv(name, value, 1);
    else
      unsetenv(name);
  }
  ~ScopedEnv() {
    if (had_)
      setenv(name_.c_str(), saved_.c_str(), 1);
    else
      unsetenv(name_.c_str());
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  std::string name_, saved_;
  bool had_ = false;
};

}  // namespace wallfacer::kernels::attn_testing
