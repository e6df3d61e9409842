#include "wallfacer/plan/calibrate.h"

#include <algorithm>

#include "wallfacer/core/error.h"
#include "wallfacer/core/stats.h"

namespace wallfacer::plan {

Link fit_link(const std::vector<double>& bytes, const std::vector<double>& in_seconds) {
  WF_CHECK(bytes.size() == in_seconds.size() && bytes.size() >= 2, "fit_link needs >= 2 samples");
  for (double t : in_seconds) WF_CHECK(t > 0, "fit_link: non-positive time {}", t);
  std::vector<double> seconds = in_seconds;
  for (size_t i = 0; i < bytes.size(); ++i)
    for (size_t j = 0; j < bytes.size(); ++j)
      if (bytes[j] > bytes[i]) seconds[i] = std::min(seconds[i], seconds[j]);
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
  WF_CHECK(slope > 0,
           "the measured message times do not grow with the message size ({:.3g} s for {:.0f} B, "
           "{:.3g} s for {:.0f} B): the machine was too busy to measure its links; run `tune "
           "--calibrate` again when it is quiet",
           seconds[big.front()], bytes[big.front()], seconds[big.back()], bytes[big.back()]);
  // Latency: the median of what the other sizes take beyond streaming their bytes (a link that
  // lets a burst through at a higher rate, as a token bucket does, has none left: 0).
  std::vector<double> rest;
  for (size_t i = 0; i < bytes.size(); ++i)
    if (std::find(big.begin(), big.end(), i) == big.end())
      rest.push_back(seconds[i] - bytes[i] * slope);
  const double latency = rest.empty() ? std::max(0.0, mt - mx * slope) : median(rest);
  return {1.0 / slope, std::max(0.0, latency)};
}

double streaming_bandwidth(double fitted, const std::vector<double>& streaming) {
  WF_CHECK(fitted > 0, "streaming_bandwidth: a fitted bandwidth of {}", fitted);
  const double fastest =
      streaming.empty() ? 0.0 : *std::max_element(streaming.begin(), streaming.end());
  return fastest > 0 ? std::min(fitted, fastest) : fitted;
}

int devices_per_nic(int transfers, double alone, double together, int per_node) {
  if (transfers <= 1 || together <= 0) return per_node;
  const double n = std::clamp(double(transfers) * alone / together, 1.0, double(transfers));
  int d = std::max(1, int(n + 0.25));
  while (per_node % d) --d;
  return d;
}

bool pair_capped(int transfers, double alone, double together) {
  return transfers >= 2 && together > 1.3 * alone;
}

double fit_duplex_sharing(const std::function<double(double)>& predicted, double measured) {
  if (measured <= predicted(0.0)) return 0.0;
  if (measured >= predicted(1.0)) return 1.0;
  double lo = 0, hi = 1;
  for (int i = 0; i < 40; ++i) {
    const double mid = 0.5 * (lo + hi);
    (predicted(mid) < measured ? lo : hi) = mid;
  }
  return 0.5 * (lo + hi);
}

}  // namespace wallfacer::plan
