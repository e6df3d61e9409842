#include "wallfacer/comm/link_probe.h"

#include <algorithm>

#include "wallfacer/core/timer.h"

namespace wallfacer::comm {
namespace {

constexpr int kPingTag = 7, kPongTag = 8, kTransferTag = 9;
constexpr int64_t kMaxPingCount = int64_t(1) << 22;   // floats: 16 MB
constexpr int64_t kTransferCount = int64_t(1) << 20;  // floats: 4 MB, about 0.7 s at 50 Mbit/s

// The fastest one-way time of `count` floats between a and b, from round trips for `budget`
// seconds (at least 3 after one warm-up, at most 2000). Only a and b take part; the others return
// 0.
double fastest_one_way(Communicator& world, int a, int b, int64_t count, double budget,
                       std::vector<float>& buf) {
  const int rank = world.rank();
  if (rank != a && rank != b) return 0;
  const int peer = rank == a ? b : a;
  double best = 0;
  int trips = 0;
  Timer spent;
  for (bool more = true; more; ++trips) {
    Timer trip;
    if (rank == a) {
      buf[0] = (trips >= 4 && spent.seconds() > budget) || trips >= 2000 ? 0.f : 1.f;
      more = buf[0] != 0.f;
      world.isend(buf.data(), count, peer, kPingTag).wait();
      world.irecv(buf.data(), count, peer, kPongTag).wait();
    } else {
      world.irecv(buf.data(), count, peer, kPingTag).wait();
      more = buf[0] != 0.f;
      world.isend(buf.data(), count, peer, kPongTag).wait();
    }
    const double t = trip.seconds() / 2;
    if (trips == 1 || (trips > 1 && t < best)) best = t;  // trip 0 warms up
  }
  return best;
}

// Rank a's value, on every rank.
double from_rank(Communicator& world, int a, double t) {
  double shared = world.rank() == a ? t : 0.0;
  world.all_reduce_sum(&shared, 1);
  return shared;
}

// Seconds until the last receiver has its message when every (source, destination) pair of
// `pairs` sends kTransferCount floats at once (each rank posts all of its transfers, then waits).
double timed_transfers(Communicator& world, const std::vector<std::pair<int, int>>& pairs) {
  const int rank = world.rank();
  std::vector<float> buf(static_cast<size_t>(kTransferCount)), got(buf.size());
  world.barrier();
  Timer t;
  std::vector<Request> reqs;
  for (auto [src, dst] : pairs) {
    if (rank == src) reqs.push_back(world.isend(buf.data(), kTransferCount, dst, kTransferTag));
    if (rank == dst) reqs.push_back(world.irecv(got.data(), kTransferCount, src, kTransferTag));
  }
  for (auto& r : reqs) r.wait();
  std::vector<double> took(size_t(world.size()), 0.0);
  took[size_t(rank)] = t.seconds();
  world.all_reduce_sum(took.data(), int64_t(took.size()));
  double last = 0;
  for (auto [src, dst] : pairs) last = std::max(last, took[size_t(dst)]);
  return last;
}

}  // namespace

LinkSamples ping_pong(Communicator& world, int a, int b, int sweeps) {
  sweeps = std::max(1, sweeps);
  const double budget = 0.2 / sweeps;
  std::vector<float> buf(static_cast<size_t>(kMaxPingCount));
  LinkSamples out;
  std::vector<int64_t> counts;
  // The first pass also finds the sizes: up to the first that takes over 0.1 s.
  for (int64_t count = 1; count <= kMaxPingCount; count *= 4) {
    world.barrier();
    const double t = from_rank(world, a, fastest_one_way(world, a, b, count, budget, buf));
    counts.push_back(count);
    out.bytes.push_back(double(count) * sizeof(float));
    out.seconds.push_back(t);
    if (t > 0.1) break;
  }
  for (int pass = 1; pass < sweeps; ++pass)
    for (size_t i = 0; i < counts.size(); ++i) {
      world.barrier();
      const double t = from_rank(world, a, fastest_one_way(world, a, b, counts[i], budget, buf));
      out.seconds[i] = std::min(out.seconds[i], t);
    }
  return out;
}

Spread measure_spread(Communicator& world, const std::vector<std::pair<int, int>>& pairs) {
  timed_transfers(world, pairs);
  const double bytes = double(kTransferCount) * sizeof(float);
  Spread s;
  s.transfers = int(pairs.size());
  s.alone = bytes / timed_transfers(world, {pairs[0]});
  s.together = s.transfers * bytes / timed_transfers(world, pairs);
  return s;
}

Spread card_share(Communicator& world, const Topology& topo) {
  std::vector<int> node0, node1;
  for (int r = 0; r < int(topo.node_of.size()); ++r) {
    if (topo.node_of[r] == 0) node0.push_back(r);
    if (topo.node_of[r] == 1) node1.push_back(r);
  }
  std::vector<std::pair<int, int>> pairs;
  for (size_t i = 0; i < std::min(node0.size(), node1.size()); ++i)
    pairs.emplace_back(node0[i], node1[i]);
  return measure_spread(world, pairs);
}

Spread pair_cap(Communicator& world, const Topology& topo) {
  std::vector<int> first(size_t(topo.nodes()), -1);
  for (int r = int(topo.node_of.size()) - 1; r >= 0; --r) first[size_t(topo.node_of[r])] = r;
  std::vector<std::pair<int, int>> pairs;
  for (size_t k = 1; k < first.size(); ++k) pairs.emplace_back(first[0], first[k]);
  return measure_spread(world, pairs);
}

}  // namespace wallfacer::comm
