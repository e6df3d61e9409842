#include "wallfacer/plan/calibrate.h"

#include <algorithm>

#include "wallfacer/core/error.h"

namespace wallfacer::plan {

Link fit_link(const std::vector<double>& bytes, const std::vector<double>& seconds) {
  WF_CHECK(bytes.size() == seconds.size() && bytes.size() >= 2, "fit_link needs >= 2 samples");
  // Weighted least squares for t = a + b x with weights 1/t^2: normal equations.
  double s00 = 0, s01 = 0, s11 = 0, r0 = 0, r1 = 0;
  for (size_t i = 0; i < bytes.size(); ++i) {
    WF_CHECK(seconds[i] > 0, "fit_link: non-positive time {}", seconds[i]);
    const double w = 1.0 / (seconds[i] * seconds[i]), x = bytes[i], t = seconds[i];
    s00 += w;
    s01 += w * x;
    s11 += w * x * x;
    r0 += w * t;
    r1 += w * x * t;
  }
  const double det = s00 * s11 - s01 * s01;
  WF_CHECK(det > 0, "fit_link needs at least two distinct message sizes");
  double a = (r0 * s11 - r1 * s01) / det, b = (s00 * r1 - s01 * r0) / det;
  if (a < 0) {  // refit the slope through the origin
    a = 0;
    b = r1 / s11;
  }
  WF_CHECK(b > 0, "fit_link: time does not grow with message size");
  return {1.0 / b, a};
}

double median(std::vector<double> v) {
  WF_CHECK(!v.empty(), "median of nothing");
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace wallfacer::plan
