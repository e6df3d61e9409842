#pragma once
// Fitting measurements to the cost model's parameters (no MPI here: tune/tune.h measures).

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

// Devices behind one network card, from `transfers` ranks of a node each sending to another node,
// one alone (`alone` bytes/s) and all at once (`together`, summed): `transfers` when together they
// get what one gets alone, 1 when each gets what one gets alone; in between, rounded down to a
// divisor of the node's `per_node` devices.
int devices_per_nic(int transfers, double alone, double together, int per_node);

// Whether one sender reaching several nodes at once (`transfers` of them, rates as above) gets
// clearly more than it gets to one node: the traffic of each node pair is capped below the card.
bool pair_capped(int transfers, double alone, double together);

// Whether two ranks of different nodes sending to each other at once (`together`, both
// directions summed) get clearly less than twice what one direction gets alone (`alone`): their
// cards' rate is shared by the two directions (Cluster::inter_shared_duplex).
bool shared_duplex(double alone, double together);
// How much of the other direction each takes then (Cluster::inter_duplex_sharing): each direction
// moves at together / 2 = alone / (1 + sharing), so sharing = 2 alone / together - 1, within [0, 1].
double duplex_sharing(double alone, double together);

}  // namespace wallfacer::plan
