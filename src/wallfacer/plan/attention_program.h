#pragma once
// The attention as the simulator runs it: the seqpar schedules of every rank as simulator
// programs (used by the planner, predicted traces and the tests).

#include "wallfacer/plan/simulator.h"
#include "wallfacer/seqpar/config.h"

namespace wallfacer::plan {

// Programs of the attention (forward or backward) of every rank, built from the seqpar schedules;
// messages carry the schedules' bytes, which follow cfg.dtype (tensors of 4 or 2 bytes per
// element, statistics and travelling gradients of 4).
// tile_q, tile_k: the kernel tile (Cluster::attention_tile_*) by which causal work is counted.
Program attention_program(const seqpar::AttnConfig& cfg, int P, bool backward, int tile_q = 0,
                          int tile_k = 0, double* scratch_elements = nullptr);

// The attention of one layer as the planner simulates it: the forward and backward programs of
// ranks 0..period-1, the quotient of the whole one (simulate, "a program of R ranks") when ranks
// `period` apart do the same work: their schedules take the same steps (computes of the same
// flops, messages of the same bytes to the peers at the same offsets, collectives on groups that
// repeat with the period) and the machine `m` (its device_of: layout rank -> device) repeats with
// it too, nodes and cards included. The period is the smallest such divisor of P, found by
// comparing each rank below it with the ranks one period after it and one before it (mod P);
// P when there is none (a contiguous causal ring, whose ranks see different numbers of blocks) or
// when `exact` asks for every rank. scratch_elements: the largest scratch buffers of one rank.
struct AttentionPrograms {
  Program fwd, bwd;
  int period = 1;
  double scratch_elements = 0;
};
AttentionPrograms attention_programs(const seqpar::AttnConfig& cfg, int P, const Machine& m,
                                     int tile_q, int tile_k, bool exact = false);

}  // namespace wallfacer::plan
