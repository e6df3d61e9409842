// Packed documents in the sequence-parallel schedules, without MPI: every compute op's pair count
// against a pair-by-pair count of the document mask, no op without kept pairs, the schedules' work
// against the mask's total, the balanced layout through AttnConfig, the planner's tile count, and
// the checks of the documents and the layout.

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <numeric>
#include <tuple>

#include "wallfacer/core/error.h"
#include "wallfacer/kernels/doc_mask.h"
#include "wallfacer/seqpar/doc_layout.h"
#include "wallfacer/seqpar/harness.h"
#include "wallfacer/seqpar/schedule.h"

namespace wallfacer::seqpar {
namespace {

// Document of every position, from the lengths, by walking them (independent of DocBounds).
std::vector<int> doc_ids(const std::vector<int64_t>& lengths) {
  std::vector<int> ids;
  for (size_t d = 0; d < lengths.size(); ++d) ids.insert(ids.end(), size_t(lengths[d]), int(d));
  return ids;
}

// Pairs the mask keeps between two runs of positions, one by one.
int64_t brute_pairs(const std::vector<int>& ids, int64_t q0, int64_t qn, int64_t k0, int64_t kn,
                    bool causal) {
  int64_t n = 0;
  for (int64_t i = q0; i < q0 + qn; ++i)
    for (int64_t j = k0; j < k0 + kn; ++j)
      n += ids[size_t(i)] == ids[size_t(j)] && (!causal || i >= j);
  return n;
}

struct Case {
  Strategy strategy;
  int P, teams, ulysses;
};

std::vector<Case> cases() {
  return {{Strategy::Ring, 1, 1, 1},      {Strategy::Ring, 2, 1, 1},
          {Strategy::Ring, 4, 1, 1},      {Strategy::Zigzag, 4, 1, 1},
          {Strategy::Zigzag, 8, 1, 1},    {Strategy::Ulysses, 4, 1, 1},
          {Strategy::WallFacer, 4, 2, 1}, {Strategy::WallFacer, 8, 2, 1},
          {Strategy::WallFacer, 8, 1, 1}, {Strategy::Ring, 8, 1, 2},
          {Strategy::Zigzag, 8, 1, 4}};
}

AttnConfig config(const Case& k, int64_t seq, bool causal, std::vector<int64_t> docs,
                  Layout layout) {
  AttnConfig c;
  c.strategy = k.strategy;
  c.teams = k.teams;
  c.ulysses = k.ulysses;
  c.seq = seq;
  c.heads = 8;
  c.kv_heads = 8;
  c.head_dim = 4;
  c.causal = causal;
  c.doc_lengths = std::move(docs);
  c.layout = layout;
  return c;
}

// Document sets of 512 positions: a one-token document, boundaries on rank borders (multiples of
// 512 / P) and kernel tile borders (128, 256), a document spanning every rank, random lengths.
std::vector<std::vector<int64_t>> doc_sets() {
  return {{1, 63, 64, 128, 5, 251}, {1, 509, 2}, random_doc_lengths_count(512, 12, 7)};
}

TEST(SeqparDocs, ComputeOpsCountTheMaskedPairs) {
  for (const auto& docs : doc_sets()) {
    const auto ids = doc_ids(docs);
    for (const Case& k : cases())
      for (bool causal : {false, true})
        for (Layout layout : {Layout::Strategy, Layout::Balanced}) {
          const AttnConfig c = config(k, 512, causal, docs, layout);
          const int64_t total = brute_pairs(ids, 0, 512, 0, 512, causal);
          int64_t fwd = 0, bwd = 0;
          for (int r = 0; r < k.P; ++r) {
            const Schedule s = make_schedule(c, k.P, r);
            for (const auto* ops : {&s.fwd, &s.bwd})
              for (const Op& op : *ops) {
                if (op.kind != OpKind::Compute) continue;
                const int64_t want = brute_pairs(ids, op.qseg.pos0, op.qseg.rows, op.kseg.pos0,
                                                 op.kseg.rows, causal);
                ASSERT_GT(op.pairs, 0) << "an op with no kept pair";
                ASSERT_EQ(op.pairs, want)
                    << strategy_name(k.strategy) << " P=" << k.P << " rank " << r;
                (op.backward ? bwd : fwd) += op.pairs;
              }
          }
          // Every pair once per head group: Ulysses computes all pairs on each rank's heads, and
          // a hybrid's u team members each compute the ring's pairs on their slice of the heads.
          const int64_t copies = k.strategy == Strategy::Ulysses ? k.P : k.ulysses;
          EXPECT_EQ(fwd, total * copies) << strategy_name(k.strategy) << " P=" << k.P;
          EXPECT_EQ(bwd, total * copies) << strategy_name(k.strategy) << " P=" << k.P;
          // The FLOPs of all ranks: 4 per kept pair, head and head dimension.
          const auto sum = summarize_schedules(c, k.P);
          const double flops = std::accumulate(sum.flops_fwd.begin(), sum.flops_fwd.end(), 0.0);
          EXPECT_EQ(flops, 4.0 * double(total) * c.heads * c.head_dim);
        }
  }
}

// The layout a ring schedule uses with Layout::Balanced, counted position by position: every
// position once, seq / P on each rank, in runs of whole chunks (seq / 8P), the forward imbalance
// (kept pairs) within the target, and the steps balanced: the sum over the ring's steps of the
// busiest rank's work (forward: rank x's queries against the keys of rank x - t; backward the
// same or, when the query packages travel, rank x - t's queries against x's keys, at 2.5 times
// the weight) at most that of the chunk-balanced start (balanced_doc_layout), and well under it
// on a long-tailed mix. The work is the kernels': the chunks here (32 positions) are smaller than
// a tile, so a pair of chunks costs 32 x 32 when the mask keeps any pair of it, else nothing.
TEST(SeqparDocs, BalancedLayoutBalancesTheRingSteps) {
  const int64_t S = 2048, chunk = S / 64;
  const int P = 8;
  const auto docs = random_doc_lengths(S, 5, 256.0);
  const auto ids = doc_ids(docs);
  for (bool causal : {false, true}) {
    AttnConfig c = config({Strategy::Zigzag, P, 1, 1}, S, causal, docs, Layout::Balanced);
    const bool moves_kv = backward_moves_kv(c, P);
    // The ranks' chunks (first positions) -> the ring's cost and the forward imbalance.
    auto count = [&](const std::vector<std::vector<int64_t>>& chunks, double* imbalance) {
      std::vector<std::vector<int64_t>> tiles(P, std::vector<int64_t>(P, 0)), kept = tiles;
      for (int a = 0; a < P; ++a)
        for (int b = 0; b < P; ++b)
          for (int64_t i : chunks[size_t(a)])
            for (int64_t j : chunks[size_t(b)]) {
              const int64_t n = brute_pairs(ids, i, chunk, j, chunk, causal);
              kept[a][b] += n;
              tiles[a][b] += n > 0 ? chunk * chunk : 0;
            }
      double cost = 0;
      std::vector<double> fwd(P, 0);
      for (int t = 0; t < P; ++t) {
        int64_t f = 0, g = 0;
        for (int x = 0; x < P; ++x) {
          const int o = (x - t + P) % P;
          f = std::max(f, tiles[x][o]);
          g = std::max(g, moves_kv ? tiles[x][o] : tiles[o][x]);
          fwd[size_t(x)] += double(kept[x][o]);
        }
        cost += double(f) + 2.5 * double(g);
      }
      *imbalance = work_imbalance(fwd);
      return cost;
    };
    std::vector<std::vector<int64_t>> got(P), start(P);
    std::vector<int> seen(size_t(S), 0);
    for (int r = 0; r < P; ++r) {
      int64_t rows = 0;
      for (const auto& run : local_runs(c, P, r)) {
        EXPECT_EQ(run.rows, chunk) << "rank " << r << ": a run of " << run.rows;
        EXPECT_EQ(run.pos0 % chunk, 0) << "rank " << r;
        EXPECT_EQ(run.row0, rows) << "rank " << r;
        rows += run.rows;
        got[size_t(r)].push_back(run.pos0);
        for (int64_t p = run.pos0; p < run.pos0 + run.rows; ++p) ++seen[size_t(p)];
      }
      EXPECT_EQ(rows, S / P) << "rank " << r;
    }
    EXPECT_EQ(std::count(seen.begin(), seen.end(), 1), S);
    const DocLayout l = balanced_doc_layout(kernels::doc_bounds_from_lengths(docs, S), P, causal);
    for (int r = 0; r < P; ++r)
      for (const auto& run : l.runs[size_t(r)])
        for (int64_t p = run.begin; p < run.end; p += chunk) start[size_t(r)].push_back(p);
    double imb_got = 0, imb_start = 0;
    const double cost_got = count(got, &imb_got), cost_start = count(start, &imb_start);
    const std::string what = causal ? "causal" : "full";
    EXPECT_LE(imb_got, 1.10) << what;
    EXPECT_NEAR(imb_got, summarize_schedules(c, P).work_imbalance, 1e-12) << what;
    EXPECT_LE(cost_got, cost_start) << what;
    EXPECT_LT(cost_got, 0.9 * cost_start) << what;
  }
}

// The balanced layout counts the sliding window (the example of docs/documents.md, "Sliding
// windows": attn --seq 8192 --causal --window 512 --docs-random 60 --layout balanced --strategy
// zigzag on 8 ranks): the forward work of each rank counted pair by pair from its positions under
// the windowed mask is within the target and is the schedules' work_imbalance; the layout counted
// without the window (layout_window 0) is not within it. layout_window lays a windowed and a
// global attention out alike: either way, as the config whose window it names.
TEST(SeqparDocs, BalancedLayoutCountsTheWindow) {
  const int64_t S = 8192, W = 512;
  const int P = 8;
  const auto docs = random_doc_lengths_count(S, 60, 1);
  const auto ids = doc_ids(docs);
  AttnConfig c = config({Strategy::Zigzag, P, 1, 1}, S, true, docs, Layout::Balanced);
  c.heads = 2;
  c.kv_heads = 2;
  c.head_dim = 64;
  c.window = W;
  // Rank r's queries against every key under the windowed mask, one by one.
  auto imbalance_of = [&](const AttnConfig& cfg) {
    std::vector<double> work;
    for (int r = 0; r < P; ++r) {
      int64_t n = 0;
      for (const int64_t i : local_positions(cfg, P, r))
        for (int64_t j = std::max<int64_t>(0, i - W + 1); j <= i; ++j)
          n += ids[size_t(i)] == ids[size_t(j)];
      work.push_back(double(n));
    }
    return work_imbalance(work);
  };
  const double counted = imbalance_of(c);
  EXPECT_LE(counted, 1.10);
  EXPECT_NEAR(counted, summarize_schedules(c, P).work_imbalance, 1e-12);
  AttnConfig uncounted = c;
  uncounted.layout_window = 0;
  const double before = imbalance_of(uncounted);
  EXPECT_GT(before, 1.15);
  EXPECT_NEAR(before, summarize_schedules(uncounted, P).work_imbalance, 1e-12);
  std::printf("forward work imbalance under the window: layout counting it %.4f, not %.4f\n",
              counted, before);
  AttnConfig global = c;
  global.window = 0;
  global.layout_window = W;
  AttnConfig plain = c;
  plain.window = 0;
  for (int r = 0; r < P; ++r) {
    EXPECT_EQ(local_positions(global, P, r), local_positions(c, P, r)) << "rank " << r;
    EXPECT_EQ(local_positions(uncounted, P, r), local_positions(plain, P, r)) << "rank " << r;
  }
  // A negative layout window other than -1 (the attention's window) is refused.
  AttnConfig bad = c;
  bad.layout_window = -2;
  EXPECT_THROW(validate(bad, P), UsageError);
}

// The length mix of docs/documents.md at S = 65536: the schedules' work imbalance with the
// balanced layout meets the target, zigzag's does not.
TEST(SeqparDocs, BalancedScheduleMeetsTheTarget) {
  const int64_t S = 65536;
  const auto docs = random_doc_lengths(S, 5);
  for (bool causal : {false, true}) {
    AttnConfig zig = config({Strategy::Zigzag, 8, 1, 1}, S, causal, docs, Layout::Strategy);
    AttnConfig bal = zig;
    bal.layout = Layout::Balanced;
    const double z = summarize_schedules(zig, 8).work_imbalance;
    const double b = summarize_schedules(bal, 8).work_imbalance;
    EXPECT_LE(b, 1.10) << (causal ? "causal" : "full");
    EXPECT_GT(z, 1.5) << (causal ? "causal" : "full");
    // WallFacer-2: a team's rows against the teams of its sub-ring (refine_doc_layout).
    AttnConfig wf = config({Strategy::WallFacer, 8, 2, 1}, S, causal, docs, Layout::Balanced);
    const double w = summarize_schedules(wf, 8).work_imbalance;
    wf.layout = Layout::Strategy;
    const double ws = summarize_schedules(wf, 8).work_imbalance;
    EXPECT_LE(w, 1.10) << "wallfacer C=2 " << (causal ? "causal" : "full");
    EXPECT_GT(ws, 1.5) << "wallfacer C=2 " << (causal ? "causal" : "full");
  }
}

TEST(SeqparDocs, TilePairsSkipTilesWithoutKeptPairs) {
  const std::vector<int64_t> lengths = {1, 200, 57, 300, 100, 366};
  const auto ids = doc_ids(lengths);
  const auto docs = kernels::doc_bounds_from_lengths(lengths, 1024);
  const int tq = 128, tk = 256;
  for (bool causal : {false, true})
    for (auto [q0, qn, k0, kn] : std::vector<std::array<int64_t, 4>>{
             {0, 1024, 0, 1024}, {100, 300, 0, 700}, {512, 512, 0, 512}, {0, 256, 700, 324}}) {
      int64_t want = 0;
      for (int64_t i = 0; i < qn; i += tq)
        for (int64_t j = 0; j < kn; j += tk) {
          const int64_t a = std::min<int64_t>(tq, qn - i), b = std::min<int64_t>(tk, kn - j);
          if (brute_pairs(ids, q0 + i, a, k0 + j, b, causal) > 0) want += a * b;
        }
      EXPECT_EQ(attention_tile_pairs(docs, q0, qn, k0, kn, causal, tq, tk), want)
          << q0 << " " << qn << " " << k0 << " " << kn;
    }
}

// Skipped hops in every strategy, with documents and windows: the ranks' point-to-point messages
// pair up (each rank's sends to a peer under a tag, in order, are the peer's receives from it, of
// the same sizes), no rank sends more than under the causal mask alone (the same config with one
// document and no window, which skips only what causal skips), and the backward's bytes fall with a
// window of a rank's rows.
TEST(SeqparDocs, SkippedHopsStillPairUp) {
  for (const auto& docs : doc_sets())
    for (const Case& k : cases())
      for (int64_t window : {int64_t(0), int64_t(1), int64_t(100), int64_t(300)})
        for (Layout layout : {Layout::Strategy, Layout::Balanced}) {
          AttnConfig c = config(k, 512, true, docs, layout);
          c.window = window;
          c.kv_heads = 4;  // K,V travel in the backward, with or without skipping
          AttnConfig plain = c;
          plain.doc_lengths.clear();
          plain.window = 0;
          const std::string what =
              fmt::format("{} P={} C={} u={} window {} {} docs", strategy_name(k.strategy), k.P,
                          k.teams, k.ulysses, window, docs.size());
          for (bool bwd : {false, true}) {
            // (from, to, tag) -> the sizes of the messages, in order.
            std::map<std::tuple<int, int, int>, std::vector<int64_t>> sends, recvs;
            for (int r = 0; r < k.P; ++r) {
              const Schedule s = make_schedule(c, k.P, r);
              for (const Op& op : bwd ? s.bwd : s.fwd) {
                if (op.kind == OpKind::Send) sends[{r, op.peer, op.tag}].push_back(op.bytes);
                if (op.kind == OpKind::Recv) recvs[{op.peer, r, op.tag}].push_back(op.bytes);
              }
              const auto got = schedule_totals(s),
                         all = schedule_totals(make_schedule(plain, k.P, r));
              EXPECT_LE(bwd ? got.p2p_bytes_bwd : got.p2p_bytes_fwd,
                        bwd ? all.p2p_bytes_bwd : all.p2p_bytes_fwd)
                  << what << " rank " << r;
            }
            EXPECT_EQ(sends, recvs) << what << (bwd ? " backward" : " forward");
          }
        }
}

TEST(SeqparDocs, DocumentsAndLayoutAreChecked) {
  AttnConfig c = config({Strategy::Ring, 4, 1, 1}, 512, true, {100, 400}, Layout::Strategy);
  EXPECT_THROW(validate(c, 4), UsageError);  // sums to 500
  c.doc_lengths = {0, 512};
  EXPECT_THROW(validate(c, 4), UsageError);
  c.doc_lengths = {12, 500};
  EXPECT_NO_THROW(validate(c, 4));
  c.dtype = Dtype::bf16;
  EXPECT_NO_THROW(validate(c, 4));
  c.dtype = Dtype::fp32;
  c.layout = Layout::Balanced;
  c.seq = 528;  // a multiple of P = 4, not of 8P = 32
  c.doc_lengths = {28, 500};
  EXPECT_THROW(validate(c, 4), UsageError);
  EXPECT_THROW(parse_layout("zigzag"), UsageError);
  EXPECT_THROW(doc_lengths_from_options({1, 2}, 0, 4, 1), UsageError);
  EXPECT_THROW(doc_lengths_from_options({1, 3}, 2, 4, 1), UsageError);
  EXPECT_THROW(doc_lengths_from_options({}, 5, 4, 1), UsageError);
  EXPECT_EQ(doc_lengths_from_options({}, 4, 4, 1), (std::vector<int64_t>{1, 1, 1, 1}));
}

}  // namespace
}  // namespace wallfacer::seqpar
