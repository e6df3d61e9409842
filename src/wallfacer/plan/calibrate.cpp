#include "wallfacer/plan/calibrate.h"

#include <algorithm>

#include "wallfacer/core/error.h"

namespace wallfacer::plan {

Link fit_link(const std::vector<double>& bytes, const std::vector<double>& seconds) {
  WF_CHECK(bytes.size() == seconds.size() && bytes.size() >= 2, "fit_link needs >= 2 samples");
  for (double t : seconds) WF_CHECK(t > 0, "fit_link: non-positive time {}", t);
  // Bandwidth: the least-squares slope over the sizes that take at least 10x the fastest message
  // (streaming, not waiting out the latency), or the two largest when fewer do.
  const double fastest = *std::min_element(seconds.begin(), seconds.end());
  std::vector<size_t> big;
  for (size_t i = 0; i < bytes.size(); ++i)
    if (seconds[i] >= 10 * fastest) big.push_back(i);
  if (big.size() < 2) {
    std::vector<size_t> order(bytes.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::sort(order.begin(), order.end(), [&](size_t x, size_t y) { return bytes[x] < bytes[y]; });
    big = {order[order.size() - 2], order.back()};
  }
  double mx = 0, mt = 0;
  for (size_t i : big) mx += bytes[i] / double(big.size()), mt += seconds[i] / double(big.size());
  double sxx = 0, sxt = 0;
  for (size_t i : big) {
    sxx += (bytes[i] - mx) * (bytes[i] - mx);
    sxt += (bytes[i] - mx) * (seconds[i] - mt);
  }
  WF_CHECK(sxx > 0, "fit_link needs at least two distinct message sizes");
  const double slope = sxt / sxx;
  WF_CHECK(slope > 0, "fit_link: time does not grow with message size");
  // Latency: the median of what the other sizes take beyond streaming their bytes (a link that
  // lets a burst through at a higher rate, as a token bucket does, has none left: 0).
  std::vector<double> rest;
  for (size_t i = 0; i < bytes.size(); ++i)
    if (std::find(big.begin(), big.end(), i) == big.end())
      rest.push_back(seconds[i] - bytes[i] * slope);
  const double latency = rest.empty() ? std::max(0.0, mt - mx * slope) : median(rest);
  return {1.0 / slope, std::max(0.0, latency)};
}

double median(std::vector<double> v) {
  WF_CHECK(!v.empty(), "median of nothing");
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace wallfacer::plan
