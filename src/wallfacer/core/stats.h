#pragma once
// Small statistics of measurements.

#include <vector>

namespace wallfacer {

// The median of the values (the mean of the middle two for an even count); Error when empty.
double median(std::vector<double> v);

}  // namespace wallfacer
