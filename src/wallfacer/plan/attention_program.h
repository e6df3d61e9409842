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

// The smallest period R of the attention on machine `m` (its device_of: layout rank -> device):
// ranks R apart do the same work, so that simulating ranks 0..R-1 times them all. First the
// schedules' period S, the smallest divisor of P such that ranks S apart take the same steps in
// the forward and in the backward (computes of the same FLOPs, messages of the same bytes to the
// peers at the same offsets, collectives on groups that repeat with S), checked for each rank
// below S against the ranks S after it and S before it (mod P); then R, the smallest multiple of
// S dividing P by which the shift maps nodes to nodes and cards to cards, ranks 0..R-1 filling
// whole nodes (whole cards where the cluster caps no node pair and shares no duplex). P when there
// is none: WallFacer-C (its placement and sub-rings admit no shift), the contiguous causal ring
// (its ranks see different numbers of blocks).
// When R < P: fwd and bwd (where given) receive the quotient programs of ranks 0..R-1 (simulate,
// plan/simulator.h), rank b + k S running rank b's program shifted by k S, consecutive computes
// merged into one; scratch_elements the largest scratch buffers of one rank.
// When R = P and every_rank: fwd and bwd (where given) receive the programs of every rank, each
// rank's schedule made once (those the search made are not made again), consecutive computes
// merged; scratch_elements as above.
// Ulysses x WallFacer-C, whose ranks do not repeat with a shift, has another symmetry: rotating
// every Ulysses team by d members (d a node's devices where a team fills whole nodes; 1 where a
// team lies in a node and every device has a card of its own). Where `order` is given, that
// rotation is tried before every rank, of a quotient of fewer than P ranks where every_rank (at
// most max_rotated_ranks(u) where not; plan/planner.h): relabelled so that it is a shift, its
// quotient programs (of R = P d / u ranks, u the Ulysses degree) are returned with R, and `order`
// receives the layout rank of each relabelled rank (empty when the ranks are not relabelled): the
// quotient runs on the machine whose device_of[y] is m.device_of[order[y]].
// ring_steps > 0: the schedules' team ring cut to that many steps (seqpar::make_schedule).
int attention_period(const seqpar::AttnConfig& cfg, int P, const Machine& m, int tile_q, int tile_k,
                     Program* fwd = nullptr, Program* bwd = nullptr,
                     double* scratch_elements = nullptr, bool every_rank = false,
                     std::vector<int>* order = nullptr, int ring_steps = 0);

}  // namespace wallfacer::plan
