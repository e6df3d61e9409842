// Layouts and schedules of the sequence-parallel strategies, without MPI: the WallFacer-C geometry,
// coverage of every (query block, key block) pair, and the schedule counter against the closed-form
// volumes and the reference counts of tests/golden/wallfacer_counts.py.

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <numeric>
#include <set>
#include <tuple>

#include "wallfacer/core/error.h"
#include "wallfacer/seqpar/harness.h"
#include "wallfacer/seqpar/schedule.h"
#include "wallfacer/seqpar/strategy.h"

namespace wallfacer::seqpar {
namespace {

AttnConfig config(Strategy s, int64_t seq, int H, int K, int D, bool causal, int C = 1, int B = 1) {
  AttnConfig c;
  c.strategy = s;
  c.teams = C;
  c.batch = B;
  c.seq = seq;
  c.heads = H;
  c.kv_heads = K;
  c.head_dim = D;
  c.causal = causal;
  return c;
}

std::vector<std::pair<int, int>> team_grid() {
  return {{1, 1},  {2, 1},  {4, 1},  {4, 2},  {8, 1},  {8, 2},   {16, 1},  {16, 2},  {16, 4},
          {32, 2}, {64, 1}, {64, 2}, {64, 4}, {64, 8}, {128, 2}, {256, 4}, {256, 16}};
}

TEST(SeqparLayout, PlacementIsAPermutationAndItsInverse) {
  for (auto [P, C] : team_grid()) {
    WallFacerGeometry L(P, C);
    std::set<int> dsts;
    for (int r = 0; r < P; ++r) {
      dsts.insert(L.placement_dst(r));
      EXPECT_EQ(L.placement_src(L.placement_dst(r)), r) << P << " " << C;
      EXPECT_EQ(L.prev(L.next(r)), r);
      EXPECT_EQ(L.next(r) % C, r % C) << "sub-rings keep the member index";
      EXPECT_EQ(L.next(r) / (P / C), r / (P / C)) << "sub-rings stay in the team group";
      int x = r;
      for (int s = 0; s < L.G; ++s) x = L.next(x);
      EXPECT_EQ(x, r) << "a sub-ring has G ranks";
      // After placement rank r holds team (tau mod G)*C + m: the formula of the doc.
      EXPECT_EQ(L.kv_team(r, 0), L.placement_src(r) / C);
    }
    EXPECT_EQ(int(dsts.size()), P);
  }
}

TEST(SeqparLayout, EveryTeamGroupSeesEveryKVBlockOnce) {
  for (auto [P, C] : team_grid()) {
    WallFacerGeometry L(P, C);
    // Forward: team t's members together meet every KV team exactly once.
    for (int t = 0; t < L.T; ++t) {
      std::vector<int> seen;
      for (int a = 0; a < C; ++a)
        for (int s = 0; s < L.G; ++s) seen.push_back(L.kv_team(t * C + a, s));
      std::sort(seen.begin(), seen.end());
      std::vector<int> all(L.T);
      std::iota(all.begin(), all.end(), 0);
      EXPECT_EQ(seen, all) << "P=" << P << " C=" << C << " team " << t;
    }
    // Backward: every (query team, KV team) pair is computed exactly once over ranks and steps,
    // and the package the rank receives at step s is the one its predecessor had at s-1.
    std::map<std::pair<int, int>, int> count;
    for (int r = 0; r < P; ++r)
      for (int s = 0; s < L.G; ++s) {
        ++count[{L.query_team(r, s), L.kv_team(r, 0)}];
        if (s > 0) {
          EXPECT_EQ(L.query_team(r, s), L.query_team(L.prev(r), s - 1));
        }
      }
    EXPECT_EQ(int(count.size()), L.T * L.T);
    for (auto& [k, v] : count) EXPECT_EQ(v, 1);
  }
}

// A config of strategy t that runs on 8 ranks: WallFacer teams of 2, inner rings of 4.
AttnConfig config_of(const StrategyTraits& t, int64_t seq, int H, int K, int D, bool causal) {
  AttnConfig c = config(t.id, seq, H, K, D, causal, t.has_teams ? 2 : 1);
  if (t.has_inner) c.inner = 4;
  return c;
}

TEST(StrategyTable, NamesRulesAndBuildersOfEveryStrategy) {
  std::set<std::string_view> names;
  for (const StrategyTraits& t : strategies()) {
    EXPECT_EQ(&traits(t.id), &t);
    EXPECT_EQ(parse_strategy(t.name), t.id);
    EXPECT_EQ(strategy_name(t.id), t.name);
    EXPECT_TRUE(names.insert(t.name).second) << t.name;
    EXPECT_FALSE(t.summary.empty()) << t.name;
    EXPECT_NE(t.build, nullptr) << t.name;
    EXPECT_NE(t.totals, nullptr) << t.name;
    EXPECT_EQ(team_size(t.id, 3), t.has_teams ? 3 : 1);
    // The options it has not are refused.
    if (!t.has_teams) {
      AttnConfig c = config_of(t, 128, 8, 8, 4, false);
      c.teams = 2;
      EXPECT_THROW(validate(c, 8), UsageError) << t.name;
    }
    if (!t.has_inner) {
      AttnConfig c = config_of(t, 128, 8, 8, 4, false);
      c.inner = 2;
      EXPECT_THROW(validate(c, 8), UsageError) << t.name;
    }
    AttnConfig hybrid = config_of(t, 128, 8, 8, 4, false);
    hybrid.ulysses = 2;
    if (t.hybrid_ring) {
      EXPECT_NO_THROW(validate(hybrid, 8)) << t.name;
    } else {
      EXPECT_THROW(validate(hybrid, 8), UsageError) << t.name;
    }
    // Heads the ranks do not divide: refused by a strategy that splits them.
    AttnConfig few = config_of(t, 128, 4, 4, 4, false);
    if (t.splits_heads) {
      EXPECT_THROW(validate(few, 8), UsageError) << t.name;
    } else {
      EXPECT_NO_THROW(validate(few, 8)) << t.name;
    }
    for (bool causal : {false, true}) {
      EXPECT_EQ(uses_zigzag_layout(config_of(t, 128, 8, 8, 4, causal)),
                t.zigzag_layout || (causal && t.zigzag_when_causal))
          << t.name;
    }
  }
  try {
    parse_strategy("spiral");
    ADD_FAILURE() << "no error";
  } catch (const UsageError& e) {
    EXPECT_EQ(std::string(e.what()),
              "unknown strategy 'spiral': use one of ring, zigzag, ulysses, wallfacer, "
              "double-ring");
  }
  EXPECT_EQ(strategy_names(" | "), "ring | zigzag | ulysses | wallfacer | double-ring");
  EXPECT_EQ(strategy_names(", ", " or ", [](const StrategyTraits& t) { return t.hybrid_ring; }),
            "ring, zigzag or wallfacer");
}

// Every strategy of the table: the schedule of each rank sends what its closed form says.
TEST(StrategyTable, EveryStrategysScheduleMatchesItsClosedForm) {
  const int P = 8;
  for (const StrategyTraits& t : strategies()) {
    for (int K : {16, 8}) {  // grouped-query heads too (H = 16 on 8 ranks splits for Ulysses)
      const AttnConfig c = config_of(t, 128, 16, K, 4, false);
      for (int r = 0; r < P; ++r) {
        auto got = schedule_totals(make_schedule(c, P, r));
        got.flops_fwd = got.flops_bwd = 0;
        EXPECT_EQ(got, formula_totals(c, P, r)) << t.name << " K=" << K << " rank " << r;
      }
    }
  }
}

// The double ring's default W: the ranks a node holds of the P ranks (their gcd), for every
// strategy with inner rings; a W given, and every strategy without inner rings, left as they are.
TEST(StrategyTable, InnerRingLengthResolvedOnceFromTheNodes) {
  for (const StrategyTraits& t : strategies()) {
    if (!t.has_inner) {
      EXPECT_EQ(resolved_inner(t.id, 0, 16, 2), 0) << t.name;
      continue;
    }
    EXPECT_EQ(resolved_inner(t.id, 0, 16, 2), 2) << t.name;   // 8 nodes of 2
    EXPECT_EQ(resolved_inner(t.id, 0, 16, 1), 1) << t.name;   // 16 nodes of 1: a ring
    EXPECT_EQ(resolved_inner(t.id, 0, 8, 16), 8) << t.name;   // all on one node: a ring
    EXPECT_EQ(resolved_inner(t.id, 0, 12, 8), 4) << t.name;   // nodes of 8 cut 12 ranks by 4
    EXPECT_EQ(resolved_inner(t.id, 4, 16, 2), 4) << t.name;   // given: kept
  }
}

TEST(SeqparLayout, PositionsPartitionTheSequence) {
  for (const StrategyTraits& t : strategies()) {
    for (bool causal : {false, true}) {
      const int P = 8;
      auto c = config_of(t, 128, 8, 8, 4, causal);
      std::vector<int64_t> all;
      for (int r = 0; r < P; ++r) {
        auto pos = local_positions(c, P, r);
        EXPECT_EQ(int64_t(pos.size()), c.seq / P);
        all.insert(all.end(), pos.begin(), pos.end());
      }
      std::sort(all.begin(), all.end());
      for (int64_t i = 0; i < c.seq; ++i) EXPECT_EQ(all[i], i);
    }
  }
  // The zigzag layout: rank r holds half-chunks r and 2P-1-r.
  auto c = config(Strategy::Zigzag, 64, 1, 1, 4, true);
  auto pos = local_positions(c, 4, 1);
  EXPECT_EQ(pos.front(), 8);
  EXPECT_EQ(pos[7], 15);
  EXPECT_EQ(pos[8], 6 * 8);
  EXPECT_EQ(pos.back(), 7 * 8 - 1);
}

AttnConfig hybrid(Strategy s, int64_t seq, int H, int K, int u, bool causal, int B = 1) {
  auto c = config(s, seq, H, K, 8, causal, 1, B);
  c.ulysses = u;
  return c;
}

// Ulysses x ring: rank j*u + a holds rows [a*n, (a+1)*n) of ring rank j's rows.
TEST(SeqparLayout, HybridPositions) {
  using Runs = std::vector<std::vector<int64_t>>;
  auto positions = [](const AttnConfig& c, int P) {
    Runs out;
    for (int r = 0; r < P; ++r) out.push_back(local_positions(c, P, r));
    return out;
  };
  // Ulysses 2 x ring 2, 8 tokens: ring rank 0 holds 0..3, rank 1 4..7.
  EXPECT_EQ(positions(hybrid(Strategy::Ring, 8, 2, 2, 2, false), 4),
            (Runs{{0, 1}, {2, 3}, {4, 5}, {6, 7}}));
  // Ulysses 2 x zigzag 2, 16 tokens: ring rank 0 holds half-chunks 0..3 and 12..15.
  EXPECT_EQ(positions(hybrid(Strategy::Zigzag, 16, 2, 2, 2, true), 4),
            (Runs{{0, 1, 2, 3}, {12, 13, 14, 15}, {4, 5, 6, 7}, {8, 9, 10, 11}}));
  // Ulysses 3 x zigzag 2 on 6 ranks, 24 tokens: ring rank 0 holds 0..5 and 18..23; the middle
  // member's rows straddle both half-chunks.
  const auto c = hybrid(Strategy::Zigzag, 24, 3, 3, 3, true);
  EXPECT_EQ(positions(c, 6), (Runs{{0, 1, 2, 3},
                                   {4, 5, 18, 19},
                                   {20, 21, 22, 23},
                                   {6, 7, 8, 9},
                                   {10, 11, 12, 13},
                                   {14, 15, 16, 17}}));
  const auto runs = local_runs(c, 6, 1);
  ASSERT_EQ(runs.size(), 2u);
  EXPECT_EQ(runs[1].row0, 2);
  EXPECT_EQ(runs[1].pos0, 18);
}

TEST(SeqparSchedule, HybridValidate) {
  auto bad = [](AttnConfig c, int P, const char* what) {
    try {
      validate(c, P);
      ADD_FAILURE() << "accepted";
    } catch (const UsageError& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  bad(hybrid(Strategy::Ulysses, 64, 4, 4, 2, false), 4, "ring, zigzag or wallfacer");
  // Ulysses x WallFacer-C: C^2 divides the P/u ranks of the ring over the Ulysses teams.
  auto uw = [](int64_t seq, int H, int K, int u, int C, bool causal) {
    auto c = hybrid(Strategy::WallFacer, seq, H, K, u, causal);
    c.teams = C;
    return c;
  };
  bad(uw(64, 4, 4, 2, 2, false), 4, "C^2 = 4 to divide the 2 ranks of the ring over the Ulysses");
  bad(uw(64, 4, 4, 4, 2, false), 8, "C^2 = 4 to divide the 2 ranks");
  bad(uw(64, 3, 3, 2, 2, false), 8, "must divide --heads");
  bad(uw(64, 4, 1, 2, 2, false), 8, "must divide --heads");  // kv heads
  bad(uw(36, 4, 4, 2, 2, true), 8, "divisible by 8");        // causal: 2 x 4 half-chunks
  EXPECT_NO_THROW(validate(uw(64, 4, 2, 2, 2, true), 8));
  EXPECT_NO_THROW(validate(uw(64, 4, 4, 2, 2, false), 16));
  auto kept = uw(64, 4, 4, 2, 2, false);
  kept.keep_kv = true;
  EXPECT_NO_THROW(validate(kept, 8));
  kept.teams = 1;
  bad(kept, 8, "with --teams 1 places none");
  kept.strategy = Strategy::Ring;
  bad(kept, 8, "ring places none");
  bad(hybrid(Strategy::Ring, 64, 4, 4, 3, false), 6, "must divide --heads");
  bad(hybrid(Strategy::Ring, 64, 4, 2, 4, false), 8, "must divide --heads");  // kv heads
  bad(hybrid(Strategy::Ring, 64, 4, 4, 4, false), 6, "must divide the 6 ranks");
  bad(hybrid(Strategy::Ring, 64, 4, 4, 0, false), 4, "at least 1");
  bad(hybrid(Strategy::Ring, 60, 4, 4, 2, false), 8, "divisible by 8");
  bad(hybrid(Strategy::Zigzag, 18, 3, 3, 3, true), 6, "divisible by 12");
  EXPECT_NO_THROW(validate(hybrid(Strategy::Zigzag, 24, 3, 3, 3, true), 6));
}

// A hybrid's schedule sends what its closed form (Ulysses in the team plus the ring over the teams)
// says, and computes every kept (query, key) pair of its rows once, on heads/u heads (the backward
// on the ranks that hold the keys when the query packages travel: summed over the ranks). The
// contiguous causal ring's last team holds keys no other team sees: it sends no K,V forward.
TEST(SeqparSchedule, HybridTotalsEqualFormulas) {
  for (auto [P, u] : std::vector<std::pair<int, int>>{{4, 2}, {8, 2}, {8, 4}, {16, 4}, {6, 3}}) {
    for (auto [strategy, causal] :
         {std::pair{Strategy::Ring, false}, std::pair{Strategy::Ring, true},
          std::pair{Strategy::Zigzag, true}}) {
      for (int K : {12, 4}) {
        if (K % u) continue;
        auto c = hybrid(strategy, 48 * P, 12, K, u, causal, 2);
        for (Dtype d : {Dtype::fp32, Dtype::bf16}) {
          c.dtype = d;
          double fwd_sum = 0, bwd_sum = 0;
          for (int r = 0; r < P; ++r) {
            const Schedule s = make_schedule(c, P, r);
            auto got = schedule_totals(s);
            const bool last_team = strategy == Strategy::Ring && causal && r / u == P / u - 1;
            EXPECT_EQ(got.p2p_bytes_fwd > 0, !last_team);
            EXPECT_GT(got.coll_bytes_bwd, 0);
            // Forward FLOPs: 4 per kept pair, head and head dim, of this rank's team rows against
            // the whole sequence, on heads/u heads.
            int64_t pairs = 0;
            for (int b = 0; b < u; ++b)
              for (int64_t q : local_positions(c, P, r / u * u + b))
                pairs += causal ? q + 1 : c.seq;
            EXPECT_EQ(got.flops_fwd, 4.0 * double(pairs) * c.batch * (c.heads / u) * c.head_dim);
            if (s.bwd_moves_kv || !causal || strategy == Strategy::Zigzag) {
              EXPECT_EQ(got.flops_bwd, 2.5 * got.flops_fwd);
            }
            fwd_sum += got.flops_fwd;
            bwd_sum += got.flops_bwd;
            got.flops_fwd = got.flops_bwd = 0;
            EXPECT_EQ(got, formula_totals(c, P, r))
                << strategy_name(strategy) << " P=" << P << " u=" << u << " causal=" << causal
                << " rank " << r << " " << dtype_name(d);
            EXPECT_EQ(s.team_ranks, u);
          }
          EXPECT_EQ(bwd_sum, 2.5 * fwd_sum);
        }
      }
    }
  }
}

void expect_buffers_sound(const Schedule& s, const std::string& what);

AttnConfig ulysses_wallfacer(int64_t seq, int H, int K, int u, int C, bool causal, int B = 1) {
  auto c = hybrid(Strategy::WallFacer, seq, H, K, u, causal, B);
  c.teams = C;
  return c;
}

// Ulysses x WallFacer-C: rank j*u + m holds rows [m*n, (m+1)*n) of ring rank j's rows in
// WallFacer-C's layout over the P/u ring ranks (the zigzag layout when causal).
TEST(SeqparLayout, UlyssesWallFacerPositions) {
  // P = 8, u = 2, C = 2, causal, 32 tokens: ring rank j of 4 holds half-chunks j and 7-j of 4.
  const auto c = ulysses_wallfacer(32, 2, 2, 2, 2, true);
  const std::vector<std::vector<int64_t>> want = {
      {0, 1, 2, 3},   {28, 29, 30, 31}, {4, 5, 6, 7},     {24, 25, 26, 27},
      {8, 9, 10, 11}, {20, 21, 22, 23}, {12, 13, 14, 15}, {16, 17, 18, 19}};
  for (int r = 0; r < 8; ++r) EXPECT_EQ(local_positions(c, 8, r), want[size_t(r)]) << r;
  // Without a mask: contiguous.
  const auto full = ulysses_wallfacer(32, 2, 2, 2, 2, false);
  for (int r = 0; r < 8; ++r) EXPECT_EQ(local_positions(full, 8, r).front(), 4 * r);
}

// The groups of a Ulysses x WallFacer-C rank: the Ulysses team, u consecutive ranks; the WallFacer
// team, ranks (t*C + a)*u + m of ring ranks t*C + a with the same member index m.
TEST(SeqparSchedule, UlyssesWallFacerGroups) {
  const auto c = ulysses_wallfacer(16 * 16, 4, 4, 2, 2, false);
  for (int r = 0; r < 16; ++r) {
    const Schedule s = make_schedule(c, 16, r);
    const int j = r / 2, m = r % 2, t = j / 2;
    EXPECT_EQ(group_ranks(s, Group::Team), (std::vector<int>{r / 2 * 2, r / 2 * 2 + 1}));
    EXPECT_EQ(group_ranks(s, Group::InnerTeam),
              (std::vector<int>{(t * 2 + 0) * 2 + m, (t * 2 + 1) * 2 + m}));
    EXPECT_EQ(int(group_ranks(s, Group::World).size()), 16);
    for (const auto* ops : {&s.fwd, &s.bwd}) {
      for (const Op& op : *ops) {
        if (op.kind == OpKind::Collective) {
          EXPECT_EQ(op.group_size, int(group_ranks(s, op.group).size()));
        }
      }
    }
  }
}

// Ulysses 2 x WallFacer-2 on 8 ranks by hand: full mask, H = Hkv = 2, D = 8, 128 tokens (n = 16),
// fp32. The inner WallFacer-2 runs on 4 ring ranks of 32 rows and 1 head (G = 1): ring ranks 1
// and 2 place their team's K,V block (64 rows x 2 x 8 floats = 4096 B), 0 and 3 keep it. Forward
// collectives: Ulysses sends half of q, K,V, O and LSE (16 rows x (8 + 16 + 8 + 1) x 4 B = 2112 B);
// WallFacer's team gathers q and K,V and reduce-scatters O, LSE on 32 rows: 4224 B.
TEST(SeqparSchedule, UlyssesWallFacerBytesByHand) {
  const auto c = ulysses_wallfacer(128, 2, 2, 2, 2, false);
  for (int r = 0; r < 8; ++r) {
    const auto t = schedule_totals(make_schedule(c, 8, r));
    const int j = r / 2;
    EXPECT_EQ(t.p2p_bytes_fwd, j == 1 || j == 2 ? 4096 : 0) << r;
    EXPECT_EQ(t.coll_bytes_fwd, 2112 + 4224) << r;
  }
}

// Ulysses x WallFacer-C sends what its closed form (Ulysses in the team plus WallFacer-C over the
// ring ranks on heads/u heads) says, fp32 and bf16, with and without keep_kv.
TEST(SeqparSchedule, UlyssesWallFacerTotalsEqualFormulas) {
  for (auto [P, u, C] : std::vector<std::tuple<int, int, int>>{
           {8, 2, 2}, {16, 2, 2}, {16, 4, 2}, {32, 2, 4}, {32, 2, 2}}) {
    for (bool causal : {false, true}) {
      for (int K : {8, u}) {
        auto c = ulysses_wallfacer(32 * P, 8, K, u, C, causal, 2);
        for (int variant = 0; variant < 3; ++variant) {  // fp32, bf16, bf16 with keep_kv
          c.dtype = variant ? Dtype::bf16 : Dtype::fp32;
          c.keep_kv = variant == 2;
          for (int r = 0; r < P; ++r) {
            const Schedule s = make_schedule(c, P, r);
            auto got = schedule_totals(s);
            got.flops_fwd = got.flops_bwd = 0;
            EXPECT_EQ(got, formula_totals(c, P, r))
                << "P=" << P << " u=" << u << " C=" << C << " causal=" << causal << " K=" << K
                << " rank " << r << " " << dtype_name(c.dtype) << (c.keep_kv ? " keep_kv" : "");
            EXPECT_EQ(s.team_ranks, u);
            EXPECT_EQ(s.inner_team_ranks, C);
            expect_buffers_sound(s,
                                 fmt::format("ulysses {} x wallfacer {} P={} rank {}", u, C, P, r));
          }
        }
      }
    }
  }
}

// Every kept (query, key) pair of every head slice is computed exactly once, forward and backward,
// over the ranks of a Ulysses x WallFacer-C group (rank r computes heads slice r mod u): counted
// pair by pair for every mask (full, causal, documents, a window; the balanced layout).
TEST(SeqparSchedule, UlyssesWallFacerComputesEveryPairOnce) {
  for (auto [P, u, C] : std::vector<std::tuple<int, int, int>>{{8, 2, 2}, {16, 4, 2}, {16, 2, 2}}) {
    for (int mask = 0; mask < 5; ++mask) {  // full, causal, documents, window, balanced docs
      auto c = ulysses_wallfacer(16 * P, 4, 4, u, C, mask > 0);
      if (mask == 2 || mask == 4) c.doc_lengths = {5 * P, 3 * P, 8 * P};
      if (mask == 3) c.window = 3 * P + 1;
      if (mask == 4) c.layout = Layout::Balanced;
      const int64_t N = c.seq;
      const kernels::DocBounds docs = doc_bounds(c);
      for (int phase = 0; phase < 2; ++phase) {
        std::vector<int> seen(size_t(u * N * N), 0);
        for (int r = 0; r < P; ++r) {
          const Schedule s = make_schedule(c, P, r);
          for (const Op& op : phase ? s.bwd : s.fwd) {
            if (op.kind != OpKind::Compute) continue;
            EXPECT_EQ(op.heads, c.heads / u);
            int64_t kept = 0;
            for (int64_t i = op.qseg.pos0; i < op.qseg.pos0 + op.qseg.rows; ++i)
              for (int64_t k = op.kseg.pos0; k < op.kseg.pos0 + op.kseg.rows; ++k)
                if (kernels::kept_pairs(docs, {i, i + 1}, {k, k + 1}, c.causal, c.window) > 0) {
                  ++seen[size_t(((r % u) * N + i) * N + k)];
                  ++kept;
                }
            EXPECT_EQ(op.pairs, kept);
          }
        }
        for (int m = 0; m < u; ++m)
          for (int64_t i = 0; i < N; ++i)
            for (int64_t k = 0; k < N; ++k) {
              const int want =
                  kernels::kept_pairs(docs, {i, i + 1}, {k, k + 1}, c.causal, c.window) > 0;
              ASSERT_EQ(seen[size_t((m * N + i) * N + k)], want)
                  << "P=" << P << " u=" << u << " C=" << C << " mask " << mask << " phase " << phase
                  << " slice " << m << " pair " << i << "," << k;
            }
      }
    }
  }
}

TEST(SeqparLayout, AttentionPairsCountsTheCausalMask) {
  for (int64_t qp : {0, 3, 10, 17}) {
    for (int64_t kp : {0, 5, 12}) {
      for (int64_t qr : {1, 4, 9}) {
        for (int64_t kr : {1, 6, 11}) {
          int64_t naive = 0;
          for (int64_t i = 0; i < qr; ++i)
            for (int64_t j = 0; j < kr; ++j) naive += qp + i >= kp + j;
          EXPECT_EQ(attention_pairs(qp, qr, kp, kr, true), naive);
          EXPECT_EQ(attention_pairs(qp, qr, kp, kr, false), qr * kr);
        }
      }
    }
  }
}

// Whole tiles of a tiled kernel, counted tile by tile: a tile is computed unless the mask removes
// all of its pairs, i.e. unless its first key comes after its last query.
TEST(SeqparLayout, AttentionTilePairsCountsWholeTiles) {
  for (int64_t qp : {0, 3, 10, 17}) {
    for (int64_t kp : {0, 5, 12}) {
      for (int64_t qr : {1, 4, 9}) {
        for (int64_t kr : {1, 6, 11}) {
          for (auto [tq, tk] : {std::pair{2, 3}, std::pair{4, 4}, std::pair{1, 1}}) {
            int64_t naive = 0;
            for (int64_t i0 = 0; i0 < qr; i0 += tq)
              for (int64_t j0 = 0; j0 < kr; j0 += tk) {
                const int64_t nq = std::min<int64_t>(tq, qr - i0);
                const int64_t nk = std::min<int64_t>(tk, kr - j0);
                if (kp + j0 <= qp + i0 + nq - 1) naive += nq * nk;
              }
            EXPECT_EQ(attention_tile_pairs(qp, qr, kp, kr, true, tq, tk), naive)
                << qp << " " << qr << " " << kp << " " << kr << " " << tq << "x" << tk;
            EXPECT_EQ(attention_tile_pairs(qp, qr, kp, kr, false, tq, tk), qr * kr);
          }
          EXPECT_EQ(attention_tile_pairs(qp, qr, kp, kr, true, 0, 0),
                    attention_pairs(qp, qr, kp, kr, true));
        }
      }
    }
  }
}

// The sliding window: pairs with i - W < j <= i, counted one by one, against kernels::kept_pairs
// and the schedule's kept_pairs; tiles against a tile-by-tile count (a tile is computed unless
// its first key comes after its last query or its last key is W or more before its first query).
TEST(SeqparLayout, WindowPairsAndTilesCountTheWindow) {
  for (int64_t W : {1, 2, 5, 9, 40}) {
    AttnConfig cfg;
    cfg.seq = 64;
    cfg.heads = 1;
    cfg.head_dim = 8;
    cfg.causal = true;
    cfg.window = W;
    const Schedule s = make_schedule(cfg, 1, 0);
    for (int64_t qp : {0, 3, 10, 17}) {
      for (int64_t kp : {0, 5, 12}) {
        for (int64_t qr : {1, 4, 9}) {
          for (int64_t kr : {1, 6, 11}) {
            int64_t naive = 0;
            for (int64_t i = 0; i < qr; ++i)
              for (int64_t j = 0; j < kr; ++j) naive += qp + i >= kp + j && qp + i - (kp + j) < W;
            EXPECT_EQ(kernels::kept_pairs({qp, qp + qr}, {kp, kp + kr}, true, W), naive);
            EXPECT_EQ(kept_pairs(s, qp, qr, kp, kr), naive);
            for (auto [tq, tk] : {std::pair{2, 3}, std::pair{4, 4}, std::pair{1, 1}}) {
              int64_t tiles = 0;
              for (int64_t i0 = 0; i0 < qr; i0 += tq)
                for (int64_t j0 = 0; j0 < kr; j0 += tk) {
                  const int64_t nq = std::min<int64_t>(tq, qr - i0);
                  const int64_t nk = std::min<int64_t>(tk, kr - j0);
                  const int64_t qa = qp + i0, ka = kp + j0;
                  if (ka <= qa + nq - 1 && qa - (ka + nk - 1) < W) tiles += nq * nk;
                }
              EXPECT_EQ(attention_tile_pairs(s.docs, qp, qr, kp, kr, true, tq, tk, W), tiles)
                  << W << ": " << qp << " " << qr << " " << kp << " " << kr << " " << tq << "x"
                  << tk;
            }
          }
        }
      }
    }
  }
}

// A contiguous causal ring with a sliding window of any size sends what the closed form of
// formula_totals says (docs/documents.md, "Sliding windows: bytes"), and that against a count
// independent of the schedule: which ranks' queries see which ranks' keys decides how far each
// block travels (K,V forward to the last later rank that sees them; a query package forward round
// the ring to the last rank whose keys it sees), each rank then passes on the blocks it holds that
// go on and sends the gradient of every block it holds that left home; the backward moves the side
// with fewer bytes summed over the ranks.
TEST(SeqparSchedule, WindowedRingBytesEqualTheirClosedForm) {
  for (int P : {1, 2, 3, 4, 8}) {
    const int64_t n = 16, S = n * P;
    for (int64_t W : {int64_t(1), int64_t(2), int64_t(8), n - 1, n, n + 1, n + 2, 2 * n, 2 * n + 1,
                      3 * n + 5, S - 1}) {
      if (W < 1 || W >= S) continue;
      // Whether rank x's queries see a key of rank o (x >= o).
      auto sees = [&](int x, int o) { return x >= o && x * n - ((o + 1) * n - 1) < W; };
      // hops[o]: the last ring step t (holder o + t) at which the block of rank o is needed.
      std::vector<int64_t> kv_hops(size_t(P), 0), q_hops(size_t(P), 0);
      for (int o = 0; o < P; ++o)
        for (int t = 1; t < P; ++t) {
          const int x = (o + t) % P;
          if (sees(x, o)) kv_hops[size_t(o)] = t;
          if (sees(o, x)) q_hops[size_t(o)] = t;
        }
      // Blocks rank r passes on and gradients it sends, for blocks that travel `hops`.
      auto count = [&](const std::vector<int64_t>& hops, int r, int64_t& on, int64_t& grads) {
        on = grads = 0;
        for (int step = 0; step < P; ++step) {
          const int64_t h = hops[size_t((r - step + P) % P)];
          on += step < h;
          grads += step <= h && h > 0;
        }
      };
      for (auto [H, K] : {std::pair{4, 4}, std::pair{4, 1}}) {
        for (Dtype d : {Dtype::fp32, Dtype::bf16}) {
          auto c = config(Strategy::Ring, S, H, K, 8, true, 1, 2);
          c.window = W;
          c.dtype = d;
          const int64_t e = dtype_bytes(d), rows = int64_t(c.batch) * n, D = c.head_dim;
          const int64_t kv = rows * 2 * K * D * e, dkv = rows * 2 * K * D * 4;
          const int64_t qpack = rows * H * (2 * D * e + 8), dq = rows * H * D * 4;
          int64_t kv_total = 0, q_total = 0, kv_max = 0, q_max = 0;
          for (int r = 0; r < P; ++r) {
            int64_t on = 0, grads = 0;
            count(kv_hops, r, on, grads);
            kv_total += on * kv + grads * dkv;
            kv_max = std::max(kv_max, on * kv + grads * dkv);
            count(q_hops, r, on, grads);
            q_total += on * qpack + grads * dq;
            q_max = std::max(q_max, on * qpack + grads * dq);
          }
          const bool moves_kv = P > 1 && (kv_max != q_max ? kv_max < q_max : kv_total < q_total);
          const std::string cfg_name =
              fmt::format("P={} W={} H={} K={} {}", P, W, H, K, dtype_name(d));
          EXPECT_EQ(backward_moves_kv(c, P), moves_kv) << cfg_name;
          for (int r = 0; r < P; ++r) {
            int64_t fwd_on = 0, fwd_grads = 0, on = 0, grads = 0;
            count(kv_hops, r, fwd_on, fwd_grads);
            count(moves_kv ? kv_hops : q_hops, r, on, grads);
            auto got = schedule_totals(make_schedule(c, P, r));
            got.flops_fwd = got.flops_bwd = 0;
            const std::string what = fmt::format("{} rank {}", cfg_name, r);
            EXPECT_EQ(got, formula_totals(c, P, r)) << what;
            EXPECT_EQ(got.p2p_bytes_fwd, fwd_on * kv) << what;
            EXPECT_EQ(got.p2p_bytes_bwd, moves_kv ? on * kv + grads * dkv : on * qpack + grads * dq)
                << what;
            EXPECT_EQ(got.coll_bytes_fwd + got.coll_bytes_bwd, 0) << what;
          }
        }
      }
    }
  }
  // The target configuration of docs/documents.md: S = 32768, W = 4096, P = 8, one head of 64:
  // K,V move forward, and fwd + bwd bytes of the busiest rank are below a quarter of ring's
  // without the window.
  auto c = config(Strategy::Ring, 32768, 1, 1, 64, true);
  const auto full = summarize_schedules(c, 8).worst;
  c.window = 4096;
  EXPECT_TRUE(backward_moves_kv(c, 8));
  const auto win = summarize_schedules(c, 8).worst;
  EXPECT_LT(4 * (win.p2p_bytes_fwd + win.p2p_bytes_bwd), full.p2p_bytes_fwd + full.p2p_bytes_bwd);
}

// A contiguous causal ring without a window (docs/documents.md, "The causal mask alone: bytes"):
// the keys of rank o are seen only by the queries of ranks o..P-1, so its K,V block makes P-1-o
// hops. Per rank x, with kv, dkv, qpack, dq the bytes of one rank's K,V block, its dK,dV, its query
// package and its dQ:
//   forward: x+1 blocks for x < P-1, none from rank P-1;
//   backward, K,V travel: (x+1)(kv + dkv) for x < P-1, and rank P-1 sends the P-1 dK,dV home;
//   backward, query packages travel (rank o's needs the keys of ranks 0..o, the last of them at
//   the last hop: all P-1 hops, rank 0's none): (P-2) qpack + (P-1) dq, rank P-1 (P-1)(qpack+dq).
// The busiest rank and the total over the ranks against the closed forms summed by hand, for both
// travelling sides (H = K: the query packages; grouped-query heads: K,V), against the same ring
// without a mask (every hop), and each rank against formula_totals.
TEST(SeqparSchedule, CausalRingBytesEqualTheirClosedForm) {
  for (int P : {2, 4, 8}) {
    const int64_t n = 16, S = n * P, p = P;
    for (auto [H, K] : {std::pair{4, 4}, std::pair{4, 1}}) {
      for (Dtype d : {Dtype::fp32, Dtype::bf16}) {
        auto c = config(Strategy::Ring, S, H, K, 8, true, 1, 2);
        c.dtype = d;
        const int64_t e = dtype_bytes(d), rows = int64_t(c.batch) * n, D = c.head_dim;
        const int64_t kv = rows * 2 * K * D * e, dkv = rows * 2 * K * D * 4;
        const int64_t qpack = rows * H * (2 * D * e + 8), dq = rows * H * D * 4;
        const std::string what = fmt::format("P={} H={} K={} {}", P, H, K, dtype_name(d));
        // The closed forms: busiest rank and total over the ranks.
        const int64_t fwd_max = (p - 1) * kv, fwd_sum = p * (p - 1) / 2 * kv;
        const int64_t kv_max = (p - 1) * (kv + dkv),
                      kv_sum = p * (p - 1) / 2 * (kv + dkv) + (p - 1) * dkv;
        const int64_t q_max = (p - 1) * (qpack + dq),
                      q_sum = (p - 1) * (p - 1) * qpack + p * (p - 1) * dq;
        const bool moves_kv = kv_max != q_max ? kv_max < q_max : kv_sum < q_sum;
        EXPECT_EQ(moves_kv, H != K) << what;  // both sides are tested
        EXPECT_EQ(backward_moves_kv(c, P), moves_kv) << what;
        ScheduleTotals most, sum;
        for (int r = 0; r < P; ++r) {
          auto got = schedule_totals(make_schedule(c, P, r));
          got.flops_fwd = got.flops_bwd = 0;
          EXPECT_EQ(got, formula_totals(c, P, r)) << what << " rank " << r;
          most.p2p_bytes_fwd = std::max(most.p2p_bytes_fwd, got.p2p_bytes_fwd);
          most.p2p_bytes_bwd = std::max(most.p2p_bytes_bwd, got.p2p_bytes_bwd);
          sum.p2p_bytes_fwd += got.p2p_bytes_fwd;
          sum.p2p_bytes_bwd += got.p2p_bytes_bwd;
          const int64_t x = r;
          EXPECT_EQ(got.p2p_bytes_fwd, x < p - 1 ? (x + 1) * kv : 0) << what << " rank " << r;
          const int64_t bwd =
              moves_kv ? (x < p - 1 ? (x + 1) * (kv + dkv) : (p - 1) * dkv)
                       : (x < p - 1 ? (p - 2) * qpack + (p - 1) * dq : (p - 1) * (qpack + dq));
          EXPECT_EQ(got.p2p_bytes_bwd, bwd) << what << " rank " << r;
        }
        EXPECT_EQ(most.p2p_bytes_fwd, fwd_max) << what;
        EXPECT_EQ(sum.p2p_bytes_fwd, fwd_sum) << what;
        EXPECT_EQ(most.p2p_bytes_bwd, moves_kv ? kv_max : q_max) << what;
        EXPECT_EQ(sum.p2p_bytes_bwd, moves_kv ? kv_sum : q_sum) << what;
        // Without a mask every rank sends every hop: the busiest rank's forward is the same, the
        // total twice as large; the backward's busiest rank sends one gradient more.
        auto full = c;
        full.causal = false;
        const auto all = formula_totals(full, P, 0);
        EXPECT_EQ(all.p2p_bytes_fwd, fwd_max) << what;
        EXPECT_EQ(p * all.p2p_bytes_fwd, 2 * fwd_sum) << what;
        // The balanced layout without a window chooses the side by the closed forms (its layout
        // is refined for that choice).
        auto balanced = c;
        balanced.layout = Layout::Balanced;
        EXPECT_EQ(backward_moves_kv(balanced, P), backward_moves_kv(full, P)) << what;
        if (backward_moves_kv(full, P) == moves_kv) {
          EXPECT_EQ(all.p2p_bytes_bwd, moves_kv ? kv_max + dkv : q_max + dq) << what;
        }
      }
    }
  }
}

TEST(SeqparSchedule, ValidateRejectsWhatCannotRun) {
  auto bad = [](AttnConfig c, int P) { EXPECT_THROW(validate(c, P), UsageError); };
  bad(config(Strategy::Ring, 100, 4, 4, 8, false), 8);         // S % P
  bad(config(Strategy::Zigzag, 24, 4, 4, 8, true), 8);         // S % 2P
  bad(config(Strategy::WallFacer, 20, 4, 4, 8, true, 2), 4);   // S % 2P, causal
  bad(config(Strategy::WallFacer, 96, 4, 4, 8, false, 2), 6);  // C^2 does not divide P
  bad(config(Strategy::WallFacer, 64, 4, 4, 8, false, 4), 8);  // C^2 > P
  bad(config(Strategy::Ulysses, 64, 6, 6, 8, false), 4);       // H % P
  bad(config(Strategy::Ulysses, 64, 8, 2, 8, false), 4);       // Hkv % P
  bad(config(Strategy::Ring, 64, 6, 4, 8, false), 2);          // H % Hkv
  bad(config(Strategy::Ring, 64, 4, 4, 8, false, 2), 4);       // --teams without wallfacer
  try {
    validate(config(Strategy::WallFacer, 96, 4, 4, 8, false, 2), 6);
    FAIL();
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("C^2"), std::string::npos) << e.what();
  }
  EXPECT_NO_THROW(validate(config(Strategy::WallFacer, 64, 4, 4, 8, true, 2), 8));
}

// The schedule counter equals the closed-form volumes for every strategy and rank.
TEST(SeqparSchedule, TotalsEqualFormulas) {
  struct Case {
    Strategy s;
    int P, C;
  };
  std::vector<Case> cases;
  for (auto [P, C] : team_grid()) {
    cases.push_back({Strategy::WallFacer, P, C});
    if (C == 1) {
      cases.push_back({Strategy::Ring, P, 1});
      cases.push_back({Strategy::Zigzag, P, 1});
      if (P <= 64) cases.push_back({Strategy::Ulysses, P, 1});
    }
  }
  for (const auto& cs : cases) {
    for (bool causal : {false, true}) {
      for (int K : {64, 16}) {
        for (int B : {1, 2}) {
          auto c = config(cs.s, 2 * 1024, 64, K, 16, causal, cs.C, B);
          if (cs.s == Strategy::Ulysses && K % cs.P) continue;
          for (int variant = 0; variant < 3; ++variant) {  // fp32, bf16, bf16 with keep_kv
            c.dtype = variant ? Dtype::bf16 : Dtype::fp32;
            c.keep_kv = variant == 2;
            if (c.keep_kv && (cs.s != Strategy::WallFacer || cs.C == 1)) continue;
            for (int r = 0; r < cs.P; r += std::max(1, cs.P / 16)) {
              auto sched = make_schedule(c, cs.P, r);
              auto got = schedule_totals(sched);
              auto want = formula_totals(c, cs.P, r);
              got.flops_fwd = got.flops_bwd = 0;
              EXPECT_EQ(got, want) << strategy_name(cs.s) << " P=" << cs.P << " C=" << cs.C
                                   << " causal=" << causal << " K=" << K << " rank " << r << " "
                                   << dtype_name(c.dtype) << (c.keep_kv ? " keep_kv" : "");
            }
          }
        }
      }
    }
  }
}

// Buffers that share memory (BufferSpec::alias) are never live at once: replaying each phase, a
// buffer is read only while the memory holds what was last written to it (a send reads until its
// wait), or, with nothing written yet in the phase, when it is the caller's or kept from the
// forward. Names are unique, and an alias fits in the memory it borrows.
void expect_buffers_sound(const Schedule& s, const std::string& what) {
  std::set<std::string> names;
  for (const auto& b : s.buffers) EXPECT_TRUE(names.insert(b.name).second) << what << " " << b.name;
  auto bytes = [&](int id) {
    const auto& b = s.buffers[size_t(id)];
    return b.blocks * block_bytes(b, s.cfg.batch, s.cfg.head_dim);
  };
  auto memory = [&](int id) {
    return s.buffers[size_t(id)].alias >= 0 ? s.buffers[size_t(id)].alias : id;
  };
  for (size_t id = 0; id < s.buffers.size(); ++id) {
    const int a = s.buffers[id].alias;
    if (a < 0) continue;
    EXPECT_GE(a, int(kNumUserBuffers)) << what;
    EXPECT_LT(s.buffers[size_t(a)].alias, 0) << what;
    EXPECT_FALSE(s.buffers[size_t(a)].kept || s.buffers[id].kept) << what;
    EXPECT_LE(bytes(int(id)), bytes(a)) << what;
  }
  for (int phase = 0; phase < 2; ++phase) {
    const auto& ops = phase ? s.bwd : s.fwd;
    std::map<int, int> holder;   // memory -> the buffer last written there
    std::map<int, int> sending;  // send op -> buffer it reads until its wait
    auto read = [&](int b, size_t i) {
      if (b < 0) return;
      auto it = holder.find(memory(b));
      if (it == holder.end()) {
        EXPECT_TRUE(b < int(kNumUserBuffers) || s.buffers[size_t(b)].kept)
            << what << " phase " << phase << " op " << i << " reads " << s.buffers[size_t(b)].name
            << " before writing it";
      } else {
        EXPECT_EQ(it->second, b) << what << " phase " << phase << " op " << i << " reads "
                                 << s.buffers[size_t(b)].name << " whose memory holds "
                                 << s.buffers[size_t(it->second)].name;
      }
    };
    auto write = [&](int b, size_t i) {
      if (b < 0) return;
      for (const auto& [op, sent] : sending)
        EXPECT_FALSE(memory(sent) == memory(b) && sent != b)
            << what << " phase " << phase << " op " << i << " overwrites "
            << s.buffers[size_t(sent)].name << " while op " << op << " sends it";
      holder[memory(b)] = b;
    };
    for (size_t i = 0; i < ops.size(); ++i) {
      const Op& op = ops[i];
      switch (op.kind) {
        case OpKind::Send:
          read(op.src, i);
          sending[int(i)] = op.src;
          break;
        case OpKind::Recv:
          write(op.dst, i);
          break;
        case OpKind::Wait:
          for (int w : op.waits) sending.erase(w);
          break;
        case OpKind::Local:
          read(op.src, i);
          if (op.local == LocalKind::Add) read(op.dst, i);
          write(op.dst, i);
          write(op.dst2, i);
          break;
        case OpKind::Collective:
          read(op.src, i);
          read(op.src2, i);
          write(op.dst, i);
          write(op.dst2, i);
          break;
        case OpKind::Compute:
          for (int b : {op.src, op.src2, op.dst, op.dst2}) read(b, i);
          break;
      }
    }
  }
}

TEST(SeqparSchedule, BuffersSharingMemoryAreNeverLiveAtOnce) {
  int aliased = 0;
  for (auto [P, C] :
       std::vector<std::pair<int, int>>{{1, 1}, {4, 1}, {4, 2}, {8, 2}, {16, 2}, {16, 4}}) {
    for (Strategy st : {Strategy::Ring, Strategy::Zigzag, Strategy::Ulysses, Strategy::WallFacer}) {
      if ((st == Strategy::WallFacer) != (C > 1)) continue;
      for (bool causal : {false, true}) {
        for (int K : {16, 4}) {
          for (int variant = 0; variant < 3; ++variant) {  // fp32, bf16, keep_kv
            auto c = config(st, 64 * P, 16, K, 8, causal, C, 2);
            c.dtype = variant ? Dtype::bf16 : Dtype::fp32;
            c.keep_kv = variant == 2;
            if (c.keep_kv && C == 1) continue;
            if (st == Strategy::Ulysses && K % P) continue;
            for (int r = 0; r < P; ++r) {
              const Schedule s = make_schedule(c, P, r);
              for (const auto& b : s.buffers) aliased += b.alias >= 0;
              expect_buffers_sound(s, fmt::format("{} P={} C={} K={} rank {} {}", strategy_name(st),
                                                  P, C, K, r, c.keep_kv ? "keep_kv" : ""));
            }
          }
        }
      }
    }
  }
  EXPECT_GT(aliased, 0);  // the placed K,V share kv_ring0
  // Hybrids.
  for (auto [P, u] : std::vector<std::pair<int, int>>{{4, 2}, {8, 2}, {8, 4}}) {
    for (bool causal : {false, true}) {
      auto c = hybrid(causal ? Strategy::Zigzag : Strategy::Ring, 48 * P, 8, 4, u, causal, 2);
      for (int r = 0; r < P; ++r)
        expect_buffers_sound(make_schedule(c, P, r),
                             fmt::format("hybrid P={} u={} rank {}", P, u, r));
    }
  }
}

// bf16 by hand: ring P = 4, H = Hkv = 2, D = 8, n = 16 rows per rank. Forward: 3 K,V hops of
// 16 rows x 2 x 2 x 8 bf16 = 1024 B each. Backward (query packages travel): 3 hops of 16 rows x 2
// heads x (2 x 8 x 2 B + 2 x 4 B) = 1280 B and 4 hops of dQ, 16 x 2 x 8 fp32 = 1024 B. Ulysses
// P = 2 forward: half of q (16 rows x 1 head x 8 bf16 = 256 B), of K,V (512 B), of O (256 B) and
// of LSE (16 fp32 = 64 B) go to the other rank.
TEST(SeqparSchedule, Bf16BytesByHand) {
  auto c = config(Strategy::Ring, 64, 2, 2, 8, false);
  c.dtype = Dtype::bf16;
  const auto t = schedule_totals(make_schedule(c, 4, 1));
  EXPECT_EQ(t.p2p_bytes_fwd, 3 * 1024);
  EXPECT_EQ(t.p2p_bytes_bwd, 3 * 1280 + 4 * 1024);
  c.dtype = Dtype::fp32;
  EXPECT_EQ(schedule_totals(make_schedule(c, 4, 1)).p2p_bytes_fwd, 2 * 3 * 1024);
  auto u = config(Strategy::Ulysses, 32, 2, 2, 8, false);
  u.dtype = Dtype::bf16;
  EXPECT_EQ(schedule_totals(make_schedule(u, 2, 0)).coll_bytes_fwd, 256 + 512 + 256 + 64);
}

// Ring bytes from the architecture doc's table: 2 B N H (P-1)/P elements forward (H counting
// hidden size = heads * head_dim) on the busiest rank (causal: rank P-2, which passes on the blocks
// of ranks 0..P-2; without a mask every rank); WallFacer-C: 2 B N H (P - C^2)/(C P) plus one
// placement hop.
TEST(SeqparSchedule, WallFacerCutsRingVolumeByC) {
  const int P = 16, H = 8, D = 16;
  const int64_t S = 1024, n = S / P;
  for (bool causal : {false, true}) {
    const auto ring = summarize_schedules(config(Strategy::Ring, S, H, H, D, causal), P).worst;
    EXPECT_EQ(schedule_totals(make_schedule(config(Strategy::Ring, S, H, H, D, causal), P, P - 2))
                  .p2p_bytes_fwd,
              ring.p2p_bytes_fwd);
    EXPECT_EQ(ring.p2p_bytes_fwd, 2 * (P - 1) * n * H * D * 4);
    EXPECT_EQ(ring.p2p_steps_fwd, P - 1);
    auto wf_steps = [&](int C) {
      return schedule_totals(
                 make_schedule(config(Strategy::WallFacer, S, H, H, D, causal, C), P, 1))
          .p2p_steps_fwd;
    };
    for (int C : {2, 4}) {
      int64_t worst = 0;
      for (int r = 0; r < P; ++r) {
        auto wf = schedule_totals(
            make_schedule(config(Strategy::WallFacer, S, H, H, D, causal, C), P, r));
        worst = std::max(worst, wf.p2p_bytes_fwd);
      }
      const int64_t placement = 2 * C * n * H * D * 4;
      EXPECT_EQ(worst - placement, 2 * S * H * D * (P - C * C) / (C * P) * 4);
      // Half (C = 2) or a quarter (C = 4) of ring's: C times WallFacer's volume, placement
      // included, is ring's volume plus one ring hop.
      EXPECT_EQ(C * worst, ring.p2p_bytes_fwd + 2 * n * H * D * 4);
      EXPECT_EQ(C * C * (wf_steps(C) - 1), P - C * C);
    }
  }
}

// GQA: only the kv heads of K and V travel.
TEST(SeqparSchedule, GqaSendsOnlyKvHeads) {
  const int P = 8;
  auto full = schedule_totals(make_schedule(config(Strategy::Ring, 512, 8, 8, 16, false), P, 3));
  auto gqa = schedule_totals(make_schedule(config(Strategy::Ring, 512, 8, 2, 16, false), P, 3));
  EXPECT_EQ(gqa.p2p_bytes_fwd * 4, full.p2p_bytes_fwd);
  // The backward moves K,V (and dK,dV) under GQA, the query packages without it.
  EXPECT_FALSE(backward_moves_kv(config(Strategy::Ring, 512, 8, 8, 16, false), P));
  EXPECT_TRUE(backward_moves_kv(config(Strategy::Ring, 512, 8, 2, 16, false), P));
  const int64_t n = 512 / P, D = 16;
  EXPECT_EQ(full.p2p_bytes_bwd, ((P - 1) * n * 8 * (2 * D + 2) + P * n * 8 * D) * 4);
  EXPECT_EQ(gqa.p2p_bytes_bwd, ((P - 1) + P) * n * 2 * 2 * D * 4);
}

// Causal work per rank of the zigzag layout is exactly balanced; WallFacer within 5%.
TEST(SeqparSchedule, CausalWorkIsBalanced) {
  for (auto [P, C] : std::vector<std::pair<int, int>>{{8, 1}, {8, 2}, {16, 4}, {64, 2}}) {
    for (auto s : {Strategy::Zigzag, Strategy::WallFacer}) {
      if (s == Strategy::Zigzag && C > 1) continue;
      auto c = config(s, 4096, 4, 4, 8, true, C);
      double mx = 0, sum = 0;
      for (int r = 0; r < P; ++r) {
        const double f = schedule_totals(make_schedule(c, P, r)).flops_fwd;
        mx = std::max(mx, f);
        sum += f;
      }
      EXPECT_LE(mx / (sum / P), 1.05) << strategy_name(s) << " P=" << P << " C=" << C;
      if (s == Strategy::Zigzag) {
        EXPECT_DOUBLE_EQ(mx / (sum / P), 1.0);
      }
    }
  }
  // Plain ring with contiguous chunks is not balanced (the reason for the zigzag layout).
  auto c = config(Strategy::Ring, 4096, 4, 4, 8, true);
  const double first = schedule_totals(make_schedule(c, 8, 0)).flops_fwd;
  const double last = schedule_totals(make_schedule(c, 8, 7)).flops_fwd;
  EXPECT_GT(last, 10 * first);
}

AttnConfig double_ring(int64_t seq, int H, int K, int W, bool causal, int B = 1) {
  auto c = config(Strategy::DoubleRing, seq, H, K, 8, causal, 1, B);
  c.inner = W;
  return c;
}

std::vector<std::pair<int, int>> double_ring_grid() {  // (P, W)
  return {{1, 1}, {2, 1}, {2, 2}, {4, 1}, {4, 2}, {4, 4}, {6, 2}, {6, 3}, {8, 2}, {8, 4}, {16, 4}};
}

// Over its P steps every rank holds every K,V block once; the block of an inner step came from
// the inner predecessor (same group) at the step before, the outer block of a phase from the
// outer predecessor (the same member of the previous group) at the previous phase's first step.
TEST(SeqparLayout, DoubleRingVisitsEveryBlockOnce) {
  for (auto [P, W] : double_ring_grid()) {
    const DoubleRingGeometry L(P, W);
    EXPECT_EQ(L.G * W, P);
    for (int r = 0; r < P; ++r) {
      EXPECT_EQ(L.inner_next(r) / W, r / W);
      EXPECT_EQ(L.outer_next(r) % W, r % W);
      EXPECT_EQ(L.inner_prev(L.inner_next(r)), r);
      EXPECT_EQ(L.outer_prev(L.outer_next(r)), r);
      std::set<int> seen;
      for (int s = 0; s < P; ++s) {
        const int b = L.origin(r, s);
        seen.insert(b);
        EXPECT_EQ(L.holder(b, s), r) << "P=" << P << " W=" << W << " rank " << r << " step " << s;
        if (s % W > 0) {
          EXPECT_EQ(b, L.origin(L.inner_prev(r), s - 1));
        } else if (s > 0) {
          EXPECT_EQ(b, L.origin(L.outer_prev(r), s - W));
        }
      }
      EXPECT_EQ(L.origin(r, 0), r);
      EXPECT_EQ(int(seen.size()), P) << "P=" << P << " W=" << W << " rank " << r;
    }
  }
}

// The pairs the double ring computes, summed over ranks and steps, are those of the whole mask
// (counted directly from the positions), forward and backward, for every mask; each block pair
// at most once per direction.
TEST(SeqparSchedule, DoubleRingComputesEveryPairOnce) {
  for (auto [P, W] : double_ring_grid()) {
    for (int mask = 0; mask < 4; ++mask) {  // full, causal, documents (balanced), window
      const int64_t S = 16 * P;
      auto c = double_ring(S, 4, 2, W, mask > 0);
      if (mask == 2) {
        c.doc_lengths = {S / 4 + 3, S / 2, S - S / 4 - 3 - S / 2};
        c.layout = Layout::Balanced;
      }
      if (mask == 3) c.window = 5;
      // Direct count: pairs (i, j), j <= i under causal, j > i - window, same document.
      const auto docs = doc_bounds(c);
      int64_t want = 0;
      for (int64_t i = 0; i < S; ++i)
        for (int64_t j = 0; j < S; ++j)
          want += (mask == 0 || j <= i) && (c.window == 0 || j > i - c.window) &&
                  docs.doc_at(i) == docs.doc_at(j);
      for (int phase = 0; phase < 2; ++phase) {
        int64_t got = 0;
        for (int r = 0; r < P; ++r) {
          const Schedule s = make_schedule(c, P, r);
          for (const Op& op : phase ? s.bwd : s.fwd)
            if (op.kind == OpKind::Compute) got += op.pairs;
        }
        EXPECT_EQ(got, want) << "P=" << P << " W=" << W << " mask " << mask << " phase " << phase;
      }
    }
  }
}

// Bytes by hand, and the hops that cross groups: P = 8, W = 4 (G = 2), H = 2, D = 8, n = 16 rows
// per rank. Forward 7 K,V hops (as a ring), 1 of them (G - 1) to the other group. Backward 7 hops
// of the side that travels and 8 of its accumulator (3 inner hops in each of the 2 phases and each
// phase's partial home), 2 of them to the other group (the outer hop, and the partial sent home
// from the other group):
//   Hkv = 1: K,V travel (a K,V block 16 x 2 x 1 x 8 x e = 1024 B fp32, 512 bf16; dK,dV 1024);
//   Hkv = 2: query packages travel (16 x 2 x (2 x 8 x e + 2 x 4) = 2304 B fp32, 1280 bf16; dQ
//            16 x 2 x 8 x 4 = 1024), which move fewer bytes than its K,V would (2048 + 2048).
TEST(SeqparSchedule, DoubleRingBytesByHand) {
  for (Dtype dt : {Dtype::fp32, Dtype::bf16}) {
    for (int K : {1, 2}) {
      auto c = double_ring(128, 2, K, 4, false);
      c.dtype = dt;
      const bool fp32 = dt == Dtype::fp32;
      const int64_t kv = (fp32 ? 1024 : 512) * K;
      const int64_t hop = K == 1 ? kv : (fp32 ? 2304 : 1280), acc = 1024;
      EXPECT_EQ(backward_moves_kv(c, 8), K == 1);
      for (int r = 0; r < 8; ++r) {
        const Schedule s = make_schedule(c, 8, r);
        const auto t = schedule_totals(s);
        EXPECT_EQ(t.p2p_bytes_fwd, 7 * kv);
        EXPECT_EQ(t.p2p_bytes_bwd, 7 * hop + 8 * acc);
        EXPECT_EQ(t.p2p_steps_fwd, 6);  // 3 rounds of inner hops per phase, the outer hop in one
        EXPECT_EQ(t.coll_bytes_fwd + t.coll_bytes_bwd, 0);
        auto cross = [&](const std::vector<Op>& ops) {
          int64_t bytes = 0;
          for (const Op& op : ops)
            if (op.kind == OpKind::Send && op.peer / 4 != r / 4) bytes += op.bytes;
          return bytes;
        };
        EXPECT_EQ(cross(s.fwd), kv);
        EXPECT_EQ(cross(s.bwd), hop + acc);
      }
      // The ring of the same config sends the same forward bytes, every hop of some rank crossing.
      auto ring = config(Strategy::Ring, 128, 2, K, 8, false);
      ring.dtype = dt;
      EXPECT_EQ(schedule_totals(make_schedule(ring, 8, 3)).p2p_bytes_fwd, 7 * kv);
    }
  }
}

TEST(SeqparSchedule, DoubleRingTotalsEqualFormulas) {
  for (auto [P, W] : double_ring_grid()) {
    for (bool causal : {false, true}) {
      for (int K : {4, 1}) {
        for (Dtype dt : {Dtype::fp32, Dtype::bf16}) {
          auto c = double_ring(32 * P, 4, K, W, causal, 2);
          c.dtype = dt;
          for (int r = 0; r < P; ++r) {
            const Schedule s = make_schedule(c, P, r);
            auto got = schedule_totals(s);
            got.flops_fwd = got.flops_bwd = 0;
            EXPECT_EQ(got, formula_totals(c, P, r))
                << "P=" << P << " W=" << W << " causal=" << causal << " K=" << K << " rank " << r;
            expect_buffers_sound(s, fmt::format("double-ring P={} W={} rank {}", P, W, r));
          }
        }
      }
    }
  }
  // W = 1 and W = P move what a ring moves forward.
  for (int W : {1, 8}) {
    EXPECT_EQ(formula_totals(double_ring(256, 4, 4, W, false), 8, 2).p2p_bytes_fwd,
              formula_totals(config(Strategy::Ring, 256, 4, 4, 8, false), 8, 2).p2p_bytes_fwd);
  }
}

TEST(SeqparSchedule, DoubleRingValidate) {
  auto msg = [](const AttnConfig& c, int P) {
    try {
      validate(c, P);
    } catch (const UsageError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(msg(double_ring(64, 4, 4, 3, false), 8).find("dividing the 8 ranks"),
            std::string::npos);
  EXPECT_NE(msg(double_ring(64, 4, 4, 0, false), 8).find("--inner 0"), std::string::npos);
  auto ring = config(Strategy::Ring, 64, 4, 4, 8, false);
  ring.inner = 2;
  EXPECT_NE(msg(ring, 8).find("only to --strategy double-ring"), std::string::npos);
  auto hybrid = double_ring(64, 4, 4, 2, false);
  hybrid.ulysses = 2;
  EXPECT_NE(msg(hybrid, 8).find("ring, zigzag or wallfacer"), std::string::npos);
  EXPECT_TRUE(msg(double_ring(64, 4, 4, 2, true), 8).empty());
  EXPECT_TRUE(msg(double_ring(36, 4, 4, 2, false), 4).empty());
  EXPECT_FALSE(msg(double_ring(36, 4, 4, 2, true), 4).empty());  // 2P half-chunks
  EXPECT_EQ(parse_strategy("double-ring"), Strategy::DoubleRing);
  EXPECT_EQ(strategy_name(Strategy::DoubleRing), "double-ring");
  // The causal layout is the zigzag one, whose every block pair has the same causal work.
  auto c = double_ring(4096, 4, 4, 4, true);
  EXPECT_EQ(local_positions(c, 8, 1),
            local_positions(config(Strategy::Zigzag, 4096, 4, 4, 8, true), 8, 1));
  double mx = 0, sum = 0;
  for (int r = 0; r < 8; ++r) {
    const double f = schedule_totals(make_schedule(c, 8, r)).flops_fwd;
    mx = std::max(mx, f);
    sum += f;
  }
  EXPECT_DOUBLE_EQ(mx / (sum / 8), 1.0);
}

// A team ring cut to its first K steps (make_schedule's ring_steps, which the planner times) is
// the whole ring less its last G - K steps: every block makes every hop here (zigzag layout or no
// mask), so each step left out takes one block hop from the forward and a block and a gradient
// hop from the backward; the other ops stay. K >= G builds the whole ring.
TEST(SeqparSchedule, CutRingIsTheWholeRingLessItsLastSteps) {
  struct Case {
    Strategy s;
    int P, C, u;
    bool causal;
  };
  for (const Case& k :
       {Case{Strategy::WallFacer, 32, 2, 1, true}, Case{Strategy::WallFacer, 32, 2, 1, false},
        Case{Strategy::WallFacer, 64, 2, 2, true}, Case{Strategy::Zigzag, 16, 1, 1, true},
        Case{Strategy::Zigzag, 32, 1, 4, true}}) {
    AttnConfig c = config(k.s, 64 * k.P, 8, 8, 16, k.causal, k.C);
    c.ulysses = k.u;
    const int G = WallFacerGeometry(k.P / k.u, k.C).G;
    ASSERT_GE(G, 4);
    auto count = [](const std::vector<Op>& ops, OpKind kind) {
      return std::count_if(ops.begin(), ops.end(), [&](const Op& o) { return o.kind == kind; });
    };
    for (int r = 0; r < k.P; r += 3) {
      const Schedule whole = make_schedule(c, k.P, r);
      for (int K : {2, 3, G, G + 5}) {
        const Schedule cut = make_schedule(c, k.P, r, K);
        const int left = std::max(G - K, 0);
        const std::string what = fmt::format("{} P={} C={} u={} causal={} rank {} cut to {}",
                                             strategy_name(k.s), k.P, k.C, k.u, k.causal, r, K);
        EXPECT_EQ(count(cut.fwd, OpKind::Send), count(whole.fwd, OpKind::Send) - left) << what;
        EXPECT_EQ(count(cut.fwd, OpKind::Recv), count(whole.fwd, OpKind::Recv) - left) << what;
        EXPECT_EQ(count(cut.bwd, OpKind::Send), count(whole.bwd, OpKind::Send) - 2 * left) << what;
        EXPECT_EQ(count(cut.bwd, OpKind::Recv), count(whole.bwd, OpKind::Recv) - 2 * left) << what;
        EXPECT_EQ(count(cut.fwd, OpKind::Collective), count(whole.fwd, OpKind::Collective)) << what;
        EXPECT_EQ(count(cut.bwd, OpKind::Collective), count(whole.bwd, OpKind::Collective)) << what;
        EXPECT_EQ(cut.buffers.size(), whole.buffers.size()) << what;
        if (left == 0) {
          EXPECT_EQ(schedule_totals(cut), schedule_totals(whole)) << what;
        }
      }
    }
  }
  EXPECT_THROW(make_schedule(config(Strategy::Ulysses, 64 * 8, 8, 8, 16, true), 8, 0, 3),
               std::exception);
}

// The reference count (tests/golden/wallfacer_counts.py, the algorithm of docs/algorithm.md moved
// block by block) counts, per rank and with one head: forward the K,V hops; backward G hops of
// (q, dout, dq) including the hop home (counted even when G = 1, a hop from a rank to itself), and
// dK,dV back along the inverse placement. The schedule differs in three ways (docs/seqpar.md): the
// backward re-places K,V (DistAttention::backward does not rely on forward state), q and dout do
// not travel the hop home (only dQ needs it), and the lse and delta rows travel with the package.
TEST(SeqparSchedule, MatchesReferenceCounts) {
  struct Row {
    int P, C;
    bool causal;
    int S, D;
    int64_t p2p;
  };
  const Row rows[] = {
#include "wallfacer_counts.inc"
  };
  for (const auto& row : rows) {
    auto c = config(Strategy::WallFacer, row.S, 1, 1, row.D, row.causal, row.C);
    WallFacerGeometry L(row.P, row.C);
    const int64_t m = int64_t(row.C) * row.S / row.P, D = row.D;
    int64_t worst = 0;
    for (int r = 0; r < row.P; ++r) {
      auto t = schedule_totals(make_schedule(c, row.P, r));
      const int64_t moves = L.placement_dst(r) != r;
      int64_t elems = (t.p2p_bytes_fwd + t.p2p_bytes_bwd) / 4;
      elems -= moves * 2 * m * D;          // re-placement in the backward
      elems += (L.G > 1 ? 2 : 3) * m * D;  // q, dout (and dq when G = 1) not sent home
      elems -= 2 * (L.G - 1) * m;          // lse, delta rows
      worst = std::max(worst, elems);
    }
    EXPECT_EQ(worst, row.p2p) << "P=" << row.P << " C=" << row.C;
  }
}

}  // namespace
}  // namespace wallfacer::seqpar
