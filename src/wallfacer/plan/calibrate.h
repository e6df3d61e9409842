#pragma once
// Fitting measurements to the cost model's parameters (no MPI here: tune/tune.h measures).

#include <functional>
#include <vector>

#include "wallfacer/plan/cluster.h"

namespace wallfacer::plan {

// α–β fit of one-way message times t_i for sizes b_i: the bandwidth β from the sizes that stream
// (at least 10x the fastest time; least squares), the latency α from the others (the median of
// t_i − b_i/β, clamped at 0), so a link whose small messages pass at a burst rate (a token bucket)
// still gets its sustained bandwidth. Needs at least two distinct sizes. A size's time is first
// lowered to the fastest of the larger sizes' (a message is never slower than a larger one; a
// slower sample is a rank that lost its core). Error when the times still do not grow with the
// size (the machine was too busy to measure).
Link fit_link(const std::vector<double>& bytes, const std::vector<double>& seconds);

// A link's bandwidth for messages that follow one another: `fitted` (fit_link's, from one message
// at a time), or the fastest of the rates measured for a long transfer alone (`streaming`, bytes/s;
// zeros: not measured) where that is lower; `fitted` where none was measured.
double streaming_bandwidth(double fitted, const std::vector<double>& streaming);

// Devices behind one network card, from `transfers` ranks of a node each sending to another node,
// one alone (`alone` bytes/s) and all at once (`together`, summed): `transfers` when together they
// get what one gets alone, 1 when each gets what one gets alone; in between, rounded down to a
// divisor of the node's `per_node` devices.
int devices_per_nic(int transfers, double alone, double together, int per_node);

// Whether one sender reaching several nodes at once (`transfers` of them, rates as above) gets
// clearly more than it gets to one node: the traffic of each node pair is capped below the card.
bool pair_capped(int transfers, double alone, double together);

// The share of the other direction (Cluster::inter_duplex_sharing) that makes `predicted(s)`, the
// planner's time for collectives measured at `measured` seconds, equal to it: predicted grows with
// s, so bisection on [0, 1]; 0 where even full duplex predicts the measured time or more, 1 where
// even a full share predicts less. Below kMinDuplexSharing the cards count as full duplex.
inline constexpr double kMinDuplexSharing = 0.1;
double fit_duplex_sharing(const std::function<double(double)>& predicted, double measured);

}  // namespace wallfacer::plan
