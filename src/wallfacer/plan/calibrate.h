#pragma once
// Fitting measurements to the cost model's parameters (no MPI here: tune does the measuring).

#include <vector>

#include "wallfacer/plan/cluster.h"

namespace wallfacer::plan {

// α–β fit of one-way message times t_i for sizes b_i: the bandwidth β from the sizes that stream
// (at least 10x the fastest time; least squares), the latency α from the others (the median of
// t_i − b_i/β, clamped at 0), so a link whose small messages pass at a burst rate (a token bucket)
// still gets its sustained bandwidth. Needs at least two distinct sizes.
Link fit_link(const std::vector<double>& bytes, const std::vector<double>& seconds);

// The median of the values (the mean of the middle two for an even count).
double median(std::vector<double> v);

}  // namespace wallfacer::plan
