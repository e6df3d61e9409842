#pragma once
// Measuring the links between ranks (wallfacer tune --calibrate): ping-pong times per message
// size, and how concurrent transfers share a network card. Collective over the communicator: every
// rank calls each function with the same arguments; ranks not named wait. plan/calibrate.h fits
// the results to the cost model.

#include <cstdint>
#include <utility>
#include <vector>

#include "wallfacer/comm/communicator.h"
#include "wallfacer/comm/topology.h"

namespace wallfacer::comm {

// One-way times (seconds, half the fastest round trip) of messages of `bytes` between two ranks.
struct LinkSamples {
  std::vector<double> bytes, seconds;
};

// Ping-pong between ranks a and b for message sizes growing by 4x from 4 bytes until one message
// takes over 0.1 s or reaches 16 MB. The sizes are measured in `sweeps` interleaved passes (about
// 0.2 s per size in all, at least 3 round trips per size and pass) and each size keeps its fastest
// round trip: a rank that loses its core only ever adds time, and a busy spell of the machine then
// spoils one pass of a few sizes rather than every round trip of one size. Rank a decides when a
// size has had enough round trips and tells b in the first element of each message.
LinkSamples ping_pong(Communicator& world, int a, int b, int sweeps = 3);

// The rate of the first transfer of `pairs` (source, destination) alone and of all of them at
// once, 4 MB each (after one round that sets up every connection).
struct Spread {
  double alone = 0, together = 0;  // bytes/s: one transfer, and all transfers added up
  int transfers = 0;
};
Spread measure_spread(Communicator& world, const std::vector<std::pair<int, int>>& pairs);

// Node 0's card as its ranks share it: rank i of node 0 sends to rank i of node 1 (two nodes or
// more).
Spread card_share(Communicator& world, const Topology& topo);

// Whether the traffic between two nodes is capped below the card (a per-flow limit): the first
// rank of node 0 streams to the first rank of node 1 alone, then to the first rank of every other
// node at once (three nodes or more).
Spread pair_cap(Communicator& world, const Topology& topo);

}  // namespace wallfacer::comm
