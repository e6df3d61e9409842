// The simulator against hand-computed α–β times (closed forms written out here, not the code's).
#include <gtest/gtest.h>

#include <map>

#include "wallfacer/core/error.h"
#include "wallfacer/core/stats.h"
#include "wallfacer/plan/calibrate.h"
#include "wallfacer/plan/simulator.h"

namespace wallfacer::plan {
namespace {

// Links: intra 10 GB/s, 2 µs; inter 1 GB/s, 20 µs. Compute 1 TFLOP/s.
// shared_duplex: the directions share the cards fully (duplex_sharing 1).
Machine machine(int P, int per_node, int per_nic, bool shared_duplex = false) {
  Machine m;
  m.duplex_sharing = shared_duplex ? 1.0 : 0.0;
  m.intra = {1e10, 2e-6};
  m.inter = {1e9, 2e-5};
  m.devices_per_node = per_node;
  m.devices_per_nic = per_nic;
  m.gemm_flops = 1e12;
  m.attention_fwd_flops = 5e11;
  m.attention_bwd_flops = 2.5e11;
  for (int r = 0; r < P; ++r) m.device_of.push_back(r);
  return m;
}

constexpr double kTol = 1e-12;

TEST(PlanSim, OneMessageBetweenNodes) {
  Program p(2);
  p.ops[0] = {Op::send(1, 1e6, 0), Op::wait(0)};
  p.ops[1] = {Op::recv(0, 1e6, 0), Op::wait(0)};
  auto r = simulate(p, machine(2, 1, 1));
  EXPECT_NEAR(r.time, 2e-5 + 1e6 / 1e9, kTol);  // 1.02 ms
  EXPECT_NEAR(r.exposed_comm, r.time, kTol);
  EXPECT_DOUBLE_EQ(r.ranks[0].p2p_bytes, 1e6);
  EXPECT_DOUBLE_EQ(r.ranks[1].p2p_bytes, 0);
  EXPECT_DOUBLE_EQ(r.ranks[0].inter_bytes, 1e6);
  // Same node: 2 µs + 0.1 ms.
  EXPECT_NEAR(simulate(p, machine(2, 2, 2)).time, 2e-6 + 1e-4, kTol);
}

TEST(PlanSim, TransferStartsWhenBothSidesPosted) {
  Program p(2);
  p.ops[0] = {Op::send(1, 1e6, 0), Op::wait(0)};
  p.ops[1] = {Op::compute(Work::Gemm, 3e9), Op::recv(0, 1e6, 0), Op::wait(0)};  // 3 ms first
  EXPECT_NEAR(simulate(p, machine(2, 1, 1)).time, 3e-3 + 2e-5 + 1e-3, kTol);
}

TEST(PlanSim, DoubleBufferedTransferHidesBehindCompute) {
  for (double flops : {2e9, 5e8}) {  // 2 ms of compute hides the 1.02 ms transfer; 0.5 ms does not
    Program p(2);
    p.ops[0] = {Op::send(1, 1e6, 0), Op::compute(Work::Gemm, flops), Op::wait(0)};
    p.ops[1] = {Op::recv(0, 1e6, 0), Op::compute(Work::Gemm, flops), Op::wait(0)};
    auto r = simulate(p, machine(2, 1, 1));
    const double compute = flops / 1e12, transfer = 2e-5 + 1e-3;
    EXPECT_NEAR(r.time, std::max(compute, transfer), kTol);
    EXPECT_NEAR(r.exposed_comm, std::max(0.0, transfer - compute), kTol);
    EXPECT_NEAR(r.compute, compute, kTol);
  }
}

TEST(PlanSim, AttentionForwardAndBackwardUseTheirOwnRates) {
  Program p(1);
  p.ops[0] = {Op::compute(Work::AttentionFwd, 1e9), Op::compute(Work::Gemm, 1e9),
              Op::compute(Work::AttentionBwd, 1e9)};
  EXPECT_NEAR(simulate(p, machine(1, 1, 1)).time, 1e9 / 5e11 + 1e9 / 1e12 + 1e9 / 2.5e11, kTol);
}

// Ranks 0,1 on node 0 and 2,3 on node 1; 0->2 and 1->3 at the same time.
TEST(PlanSim, NetworkCardSharedByTheDevicesOfANode) {
  Program p(4);
  p.ops[0] = {Op::send(2, 1e6, 0), Op::wait(0)};
  p.ops[1] = {Op::send(3, 1e6, 0), Op::wait(0)};
  p.ops[2] = {Op::recv(0, 1e6, 0), Op::wait(0)};
  p.ops[3] = {Op::recv(1, 1e6, 0), Op::wait(0)};
  EXPECT_NEAR(simulate(p, machine(4, 2, 2)).time, 2e-5 + 2 * 1e6 / 1e9, kTol);  // one shared card
  EXPECT_NEAR(simulate(p, machine(4, 2, 1)).time, 2e-5 + 1e6 / 1e9, kTol);      // a card each
}

// Rails (a card per device): a message between nodes takes its sender's card out and its
// receiver's card in, whichever cards those are. Two messages across rails (0->3, 1->2) use four
// different card directions: each alone on its link. Two from one card, or two into one card,
// share it. A card sends and receives at once (0->2 with 2->0): each direction alone.
TEST(PlanSim, RailsSenderCardOutReceiverCardIn) {
  const double B = 1e6, alone = 2e-5 + B / 1e9, shared = 2e-5 + 2 * B / 1e9;
  auto two = [&](std::pair<int, int> a, std::pair<int, int> b) {
    Program p(4);
    p.ops[a.first].push_back(Op::send(a.second, B, 0));
    p.ops[a.second].push_back(Op::recv(a.first, B, 0));
    const int rs = int(p.ops[b.first].size()), rr = int(p.ops[b.second].size());
    p.ops[b.first].push_back(Op::send(b.second, B, rs, 1));
    p.ops[b.second].push_back(Op::recv(b.first, B, rr, 1));
    for (auto& ops : p.ops) {
      const int k = int(ops.size());
      for (int i = 0; i < k; ++i) ops.push_back(Op::wait(i));
    }
    return simulate(p, machine(4, 2, 1)).time;
  };
  EXPECT_NEAR(two({0, 3}, {1, 2}), alone, kTol);   // cross-rail, four card directions
  EXPECT_NEAR(two({0, 2}, {0, 3}), shared, kTol);  // both out of node 0's card 0
  EXPECT_NEAR(two({0, 2}, {1, 2}), shared, kTol);  // both into node 1's card 0
  EXPECT_NEAR(two({0, 2}, {2, 0}), alone, kTol);   // card 0 of each node sends and receives
}

// A cap on the traffic between two nodes (pair_bandwidth): two messages from node 0 to node 1
// share it even with a card each; one to another node does not; collectives are capped alike.
TEST(PlanSim, PairOfNodesCapsItsTraffic) {
  Program p(6);  // nodes of 2: {0, 1}, {2, 3}, {4, 5}
  p.ops[0] = {Op::send(2, 1e6, 0), Op::wait(0)};
  p.ops[1] = {Op::send(3, 1e6, 0), Op::wait(0)};
  p.ops[2] = {Op::recv(0, 1e6, 0), Op::wait(0)};
  p.ops[3] = {Op::recv(1, 1e6, 0), Op::wait(0)};
  Machine m = machine(6, 2, 1);
  m.pair_bandwidth = 4e8;
  EXPECT_NEAR(simulate(p, m).time, 2e-5 + 2 * 1e6 / 4e8, kTol);  // 2 messages on one pair
  p.ops[1] = {Op::send(4, 1e6, 0), Op::wait(0)};
  p.ops[3] = {};
  p.ops[4] = {Op::recv(1, 1e6, 0), Op::wait(0)};
  EXPECT_NEAR(simulate(p, m).time, 2e-5 + 1e6 / 4e8, kTol);  // two pairs: each at the cap
  m.pair_bandwidth = 0;
  EXPECT_NEAR(simulate(p, m).time, 2e-5 + 1e6 / 1e9, kTol);  // no cap: the cards' rate

  Program c(4);
  const int a = c.group({0, 2}), b = c.group({1, 3});
  c.ops[0] = c.ops[2] = {Op::collective(Coll::AllGather, a, 1e6)};
  c.ops[1] = c.ops[3] = {Op::collective(Coll::AllGather, b, 1e6)};
  Machine m2 = machine(4, 2, 1);
  m2.pair_bandwidth = 4e8;
  EXPECT_NEAR(simulate(c, m2).time, 2e-5 + 2e6 / 4e8, kTol);
}

// A ring of 4 ranks, 3 steps: post send to r+1 and receive from r-1, compute, wait.
TEST(PlanSim, RingStepsTakeMaxOfComputeAndTransfer) {
  const int P = 4;
  const double bytes = 4e5, flops = 3e8;  // intra transfer 2 µs + 40 µs; compute 300 µs
  Program p(P);
  for (int r = 0; r < P; ++r)
    for (int s = 0; s < P - 1; ++s) {
      p.ops[r].push_back(Op::send((r + 1) % P, bytes, 2 * s));
      p.ops[r].push_back(Op::recv((r + P - 1) % P, bytes, 2 * s + 1));
      p.ops[r].push_back(Op::compute(Work::Gemm, flops));
      p.ops[r].push_back(Op::wait(2 * s));
      p.ops[r].push_back(Op::wait(2 * s + 1));
    }
  // One node: every step is compute bound.
  EXPECT_NEAR(simulate(p, machine(P, 4, 4)).time, 3 * 3e-4, kTol);
  // Two nodes of 2, one card each node: ranks 1->2 and 3->0 cross, one flow per card direction:
  // 20 µs + 0.4 ms > 0.3 ms, so each step waits for the crossing transfer.
  EXPECT_NEAR(simulate(p, machine(P, 2, 2)).time, 3 * (2e-5 + 4e-4), kTol);
}

// Open MPI's all-gather below 32 ranks: recursive doubling (a power of two) or Bruck's.
TEST(PlanSim, AllGatherByDoublingAndRingAllReduce) {
  const double m_bytes = 1e6;
  Program p(4);
  int g = p.group({0, 1, 2, 3});
  for (int r = 0; r < 4; ++r) p.ops[r] = {Op::collective(Coll::AllGather, g, m_bytes)};
  // One node: partner r^1 with 1 MB, then r^2 with 2 MB.
  auto one = simulate(p, machine(4, 4, 4));
  EXPECT_NEAR(one.time, (2e-6 + 1e-4) + (2e-6 + 2e-4), kTol);
  EXPECT_DOUBLE_EQ(one.ranks[0].coll_bytes, 3e6);  // (n-1)/n of the 4 MB result
  // Two nodes of 2, a card per rank: the second step crosses, 0<->2 and 1<->3 both ways, each
  // card at full rate both ways; where the directions share the card, at half rate.
  auto two = simulate(p, machine(4, 2, 1));
  EXPECT_NEAR(two.time, (2e-6 + 1e-4) + (2e-5 + 2e6 / 1e9), kTol);
  EXPECT_DOUBLE_EQ(two.ranks[0].inter_bytes, 2e6);
  EXPECT_NEAR(simulate(p, machine(4, 2, 1, true)).time, (2e-6 + 1e-4) + (2e-5 + 2 * 2e6 / 1e9),
              kTol);

  // Three ranks (Bruck): to r-1 one block, then to r-2 one block; one node.
  Program b(3);
  g = b.group({0, 1, 2});
  for (int r = 0; r < 3; ++r) b.ops[r] = {Op::collective(Coll::AllGather, g, m_bytes)};
  EXPECT_NEAR(simulate(b, machine(3, 3, 3)).time, 2 * (2e-6 + 1e-4), kTol);

  Program q(4);
  g = q.group({0, 1, 2, 3});
  for (int r = 0; r < 4; ++r) q.ops[r] = {Op::collective(Coll::AllReduce, g, 4e6)};
  auto ar = simulate(q, machine(4, 4, 4));
  EXPECT_NEAR(ar.time, 6 * (2e-6 + 1e6 / 1e10), kTol);  // 2(n-1) steps of S/n
  EXPECT_DOUBLE_EQ(ar.ranks[2].coll_bytes, 6e6);        // 2(n-1)/n of 4 MB
}

// Where the directions share the cards (shared_duplex), two ranks of different nodes sending to
// each other at once get half their cards each way, and a card that sends to one rank and
// receives from another carries both at its full rate; full duplex cards carry both at full rate.
TEST(PlanSim, BothWaysBetweenTwoRanksWhereTheDirectionsShare) {
  Program p(6);
  p.ops[0] = {Op::send(2, 1e6, 0), Op::recv(2, 1e6, 1), Op::wait(0), Op::wait(1)};
  p.ops[2] = {Op::send(0, 1e6, 0), Op::recv(0, 1e6, 1), Op::wait(0), Op::wait(1)};
  EXPECT_NEAR(simulate(p, machine(6, 2, 1, true)).time, 2e-5 + 2e6 / 1e9, kTol);
  EXPECT_NEAR(simulate(p, machine(6, 2, 1)).time, 2e-5 + 1e6 / 1e9, kTol);
  Program q(6);
  q.ops[0] = {Op::send(2, 1e6, 0), Op::recv(4, 1e6, 1), Op::wait(0), Op::wait(1)};
  q.ops[2] = {Op::recv(0, 1e6, 0), Op::wait(0)};
  q.ops[4] = {Op::send(0, 1e6, 0), Op::wait(0)};
  EXPECT_NEAR(simulate(q, machine(6, 2, 1, true)).time, 2e-5 + 1e6 / 1e9, kTol);
}

// A share of the other direction (duplex_sharing s, in (0, 1)): the exchange moves at 1 / (1 + s)
// of the card each way; a card that sends to one rank and receives from another is not slowed.
TEST(PlanSim, BothWaysTakesItsShareOfTheOtherDirection) {
  for (double s : {0.25, 0.5, 0.8}) {
    Machine m = machine(6, 2, 1);
    m.duplex_sharing = s;
    Program p(6);
    p.ops[0] = {Op::send(2, 1e6, 0), Op::recv(2, 1e6, 1), Op::wait(0), Op::wait(1)};
    p.ops[2] = {Op::send(0, 1e6, 0), Op::recv(0, 1e6, 1), Op::wait(0), Op::wait(1)};
    EXPECT_NEAR(simulate(p, m).time, 2e-5 + (1 + s) * 1e6 / 1e9, kTol) << s;
    Program q(6);
    q.ops[0] = {Op::send(2, 1e6, 0), Op::recv(4, 1e6, 1), Op::wait(0), Op::wait(1)};
    q.ops[2] = {Op::recv(0, 1e6, 0), Op::wait(0)};
    q.ops[4] = {Op::send(0, 1e6, 0), Op::wait(0)};
    EXPECT_NEAR(simulate(q, m).time, 2e-5 + 1e6 / 1e9, kTol) << s;
    // A one-way message of half the size beside the exchange, on node 0's card out: the card's
    // out direction carries it and the exchange (1 + s shares) until it ends.
    Program r(6);
    r.ops[0] = {Op::send(2, 1e6, 0), Op::recv(2, 1e6, 1), Op::send(4, 5e5, 2),
                Op::wait(0),         Op::wait(1),         Op::wait(2)};
    r.ops[2] = {Op::send(0, 1e6, 0), Op::recv(0, 1e6, 1), Op::wait(0), Op::wait(1)};
    r.ops[4] = {Op::recv(0, 5e5, 2), Op::wait(2)};
    // Node 0's out port: the exchange's flow (1), its share of the reverse flow (s), the one-way
    // flow (1): each at 1e9 / (2 + s) until the one-way flow's 5e5 bytes are through.
    const double t1 = 5e5 * (2 + s) / 1e9;
    // Then the exchange's flows: 1e6 - 1e9 t1 / (2 + s) bytes left each, at 1e9 / (1 + s).
    const double left = 1e6 - 1e9 * t1 / (2 + s);
    EXPECT_NEAR(simulate(r, m).time, 2e-5 + t1 + left * (1 + s) / 1e9, 1e-9) << s;
  }
}

// Two pairs {0,2} and {1,3} across 2 nodes gather at once: both flows leave node 0's card. Where
// the directions share the cards (each gather an exchange both ways), a card also carries the
// acknowledgements of what comes in: twice the time.
TEST(PlanSim, ConcurrentCollectivesShareTheCard) {
  Program p(4);
  int a = p.group({0, 2}), b = p.group({1, 3});
  p.ops[0] = p.ops[2] = {Op::collective(Coll::AllGather, a, 1e6)};
  p.ops[1] = p.ops[3] = {Op::collective(Coll::AllGather, b, 1e6)};
  EXPECT_NEAR(simulate(p, machine(4, 2, 2)).time, 2e-5 + 2e6 / 1e9, kTol);
  EXPECT_NEAR(simulate(p, machine(4, 2, 1)).time, 2e-5 + 1e6 / 1e9, kTol);
  EXPECT_NEAR(simulate(p, machine(4, 2, 2, true)).time, 2e-5 + 4e6 / 1e9, kTol);
  EXPECT_NEAR(simulate(p, machine(4, 2, 1, true)).time, 2e-5 + 2e6 / 1e9, kTol);
}

// Pairwise all-to-all over 4 ranks on 2 nodes (one card each; Open MPI's choice below 8 ranks
// for 512 KB to 1 MB per peer): shift 1 crosses once per card, shift 2 twice (0->2 and 1->3 share
// node 0's card; where the directions share it, 0<->2 and 1<->3 both ways make it 4), shift 3
// once.
TEST(PlanSim, AllToAllPairwiseSteps) {
  Program p(4);
  int g = p.group({0, 1, 2, 3});
  for (int r = 0; r < 4; ++r) p.ops[r] = {Op::collective(Coll::AllToAll, g, 1e6)};
  auto r = simulate(p, machine(4, 2, 2));
  EXPECT_NEAR(r.time, (2e-5 + 1e-3) + (2e-5 + 2e-3) + (2e-5 + 1e-3), kTol);
  EXPECT_DOUBLE_EQ(r.ranks[1].coll_bytes, 3e6);
  EXPECT_DOUBLE_EQ(r.ranks[1].inter_bytes, 2e6);  // to ranks 2 and 3, not to rank 0
  EXPECT_NEAR(simulate(p, machine(4, 2, 2, true)).time,
              (2e-5 + 1e-3) + (2e-5 + 4e-3) + (2e-5 + 1e-3), kTol);
}

// Every message at once (Open MPI's linear all-to-all, below 8 ranks for 64 to 512 KB per peer),
// a card per rank on 2 nodes: rank 0's card sends to 2 and 3 at once; where the directions share
// it, it also carries the acknowledgements of what they send back: 4 shares.
TEST(PlanSim, AllToAllAllAtOnce) {
  Program p(4);
  int g = p.group({0, 1, 2, 3});
  for (int r = 0; r < 4; ++r) p.ops[r] = {Op::collective(Coll::AllToAll, g, 4e5)};
  EXPECT_EQ(collective_steps(Coll::AllToAll, 4, 4e5).size(), 1u);
  EXPECT_NEAR(simulate(p, machine(4, 2, 1)).time, 2e-5 + 2 * 4e5 / 1e9, kTol);
  EXPECT_NEAR(simulate(p, machine(4, 2, 1, true)).time, 2e-5 + 4 * 4e5 / 1e9, kTol);
}

TEST(PlanSim, CollectiveStartsWhenTheLastMemberArrives) {
  Program p(2);
  int g = p.group({0, 1});
  p.ops[0] = {Op::compute(Work::Gemm, 1e9), Op::collective(Coll::AllGather, g, 1e6)};
  p.ops[1] = {Op::collective(Coll::AllGather, g, 1e6)};
  auto r = simulate(p, machine(2, 2, 2));
  EXPECT_NEAR(r.ranks[0].finish, 1e-3 + 2e-6 + 1e-4, kTol);
  EXPECT_NEAR(r.ranks[1].finish, 1e-3 + 2e-6 + 1e-4, kTol);
}

// The spans of a simulated run (plan --trace): every op of every rank once, at the times the
// closed forms give; a rank's sequential ops never overlap.
TEST(PlanSim, SpansCoverEveryOpOnce) {
  Program p(2);
  p.ops[0] = {Op::send(1, 1e6, 0), Op::compute(Work::Gemm, 1e9), Op::wait(0)};
  p.ops[1] = {Op::recv(0, 1e6, 0), Op::wait(0), Op::compute(Work::Gemm, 1e9)};
  const int g = p.group({0, 1});
  for (int r = 0; r < 2; ++r) p.ops[r].push_back(Op::collective(Coll::AllReduce, g, 4e6));
  std::vector<SimSpan> spans;
  const auto res = simulate(p, machine(2, 1, 1), &spans);
  std::map<std::pair<int, int>, SimSpan> seen;
  for (const auto& s : spans) {
    EXPECT_TRUE(seen.emplace(std::make_pair(s.rank, s.op), s).second) << s.rank << " " << s.op;
    EXPECT_LE(s.t0, s.t1);
  }
  EXPECT_EQ(seen.size(), 8u);
  auto at = [&](int rank, int op) { return seen[std::make_pair(rank, op)]; };
  const double msg = 2e-5 + 1e6 / 1e9;                // 1.02 ms
  EXPECT_NEAR(at(0, 0).t1, msg, kTol);                // send: post to completion
  EXPECT_NEAR(at(1, 0).t1, msg, kTol);                // recv
  EXPECT_NEAR(at(0, 1).t1, 1e-3, kTol);               // compute 1 GFLOP at 1 TFLOP/s
  EXPECT_NEAR(at(0, 2).t0, 1e-3, kTol);               // rank 0 waits from 1 ms ...
  EXPECT_NEAR(at(0, 2).t1, msg, kTol);                // ... to the completion
  EXPECT_NEAR(at(1, 1).t1 - at(1, 1).t0, msg, kTol);  // rank 1 waits the whole message
  EXPECT_NEAR(at(0, 3).t0, msg, kTol);                // rank 0 reaches the all-reduce first ...
  EXPECT_NEAR(at(0, 3).t1, res.time, kTol);           // ... both leave it at the end
  EXPECT_NEAR(at(1, 3).t0, msg + 1e-3, kTol);
  for (int r = 0; r < 2; ++r) EXPECT_LE(at(r, 2).t1, at(r, 3).t0 + kTol) << r;
}

TEST(PlanSim, MalformedProgramsAreErrors) {
  Program dead(2);  // both wait for a receive whose send comes after the wait
  dead.ops[0] = {Op::recv(1, 8, 0), Op::wait(0), Op::send(1, 8, 1), Op::wait(1)};
  dead.ops[1] = {Op::recv(0, 8, 0), Op::wait(0), Op::send(0, 8, 1), Op::wait(1)};
  EXPECT_THROW(simulate(dead, machine(2, 2, 2)), Error);
  Program lost(2);
  lost.ops[0] = {Op::send(1, 8, 0)};
  EXPECT_THROW(simulate(lost, machine(2, 2, 2)), Error);
  Program mismatch(2);
  mismatch.ops[0] = {Op::send(1, 8, 0), Op::wait(0)};
  mismatch.ops[1] = {Op::recv(0, 16, 0), Op::wait(0)};
  EXPECT_THROW(simulate(mismatch, machine(2, 2, 2)), Error);
}

}  // namespace
}  // namespace wallfacer::plan

namespace wallfacer::plan {
namespace {

TEST(PlanCalibrate, FitRecoversLatencyAndBandwidth) {
  std::vector<double> b, t;
  for (double x = 8; x <= 1 << 24; x *= 4) {
    b.push_back(x);
    t.push_back(3e-6 + x / 5e9);
  }
  Link l = fit_link(b, t);
  EXPECT_NEAR(l.latency, 3e-6, 1e-12);
  EXPECT_NEAR(l.bandwidth, 5e9, 1e-3);
  // Noise of a few percent on every sample keeps both within 10%.
  for (size_t i = 0; i < t.size(); ++i) t[i] *= i % 2 ? 1.03 : 0.97;
  l = fit_link(b, t);
  EXPECT_NEAR(l.latency, 3e-6, 3e-7);
  EXPECT_NEAR(l.bandwidth, 5e9, 5e8);
  EXPECT_THROW(fit_link({8}, {1e-6}), Error);
}

TEST(PlanCalibrate, FitLinkIgnoresSlowSmallMessages) {
  // A loaded machine: some small messages waited out a scheduler slice (4 ms), slower than the
  // largest message. A message is never slower than a larger one, so these samples are lowered to
  // the fastest larger one and the link is still found.
  std::vector<double> b, t;
  for (double x = 4; x <= 16 * 1048576.0; x *= 4) {
    b.push_back(x);
    t.push_back(2e-6 + x / 4e9);
  }
  std::vector<double> loaded = t;
  loaded[1] = loaded[4] = 4e-3;
  const Link l = fit_link(b, loaded);
  EXPECT_NEAR(l.bandwidth, 4e9, 1e-3);
  EXPECT_NEAR(l.latency, 2e-6, 1e-9);
  // Times that do not grow with the size at all: an error that says to measure again.
  try {
    fit_link({4, 4096, 4194304}, {5e-3, 5e-3, 5e-3});
    ADD_FAILURE() << "flat times accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("too busy to measure"), std::string::npos) << e.what();
  }
}

TEST(PlanCalibrate, DevicesPerNic) {
  // 4 senders: together they get what one gets alone -> one card for 4 devices; each gets its own
  // rate -> a card each; twice one's rate -> 2 devices per card.
  EXPECT_EQ(devices_per_nic(4, 1e9, 1e9, 4), 4);
  EXPECT_EQ(devices_per_nic(4, 1e9, 4e9, 4), 1);
  EXPECT_EQ(devices_per_nic(4, 1e9, 2e9, 4), 2);
  EXPECT_EQ(devices_per_nic(3, 1e9, 1e9, 4), 2);  // 3 rounded down to a divisor of 4
  EXPECT_EQ(devices_per_nic(1, 1e9, 1e9, 8), 8);  // one sender: nothing measured
  EXPECT_TRUE(pair_capped(3, 1e8, 2.5e8));
  EXPECT_FALSE(pair_capped(3, 1e8, 1.1e8));
  EXPECT_FALSE(pair_capped(1, 1e8, 5e8));
}

// The duplex share fitted to measured collectives: bisection where the prediction grows with the
// share, clamped to [0, 1] where the measured time lies outside what the shares predict.
TEST(PlanCalibrate, DuplexSharingFittedToTheMeasuredTime) {
  auto linear = [](double s) { return 2.0 + 2.0 * s; };  // full duplex 2 s, a full share 4 s
  EXPECT_NEAR(fit_duplex_sharing(linear, 3.0), 0.5, 1e-9);
  EXPECT_NEAR(fit_duplex_sharing(linear, 2.5), 0.25, 1e-9);
  EXPECT_EQ(fit_duplex_sharing(linear, 1.5), 0.0);               // faster than full duplex
  EXPECT_EQ(fit_duplex_sharing(linear, 5.0), 1.0);               // slower than a full share
  auto curved = [](double s) { return 1.0 / (1.0 - 0.5 * s); };  // 1 s to 2 s
  EXPECT_NEAR(fit_duplex_sharing(curved, 1.6), 0.75, 1e-9);
}

// A card that lets a message's first bytes through at a burst rate: the ping-pong's fit is above
// what long messages stream at, and the lower, streaming rate is the bandwidth; the fastest of the
// streaming probes counts (a slower one lost its core); none measured, the fit stands.
TEST(PlanCalibrate, StreamingBandwidthBelowTheFit) {
  EXPECT_DOUBLE_EQ(streaming_bandwidth(6.56e6, {5.99e6, 6.03e6}), 6.03e6);
  EXPECT_DOUBLE_EQ(streaming_bandwidth(6.56e6, {5.99e6, 0}), 5.99e6);
  EXPECT_DOUBLE_EQ(streaming_bandwidth(6.0e6, {6.5e6}), 6.0e6);  // the fit is lower: kept
  EXPECT_DOUBLE_EQ(streaming_bandwidth(6.0e6, {0, 0}), 6.0e6);
  EXPECT_DOUBLE_EQ(streaming_bandwidth(6.0e6, {}), 6.0e6);
}

TEST(Stats, Median) {
  EXPECT_DOUBLE_EQ(median({3, 1, 2}), 2);
  EXPECT_DOUBLE_EQ(median({4, 1, 3, 2}), 2.5);
  EXPECT_THROW(median({}), Error);
}

}  // namespace
}  // namespace wallfacer::plan
