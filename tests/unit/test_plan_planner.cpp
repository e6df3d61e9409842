// The planner against closed forms: α–β times of the double-buffered ring written out by hand,
// the schedule volumes of seqpar's formulas, and a single-rank training step computed by hand.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <string>

#include "wallfacer/core/error.h"
#include "wallfacer/plan/attention_program.h"
#include "wallfacer/plan/planner.h"
#include "wallfacer/plan/report.h"
#include "wallfacer/seqpar/schedule.h"

namespace wallfacer::plan {
namespace {

Cluster toy_cluster(int nodes, int per_node, int per_nic) {
  Cluster c;
  c.name = "toy";
  c.nodes = nodes;
  c.devices_per_node = per_node;
  c.devices_per_nic = per_nic;
  c.gemm_flops = 2e12;
  c.attention_flops = 1e12;
  c.memory = 64e9;
  c.dtype_bytes = 4;
  c.intra = {2e10, 3e-6};
  c.inter = {1e9, 2e-5};
  return c;
}

PlanInput input(Cluster cl, const char* model_toml, int64_t seq, int gpus) {
  PlanInput in;
  in.cluster = std::move(cl);
  in.model = parse_model(model_toml, "m");
  in.seq = seq;
  in.gpus = gpus;
  return in;
}

std::vector<int> identity(int P) {
  std::vector<int> d(P);
  for (int i = 0; i < P; ++i) d[i] = i;
  return d;
}

seqpar::AttnConfig attn(seqpar::Strategy s, int teams, int64_t seq, bool causal) {
  seqpar::AttnConfig c;
  c.strategy = s;
  c.teams = teams;
  c.batch = 1;
  c.seq = seq;
  c.heads = 4;
  c.kv_heads = 4;
  c.head_dim = 32;
  c.causal = causal;
  return c;
}

// Ring forward on P ranks of one node, full mask: P steps of n x n blocks, each of the first P-1
// hidden behind the transfer of the next K,V block or not: (P-1) max(F/R, t_kv) + F/R.
TEST(PlanPlanner, RingForwardIsMaxOfComputeAndTransferPerStep) {
  for (int P : {2, 4}) {
    for (int64_t seq : {int64_t(512), int64_t(4096)}) {
      Cluster cl = toy_cluster(1, P, P);
      auto a = predict_attention(cl, attn(seqpar::Strategy::Ring, 1, seq, false), P, identity(P));
      const double n = double(seq) / P, H = 4, D = 32;
      const double F = 4 * n * n * H * D / cl.attention_flops;
      const double t_kv = 3e-6 + n * 2 * H * D * 4 / 2e10;
      EXPECT_NEAR(a.fwd_s, (P - 1) * std::max(F, t_kv) + F, 1e-12) << P << " " << seq;
      EXPECT_NEAR(a.exposed_fwd_s, (P - 1) * std::max(0.0, t_kv - F), 1e-12);
      EXPECT_DOUBLE_EQ(a.p2p_bytes > 0, true);
    }
  }
}

// Causal work is charged by the kernel's tiles when the cluster names them: one rank, causal
// n x n: forward 4 H D flops per computed pair at the forward rate, backward 10 at the backward
// rate. With 128 x 256 tiles and n = 512: query tiles 0,1 compute one key tile, 2,3 two:
// 2 * 128 * 256 + 2 * 128 * 512 = 196608 pairs (131328 kept).
TEST(PlanPlanner, CausalWorkCountsWholeTilesAndSeparateRates) {
  Cluster cl = toy_cluster(1, 1, 1);
  cl.attention_fwd_flops = 1e12;
  cl.attention_bwd_flops = 0.5e12;
  const double H = 4, D = 32;
  auto a = predict_attention(cl, attn(seqpar::Strategy::Ring, 1, 512, true), 1, identity(1));
  EXPECT_NEAR(a.fwd_s, 4 * 131328.0 * H * D / 1e12, 1e-15);
  EXPECT_NEAR(a.bwd_s, 10 * 131328.0 * H * D / 0.5e12, 1e-15);
  cl.attention_tile_q = 128;
  cl.attention_tile_k = 256;
  a = predict_attention(cl, attn(seqpar::Strategy::Ring, 1, 512, true), 1, identity(1));
  EXPECT_NEAR(a.fwd_s, 4 * 196608.0 * H * D / 1e12, 1e-15);
  EXPECT_NEAR(a.bwd_s, 10 * 196608.0 * H * D / 0.5e12, 1e-15);
  // Full attention has no partial tiles.
  a = predict_attention(cl, attn(seqpar::Strategy::Ring, 1, 512, false), 1, identity(1));
  EXPECT_NEAR(a.fwd_s, 4 * 512.0 * 512 * H * D / 1e12, 1e-15);
}

// Across two nodes (one rank each) the same ring is bound by the network link.
TEST(PlanPlanner, RingForwardAcrossNodesUsesTheNetworkLink) {
  Cluster cl = toy_cluster(2, 1, 1);
  auto a = predict_attention(cl, attn(seqpar::Strategy::Ring, 1, 4096, false), 2, identity(2));
  const double n = 2048, H = 4, D = 32;
  const double F = 4 * n * n * H * D / 1e12, t_kv = 2e-5 + n * 2 * H * D * 4 / 1e9;
  EXPECT_NEAR(a.fwd_s, std::max(F, t_kv) + F, 1e-12);
  EXPECT_DOUBLE_EQ(a.inter_bytes, a.p2p_bytes + a.coll_bytes);
}

// The bytes the simulator sees each rank send equal seqpar's closed-form volumes (4-byte elements).
TEST(PlanPlanner, ProgramVolumesEqualTheScheduleFormulas) {
  struct Case {
    seqpar::Strategy s;
    int C, P;
    bool causal;
  };
  for (Case k :
       {Case{seqpar::Strategy::Ring, 1, 4, false}, Case{seqpar::Strategy::Zigzag, 1, 4, true},
        Case{seqpar::Strategy::WallFacer, 2, 8, true},
        Case{seqpar::Strategy::WallFacer, 2, 16, false},
        Case{seqpar::Strategy::Ulysses, 1, 4, true}}) {
    auto cfg = attn(k.s, k.C, 64 * k.P, k.causal);
    Cluster cl = toy_cluster(1, k.P, k.P);
    Machine m = Machine::from(cl, identity(k.P));
    for (bool bwd : {false, true}) {
      SimResult r = simulate(attention_program(cfg, k.P, bwd), m);
      for (int rank = 0; rank < k.P; ++rank) {
        auto f = seqpar::formula_totals(cfg, k.P, rank);
        EXPECT_DOUBLE_EQ(r.ranks[rank].p2p_bytes, double(bwd ? f.p2p_bytes_bwd : f.p2p_bytes_fwd))
            << int(k.s) << " C=" << k.C << " P=" << k.P << " rank " << rank << " bwd " << bwd;
        EXPECT_DOUBLE_EQ(r.ranks[rank].coll_bytes,
                         double(bwd ? f.coll_bytes_bwd : f.coll_bytes_fwd));
      }
    }
  }
}

// Under the causal mask alone (the contiguous ring, both travelling sides of the backward), with a
// sliding window and with documents the schedules skip hops and send gradients straight home;
// the simulator replays them to the end (every message paired) and counts each rank's bytes as
// the schedule does, and for the contiguous ring as the closed form does.
TEST(PlanPlanner, ProgramVolumesWithSkippedHops) {
  struct Case {
    seqpar::Strategy s;
    int C, P, kv_heads;
    int64_t window;
    bool docs;
  };
  for (Case k : {Case{seqpar::Strategy::Ring, 1, 8, 1, 0, false},
                 Case{seqpar::Strategy::Ring, 1, 8, 4, 0, false},
                 Case{seqpar::Strategy::Ring, 1, 8, 1, 40, false},
                 Case{seqpar::Strategy::Ring, 1, 8, 4, 100, false},
                 Case{seqpar::Strategy::Ring, 1, 2, 4, 40, false},
                 Case{seqpar::Strategy::Ring, 1, 8, 1, 0, true},
                 Case{seqpar::Strategy::Zigzag, 1, 4, 2, 40, true},
                 Case{seqpar::Strategy::WallFacer, 2, 8, 2, 100, true}}) {
    auto cfg = attn(k.s, k.C, 64 * k.P, true);
    cfg.kv_heads = k.kv_heads;
    cfg.window = k.window;
    if (k.docs) cfg.doc_lengths = {1, int64_t(64 * k.P / 2 - 1), int64_t(64 * k.P / 2)};
    Cluster cl = toy_cluster(1, k.P, k.P);
    Machine m = Machine::from(cl, identity(k.P));
    for (bool bwd : {false, true}) {
      SimResult r = simulate(attention_program(cfg, k.P, bwd), m);
      for (int rank = 0; rank < k.P; ++rank) {
        const auto t = seqpar::schedule_totals(seqpar::make_schedule(cfg, k.P, rank));
        const std::string what = fmt::format("{} C={} P={} window {} rank {} bwd {}", int(k.s), k.C,
                                             k.P, k.window, rank, bwd);
        EXPECT_DOUBLE_EQ(r.ranks[rank].p2p_bytes, double(bwd ? t.p2p_bytes_bwd : t.p2p_bytes_fwd))
            << what;
        if (k.s == seqpar::Strategy::Ring && !k.docs) {
          const auto f = seqpar::formula_totals(cfg, k.P, rank);
          EXPECT_EQ(bwd ? t.p2p_bytes_bwd : t.p2p_bytes_fwd,
                    bwd ? f.p2p_bytes_bwd : f.p2p_bytes_fwd)
              << what;
        }
      }
    }
  }
}

// WallFacer-2 on 4 nodes of 2 (P = 8): teams inside a node; compare the bytes leaving a node with
// ring's. Ring, full mask, rank 1 -> 2 carries P-1 K,V blocks forward.
TEST(PlanPlanner, InterNodeBytesOfRingAndHybrid) {
  Cluster cl = toy_cluster(4, 2, 2);
  const int P = 8;
  auto cfg = attn(seqpar::Strategy::Ring, 1, 1024, false);
  auto ring = predict_attention(cl, cfg, P, identity(P));
  const double kv = 128.0 * 2 * 4 * 32 * 4;  // one rank's K,V block in bytes
  Program fwd = attention_program(cfg, P, false);
  SimResult r = simulate(fwd, Machine::from(cl, identity(P)));
  EXPECT_DOUBLE_EQ(r.ranks[1].inter_bytes, (P - 1) * kv);
  EXPECT_DOUBLE_EQ(r.ranks[0].inter_bytes, 0);
  EXPECT_GT(ring.inter_bytes, 0);
  // Ulysses 2 x ring 4, all-to-all pairs inside a node: only the ring of 4 crosses nodes, with
  // half the heads: each crossing rank sends 3 blocks of half the K,V of 256 rows.
  auto hybrid = cfg;
  hybrid.ulysses = 2;
  SimResult h = simulate(attention_program(hybrid, P, false), Machine::from(cl, identity(P)));
  double most = 0;
  for (const auto& rt : h.ranks) most = std::max(most, rt.inter_bytes);
  EXPECT_DOUBLE_EQ(most, 3 * 256.0 * 2 * 2 * 32 * 4);
}

// One rank: nothing to communicate; the step is compute written out by hand.
TEST(PlanPlanner, SingleRankStepByHand) {
  PlanInput in = input(toy_cluster(1, 1, 1),
                       "[model]\nlayers = 3\ndim = 128\nheads = 4\ncausal = false\n", 1024, 1);
  Prediction p = predict(in, {seqpar::Strategy::Ring, 1, 1, Placement::Default});
  ASSERT_TRUE(p.feasible) << p.reason;
  const double N = 1024, h = 128, L = 3;
  const double attn_f = 4 * N * N * h / 1e12, attn_b = 10 * N * N * h / 1e12;
  const double dense = N * 24 * h * h / 2e12;  // forward of one layer
  const double head = 3 * N * 2 * h * 257 / 2e12;
  const double step = L * (4 * dense + attn_f + attn_b) + head;
  EXPECT_NEAR(p.step_s, step, 1e-12);
  EXPECT_NEAR(p.tokens_per_s, N / step, 1e-6);
  EXPECT_NEAR(p.exposed_comm_s, 0, 1e-15);
  EXPECT_DOUBLE_EQ(p.grad_sync_s, 0);
  // Memory: fp32 params + grads + Adam m, v (16 bytes per parameter), per layer the checkpoint
  // (input, O: 2 h floats, LSE: 4 floats per token), working set of one layer and its gradients
  // (2 x (6h + 2h + 8h) floats + 4 LSE floats per token), logits and their gradient, and the
  // schedule's scratch at P = 1: packed K,V (2h per token), the query package (2h + 2 * heads),
  // the dK,dV accumulator (2h).
  const double Np = double(param_count(in.model));
  const double mem = 16 * Np + L * N * (2 * h * 4 + 4 * 4) + 2 * N * ((16 * h) * 4 + 4 * 4) +
                     2 * N * 257 * 4 + N * (2 * h + 2 * h + 2 * 4 + 2 * h) * 4;
  EXPECT_NEAR(p.memory_bytes, mem, 1e-3);
}

TEST(PlanPlanner, RanksFeasibleFirstAndExplainsTheRest) {
  PlanInput in =
      input(toy_cluster(2, 4, 4), "[model]\nlayers = 2\ndim = 192\nheads = 6\n", 2048, 8);
  auto preds = plan_all(in);
  ASSERT_GE(preds.size(), 4u);
  bool seen_infeasible = false;
  double last = 1e300;
  for (const auto& p : preds) {
    if (!p.feasible) {
      seen_infeasible = true;
      EXPECT_FALSE(p.reason.empty());
      continue;
    }
    EXPECT_FALSE(seen_infeasible) << "feasible after infeasible: " << p.cand.label();
    EXPECT_LE(p.tokens_per_s, last);
    last = p.tokens_per_s;
  }
  auto find = [&](const std::string& label) -> Prediction {
    auto it = std::find_if(preds.begin(), preds.end(),
                           [&](const Prediction& p) { return p.cand.label() == label; });
    EXPECT_NE(it, preds.end()) << label;
    return *it;
  };
  EXPECT_FALSE(find("ulysses").feasible);  // 6 heads over 8 ranks
  EXPECT_NE(find("ulysses").reason.find("head"), std::string::npos) << find("ulysses").reason;
  EXPECT_TRUE(find("wallfacer C=2 team-intra").feasible);
  EXPECT_TRUE(find("ulysses2 x zigzag team-intra").feasible);
  EXPECT_FALSE(find("ulysses4 x zigzag team-intra").feasible);  // 4 does not divide 6 heads
  // A device too small for the model.
  in.cluster.memory = 1e6;
  preds = plan_all(in);
  for (const auto& p : preds) EXPECT_FALSE(p.feasible) << p.cand.label();
  EXPECT_NE(find("ring").reason.find("memory"), std::string::npos) << find("ring").reason;
  auto j = plan_json(in, preds);
  EXPECT_TRUE(j["best"].is_null());
}

TEST(PlanPlanner, JsonCarriesTheDocumentedKeys) {
  PlanInput in =
      input(toy_cluster(1, 4, 4), "[model]\nlayers = 1\ndim = 128\nheads = 4\n", 1024, 4);
  auto j = plan_json(in, plan_all(in));
  ASSERT_TRUE(j["configs"].is_array());
  for (const char* key : {"strategy", "teams", "placement", "tokens_per_s", "step_s", "memory_gib",
                          "memory_bytes_per_rank", "attention_memory_bytes_per_rank", "feasible",
                          "reason"})
    EXPECT_TRUE(j["configs"][0].contains(key)) << key;
  EXPECT_EQ(j["best"]["label"], j["configs"][0]["label"]);
  EXPECT_DOUBLE_EQ(j["configs"][0]["memory_bytes_per_rank"].get<double>() / (1 << 30),
                   j["configs"][0]["memory_gib"].get<double>());
}

// The attention's memory on one rank (GQA: H = 4 query heads, 2 K,V heads of D = 32, 4-byte
// elements), per row: the caller's q, k, v, o (H + 2 + 2 + H heads of D) and the ring schedule's
// buffers: the packed K,V block (2 x 2 heads of D), its ring buffer (the same) and the backward's
// query package (q and dout, 2 x H heads of D, and the lse and delta statistics, 2 x H).
TEST(PlanPlanner, AttentionMemoryOfOneRankIsItsTensorsAndScheduleBuffers) {
  PlanInput in = input(toy_cluster(1, 1, 1),
                       "[model]\nlayers = 3\ndim = 128\nheads = 4\nkv_heads = 2\n", 1024, 1);
  const Prediction p = predict(in, {seqpar::Strategy::Ring, 1, 1, Placement::Default});
  const double tensors = (4 + 2 + 2 + 4) * 32, buffers = 2 * 2 * 32 * 2 + (2 * 4 * 32 + 2 * 4);
  EXPECT_DOUBLE_EQ(p.attention_memory_bytes, 1024.0 * (tensors + buffers) * 4);
  EXPECT_GT(p.memory_bytes, p.attention_memory_bytes);
}

TEST(PlanPlanner, TokenCounts) {
  EXPECT_EQ(parse_tokens("131072"), 131072);
  EXPECT_EQ(parse_tokens("128K"), 131072);
  EXPECT_EQ(parse_tokens("64k"), 65536);
  EXPECT_EQ(parse_tokens("1M"), 1048576);
  for (const char* bad : {"", "K", "12x", "-5", "0"}) EXPECT_THROW(parse_tokens(bad), UsageError);
}

}  // namespace
}  // namespace wallfacer::plan

namespace wallfacer::plan {
namespace {

// Each node's card: ring hops that leave the node (2 per ring of 2 nodes), and for WallFacer-2
// with a team group per node only the placement hop, counted from the layout by hand.
TEST(PlanPlanner, NodeBytesFollowTheHopsThatLeaveANode) {
  seqpar::AttnConfig cfg;
  cfg.seq = 256, cfg.heads = 2, cfg.kv_heads = 2, cfg.head_dim = 8, cfg.causal = true;
  const int P = 8;
  const std::vector<int> two_nodes{0, 0, 0, 0, 1, 1, 1, 1};
  const double n = double(cfg.seq) / P, kv_block = 2 * n * cfg.kv_heads * cfg.head_dim * 4;

  // Zigzag forward: P-1 hops of one K,V block (every rank's queries see every block); ranks 3 and
  // 7 send across.
  cfg.strategy = seqpar::Strategy::Zigzag;
  NodeBytes ring = node_bytes(cfg, P, two_nodes);
  EXPECT_DOUBLE_EQ(ring.fwd[0], (P - 1) * kv_block);
  EXPECT_DOUBLE_EQ(ring.fwd[1], (P - 1) * kv_block);
  EXPECT_DOUBLE_EQ(ring.total_fwd, 2 * (P - 1) * kv_block);
  // The contiguous causal ring: the blocks of ranks 0..3 are seen by ranks 4..7, so rank 3 passes
  // all four across; those of ranks 4..7 by no rank of node 0, so rank 7 sends nothing.
  cfg.strategy = seqpar::Strategy::Ring;
  const NodeBytes contiguous = node_bytes(cfg, P, two_nodes);
  EXPECT_DOUBLE_EQ(contiguous.fwd[0], P / 2 * kv_block);
  EXPECT_DOUBLE_EQ(contiguous.fwd[1], 0);

  cfg.strategy = seqpar::Strategy::WallFacer;
  cfg.teams = 2;
  const seqpar::WallFacerGeometry l(P, 2);
  double placement = 0;
  for (int r = 0; r < P; ++r)
    if (two_nodes[r] != two_nodes[l.placement_dst(r)]) placement += 2 * kv_block;  // C*n rows
  ASSERT_GT(placement, 0);
  const NodeBytes wf = node_bytes(cfg, P, two_nodes);
  EXPECT_DOUBLE_EQ(wf.total_fwd, placement);
  EXPECT_LT(wf.total_fwd, ring.total_fwd);
  EXPECT_LT(wf.total_bwd, ring.total_bwd);
  // One node: nothing leaves it.
  const NodeBytes one = node_bytes(cfg, P, std::vector<int>(P, 0));
  EXPECT_EQ(one.total_fwd + one.total_bwd, 0);
}

// Rails: ring on 2 nodes x 2 ranks, full mask. Every rank sends its hops to the next rank, so per
// forward and backward each rank sends T = (P-1) K,V blocks, (P-1) packages (q, dO, LSE, delta)
// and P dQ blocks. Only ranks 1 and 3 send across (to 2 and 0), only 2 and 0 receive across. With
// a card per rank, node 0's card 1 sends all of it and its card 0 receives all of it (the
// cross-node hop leaves by the sender's card and enters by the receiver's); with one card per
// node, that card does both.
TEST(PlanPlanner, CardBytesFollowTheSenderAndTheReceiverCards) {
  seqpar::AttnConfig cfg = attn(seqpar::Strategy::Ring, 1, 256, false);
  const int P = 4;
  const double n = double(cfg.seq) / P, d = cfg.heads * cfg.head_dim, H = cfg.heads;
  const double T = 4 * ((P - 1) * n * 2 * d + (P - 1) * n * (2 * d + 2 * H) + P * n * d);
  const CardBytes rails = card_bytes(cfg, P, identity(P), 2, 1);
  for (int node : {0, 1}) {
    EXPECT_EQ(rails.sent[node], (std::vector<double>{0, T})) << "node " << node;
    EXPECT_EQ(rails.received[node], (std::vector<double>{T, 0})) << "node " << node;
  }
  const CardBytes shared = card_bytes(cfg, P, identity(P), 2, 2);
  for (int node : {0, 1}) {
    EXPECT_EQ(shared.sent[node], std::vector<double>{T}) << "node " << node;
    EXPECT_EQ(shared.received[node], std::vector<double>{T}) << "node " << node;
  }
  // The node totals are node_bytes'.
  const NodeBytes nb = node_bytes(cfg, P, {0, 0, 1, 1});
  EXPECT_DOUBLE_EQ(nb.fwd[0] + nb.bwd[0], T);
  // Devices placed elsewhere: ring over devices 0, 2, 1, 3 sends 0->2, 2->1, 1->3, 3->0, all
  // across.
  const CardBytes mixed = card_bytes(cfg, P, {0, 2, 1, 3}, 2, 1);
  EXPECT_EQ(mixed.sent[0], (std::vector<double>{T, T}));
  EXPECT_EQ(mixed.received[1], (std::vector<double>{T, T}));
}

// Rails: a double ring on 4 nodes x 2 ranks, inner rings = nodes (W = 2, G = 4), full mask, 4
// heads (its backward moves the query packages). Every rank's card sends (and receives) the
// G-1 = 3 outer K,V hops of the forward, the 3 outer query-package hops of the backward and the
// 3 dQ partials sent home from other groups, the same on every card; the ring of the same config
// puts all its crossing hops on one card per node.
TEST(PlanPlanner, DoubleRingSpreadsTheCrossingHopsOverEveryCard) {
  seqpar::AttnConfig cfg = attn(seqpar::Strategy::DoubleRing, 1, 256, false);
  cfg.inner = 2;
  const int P = 8;
  const double rows = double(cfg.seq) / P, H = cfg.heads, D = cfg.head_dim;
  const double kv = 4.0 * rows * 2 * cfg.kv_heads * D;
  const double qpack = rows * H * (2 * D * 4 + 2 * 4), dq = rows * H * D * 4;
  ASSERT_FALSE(seqpar::backward_moves_kv(cfg, P));
  const double card = 3 * kv + 3 * qpack + 3 * dq;
  const CardBytes rails = card_bytes(cfg, P, identity(P), 2, 1);
  for (int node = 0; node < 4; ++node) {
    EXPECT_EQ(rails.sent[node], (std::vector<double>{card, card})) << "node " << node;
    EXPECT_EQ(rails.received[node], (std::vector<double>{card, card})) << "node " << node;
  }
  const CardBytes ring =
      card_bytes(attn(seqpar::Strategy::Ring, 1, 256, false), P, identity(P), 2, 1);
  EXPECT_EQ(ring.sent[0][0], 0);
  EXPECT_GT(ring.sent[0][1], 10 * kv);
}

}  // namespace
}  // namespace wallfacer::plan

namespace wallfacer::plan {
namespace {

// Every strategy of the table is a candidate of a causal model on 2 nodes of 4 devices, and its
// label starts with its name (after "ulysses<u> x " for a hybrid) and shows C and W where it has
// them; a config of each candidate is one seqpar accepts.
TEST(PlanPlanner, EveryStrategyIsPlannedAndLabelled) {
  PlanInput in =
      input(toy_cluster(2, 4, 4), "[model]\nlayers = 2\ndim = 256\nheads = 8\n", 8192, 8);
  in.model.causal = true;
  std::set<seqpar::Strategy> planned, hybrids;
  for (const Candidate& c : candidates(in)) {
    const seqpar::StrategyTraits& t = seqpar::traits(c.strategy);
    planned.insert(c.strategy);
    const std::string prefix = c.ulysses > 1 ? fmt::format("ulysses{} x ", c.ulysses) : "";
    if (c.ulysses > 1) hybrids.insert(c.strategy);
    const std::string label = c.label();
    EXPECT_EQ(label.rfind(fmt::format("{}{}", prefix, t.name), 0), 0u) << label;
    EXPECT_EQ(label.find(" C=") != std::string::npos, t.has_teams) << label;
    EXPECT_EQ(label.find(" W=") != std::string::npos, t.has_inner) << label;
    EXPECT_NO_THROW(
        seqpar::validate(attention_config(in.model, in.seq, c, seqpar::Dtype::fp32), in.gpus))
        << label;
  }
  for (const seqpar::StrategyTraits& t : seqpar::strategies()) {
    EXPECT_TRUE(planned.count(t.id)) << t.name << " is not planned";
    // Hybrids: a causal model's ring is the zigzag ring (the contiguous ring without the mask).
    if (t.hybrid_ring && t.id != seqpar::Strategy::Ring) {
      EXPECT_TRUE(hybrids.count(t.id)) << "ulysses x " << t.name << " is not planned";
    }
  }
}

// keep_kv: per layer one team K,V block more memory, and a backward without the placement hop;
// the planner keeps them only while the memory allows.
TEST(PlanPlanner, KeepKvCostsOneTeamBlockPerLayerAndIsDroppedWhenMemoryIsShort) {
  Cluster cl;
  cl.name = "toy";
  cl.nodes = 2, cl.devices_per_node = 4, cl.devices_per_nic = 4;
  cl.gemm_flops = 2e12, cl.attention_flops = 1e12, cl.memory = 64e9, cl.dtype_bytes = 4;
  cl.intra = {2e10, 3e-6}, cl.inter = {1e9, 2e-5};
  PlanInput in;
  in.cluster = cl;
  in.model = parse_model("[model]\nlayers = 3\ndim = 256\nheads = 4\n", "m");
  in.seq = 8192;
  in.gpus = 8;
  Candidate c{seqpar::Strategy::WallFacer, 2, 1, Placement::TeamIntra};
  const Prediction plain = predict(in, c);
  c.keep_kv = true;
  const Prediction kept = predict(in, c);
  ASSERT_TRUE(plain.feasible && kept.feasible);
  // (B, C * seq / P, 2, kv_heads, D) fp32 per layer (3 layers), as the executor holds them.
  const double block = 2.0 * (8192 / 8) * 2 * 4 * 64 * 4;
  EXPECT_DOUBLE_EQ(kept.memory_bytes - plain.memory_bytes, 3 * block);
  EXPECT_LT(kept.attn_bwd_s, plain.attn_bwd_s);
  EXPECT_LT(kept.inter_bytes, plain.inter_bytes);

  auto wallfacer = [](const std::vector<Prediction>& ps) {
    return *std::find_if(ps.begin(), ps.end(), [](const Prediction& p) {
      return p.cand.label() == "wallfacer C=2 team-intra";
    });
  };
  EXPECT_TRUE(wallfacer(plan_all(in)).cand.keep_kv);
  // Room for the plain run but not for the kept blocks: the planner drops keep_kv.
  in.cluster.memory = (plain.memory_bytes + kept.memory_bytes) / 2;
  const Prediction chosen = wallfacer(plan_all(in));
  EXPECT_TRUE(chosen.feasible);
  EXPECT_FALSE(chosen.cand.keep_kv);
}

}  // namespace
}  // namespace wallfacer::plan
