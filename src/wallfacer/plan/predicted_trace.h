#pragma once
// The simulator's predicted run of one configuration's attention (one layer, forward then
// backward) as a trace in the format of `wallfacer attn --trace` (docs/trace.md), so that the
// predicted and the measured timelines of a configuration open side by side.

#include <nlohmann/json.hpp>

#include "wallfacer/plan/planner.h"

namespace wallfacer::plan {

// The Chrome trace (core/trace.h chrome_trace) of candidate `c`: a process per node of the
// cluster, a thread per layout rank, a span per op of the simulated programs.
nlohmann::json predicted_trace(const PlanInput& in, const Candidate& c);

}  // namespace wallfacer::plan
