#pragma once
// Fitting measurements to the cost model's parameters (no MPI here: tune does the measuring).

#include <vector>

#include "wallfacer/plan/cluster.h"

namespace wallfacer::plan {

// α–β fit of one-way message times t_i for sizes b_i: minimises Σ ((α + b_i/β − t_i) / t_i)², so
// small messages set the latency and large ones the bandwidth. Latency is clamped at 0. Needs at
// least two distinct sizes.
Link fit_link(const std::vector<double>& bytes, const std::vector<double>& seconds);

// The median of the values (the mean of the middle two for an even count).
double median(std::vector<double> v);

}  // namespace wallfacer::plan
