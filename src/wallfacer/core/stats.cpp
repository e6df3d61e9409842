#include "wallfacer/core/stats.h"

#include <algorithm>

#include "wallfacer/core/error.h"

namespace wallfacer {

double median(std::vector<double> v) {
  WF_CHECK(!v.empty(), "median of nothing");
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace wallfacer
