#pragma once
// What the kernel tests against kernels/reference/ops_ref.h share: seeded normal inputs, their
// fp64 copies and an element-wise comparison.

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "wallfacer/kernels/reference/ops_ref.h"

namespace wallfacer::kernels::testing {

inline std::vector<float> randn(size_t n, uint32_t seed, float s = 1.0f) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.0f, s);
  std::vector<float> v(n);
  for (auto& x : v) x = d(g);
  return v;
}

inline ref::Vec to_d(const std::vector<float>& v) { return ref::Vec(v.begin(), v.end()); }

// Every got[i] within atol + rtol |want[i]| of want[i].
inline void expect_close(const std::vector<float>& got, const ref::Vec& want, double atol,
                         double rtol) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], atol + rtol * std::abs(want[i])) << "at " << i;
  }
}

// d/dx[i] of sum(dy * f(x)) (f: Vec -> Vec) by central differences of step 1e-6.
template <class F>
double central_difference(const F& f, const std::vector<float>& dy, const ref::Vec& x, size_t i) {
  auto obj = [&](const ref::Vec& xx) {
    const ref::Vec out = f(xx);
    double s = 0;
    for (size_t k = 0; k < out.size(); ++k) s += out[k] * dy[k];
    return s;
  };
  ref::Vec xp = x, xm = x;
  xp[i] += 1e-6;
  xm[i] -= 1e-6;
  return (obj(xp) - obj(xm)) / 2e-6;
}

}  // namespace wallfacer::kernels::testing
