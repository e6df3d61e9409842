#pragma once
// The attention as the simulator runs it: the seqpar schedules of every rank as simulator
// programs (used by the planner, predicted traces and the tests).

#include "wallfacer/plan/simulator.h"
#include "wallfacer/seqpar/config.h"

namespace wallfacer::plan {

// Programs of the attention (forward or backward) of every rank, built from the seqpar schedules;
// element counts become bytes with `elem_bytes`.
// tile_q, tile_k: the kernel tile (Cluster::attention_tile_*) by which causal work is counted.
Program attention_program(const seqpar::AttnConfig& cfg, int P, bool backward, double elem_bytes,
                          int tile_q = 0, int tile_k = 0, double* scratch_elements = nullptr);

}  // namespace wallfacer::plan
