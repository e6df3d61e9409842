// Packed documents: the kept-pair counter against a brute-force count of the mask, document
// bounds and their checks, and the balanced layout of seqpar/doc_layout.h against the contiguous
// and zigzag layouts on a long-tailed mix of documents.

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <string>
#include <vector>

#include "wallfacer/core/error.h"
#include "wallfacer/core/rng.h"
#include "wallfacer/kernels/doc_mask.h"
#include "wallfacer/seqpar/doc_layout.h"

namespace wallfacer {
namespace {

using kernels::DocBounds;
using kernels::PosRun;

// Pairs (i, j), i in q, j in k, with the same document id (and i >= j when causal; with a window
// W > 0 also i - j < W), one by one.
int64_t brute_force_pairs(const std::vector<int32_t>& ids, PosRun q, PosRun k, bool causal,
                          int64_t window = 0) {
  int64_t n = 0;
  for (int64_t i = q.begin; i < q.end; ++i)
    for (int64_t j = k.begin; j < k.end; ++j)
      n += ids[i] == ids[j] && (!causal || (i >= j && (window == 0 || i - j < window)));
  return n;
}

TEST(DocMask, KeptPairsMatchBruteForce) {
  Rng rng(7);
  for (int trial = 0; trial < 300; ++trial) {
    const int64_t seq = 1 + int64_t(rng.uniform() * 400);
    // Short and long documents, sometimes one.
    std::vector<int64_t> lengths;
    for (int64_t left = seq; left > 0;) {
      const int64_t cap = trial % 3 == 0 ? 8 : 200;
      const int64_t len = std::min<int64_t>(left, 1 + int64_t(rng.uniform() * cap));
      lengths.push_back(len);
      left -= len;
    }
    const DocBounds docs = kernels::doc_bounds_from_lengths(lengths, seq);
    const std::vector<int32_t> ids = kernels::doc_of_pos(docs);
    auto run = [&] {
      const int64_t a = int64_t(rng.uniform() * (seq + 1)), b = int64_t(rng.uniform() * (seq + 1));
      return PosRun{std::min(a, b), std::max(a, b)};
    };
    for (int r = 0; r < 5; ++r) {
      const PosRun q = run(), k = run();
      for (bool causal : {false, true}) {
        ASSERT_EQ(kernels::kept_pairs(docs, q, k, causal), brute_force_pairs(ids, q, k, causal))
            << "seq " << seq << " docs " << docs.count() << " q [" << q.begin << ", " << q.end
            << ") k [" << k.begin << ", " << k.end << ") causal " << causal;
        const std::vector<int32_t> one(seq, 0);
        ASSERT_EQ(kernels::kept_pairs(q, k, causal), brute_force_pairs(one, q, k, causal));
      }
    }
  }
}

TEST(DocMask, DocsInRunListsThePieces) {
  const DocBounds docs = kernels::doc_bounds_from_lengths({3, 1, 6}, 10);
  EXPECT_EQ(docs.count(), 3);
  EXPECT_EQ(docs.starts, (std::vector<int64_t>{0, 3, 4, 10}));
  EXPECT_EQ(kernels::doc_of_pos(docs), (std::vector<int32_t>{0, 0, 0, 1, 2, 2, 2, 2, 2, 2}));
  const auto pieces = kernels::docs_in_run(docs, {2, 6});
  ASSERT_EQ(pieces.size(), 3u);
  EXPECT_EQ(pieces[0].doc, 0);
  EXPECT_EQ(pieces[0].run, (PosRun{2, 3}));
  EXPECT_EQ(pieces[1].doc, 1);
  EXPECT_EQ(pieces[1].run, (PosRun{3, 4}));
  EXPECT_EQ(pieces[2].doc, 2);
  EXPECT_EQ(pieces[2].run, (PosRun{4, 6}));
  EXPECT_TRUE(kernels::docs_in_run(docs, {5, 5}).empty());
  EXPECT_EQ(kernels::docs_in_run(docs, {9, 10}).size(), 1u);
}

// Expects f to throw a UsageError whose message contains `text`.
template <class F>
void expect_usage_error(F&& f, const std::string& text) {
  try {
    f();
    ADD_FAILURE() << "no UsageError; expected one saying: " << text;
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << e.what();
  }
}

TEST(DocMask, LengthsAreChecked) {
  expect_usage_error(
      [] {
        kernels::doc_bounds_from_lengths({3, 0, 7}, 10);
      },
      "length 0 of document 1 must be positive");
  expect_usage_error([] { kernels::doc_bounds_from_lengths({3, -2, 9}, 10); }, "must be positive");
  expect_usage_error(
      [] {
        kernels::doc_bounds_from_lengths({3, 4}, 10);
      },
      "sum to 7, not to the sequence length 10");
  expect_usage_error([] { kernels::doc_bounds_from_lengths({3, 9}, 10); }, "exceed the sequence");
  expect_usage_error([] { kernels::doc_bounds_from_lengths({}, 10); }, "no document");
  expect_usage_error([] { kernels::doc_bounds_from_starts({0, 4, 4, 10}, 10); }, "must increase");
  expect_usage_error(
      [] {
        kernels::doc_bounds_from_starts({0, 4, 9}, 10);
      },
      "from 0 to the sequence length 10");
  EXPECT_EQ(kernels::doc_bounds_from_starts({0, 4, 10}, 10).count(), 2);
}

// Work per rank counted independently: every kept (query, key) pair attributed to the rank
// holding the query, position by position.
std::vector<int64_t> brute_force_rank_work(const seqpar::DocLayout& l,
                                           const std::vector<int32_t>& ids, bool causal) {
  const int64_t seq = int64_t(ids.size());
  std::vector<int64_t> work(l.ranks(), 0);
  for (int r = 0; r < l.ranks(); ++r)
    for (const PosRun& q : l.runs[r]) work[r] += brute_force_pairs(ids, q, {0, seq}, causal);
  return work;
}

TEST(DocLayout, WorkMatchesBruteForce) {
  const int64_t seq = 512;
  const std::vector<int64_t> lengths = seqpar::random_doc_lengths(seq, 3, 40.0);
  const DocBounds docs = kernels::doc_bounds_from_lengths(lengths, seq);
  const std::vector<int32_t> ids = kernels::doc_of_pos(docs);
  for (bool causal : {false, true})
    for (const seqpar::DocLayout& l :
         {seqpar::contiguous_layout(seq, 4), seqpar::zigzag_layout(seq, 4),
          seqpar::balanced_doc_layout(docs, 4, causal)}) {
      seqpar::check_doc_layout(l, seq);
      EXPECT_EQ(seqpar::layout_work(l, docs, causal), brute_force_rank_work(l, ids, causal));
    }
}

// The steps of teams of two ranks on 4 ranks whose rows meet the keys of one team per step (as
// WallFacer-2): the forward (weight 1) and a backward in which the query packages travel (2.5).
std::vector<seqpar::StepPattern> two_team_phases() {
  const int P = 4;
  seqpar::StepPattern fwd, bwd;
  bwd.weight = 2.5;
  for (int t = 0; t < 2; ++t) {
    fwd.queries.emplace_back(), fwd.keys.emplace_back(), bwd.queries.emplace_back(),
        bwd.keys.emplace_back();
    for (int x = 0; x < P; ++x) {
      const int team = x / 2, other = (team + t) % 2;
      fwd.queries.back().push_back({2 * team, 2 * team + 1});
      fwd.keys.back().push_back({2 * other, 2 * other + 1});
      bwd.queries.back().push_back({2 * other, 2 * other + 1});
      bwd.keys.back().push_back({x});
    }
  }
  return {fwd, bwd};
}

// The cost of the phases step by step (sum over the steps of weight x the busiest rank's work)
// from the work between ranks, pairs(a, b): rank a's queries against rank b's keys.
template <typename Pairs>
double brute_step_cost(const std::vector<seqpar::StepPattern>& phases, int P, Pairs pairs) {
  double cost = 0;
  for (const auto& ph : phases)
    for (size_t t = 0; t < ph.queries.size(); ++t) {
      int64_t top = 0;
      for (int x = 0; x < P; ++x) {
        int64_t w = 0;
        for (int a : ph.queries[t][size_t(x)])
          for (int b : ph.keys[t][size_t(x)]) w += pairs(a, b);
        top = std::max(top, w);
      }
      cost += ph.weight * double(top);
    }
  return cost;
}

// step_cost and phase_work against a brute-force count: teams of two ranks whose rows meet the
// keys of one team per step (as WallFacer-2 on 4 ranks), weights 1 and 2.5. refine_doc_layout
// keeps every rank's position count, does not raise the cost of a start within its imbalance
// cap, and lowers the forward imbalance of a start above it.
TEST(DocLayout, StepCostAndRefineAgainstBruteForce) {
  const int64_t seq = 512;
  const int P = 4;
  const std::vector<int64_t> lengths = seqpar::random_doc_lengths(seq, 7, 60.0);
  const DocBounds docs = kernels::doc_bounds_from_lengths(lengths, seq);
  const std::vector<int32_t> ids = kernels::doc_of_pos(docs);
  const std::vector<seqpar::StepPattern> phases = two_team_phases();
  const seqpar::StepPattern& fwd = phases[0];
  for (bool causal : {false, true}) {
    const seqpar::DocLayout start = seqpar::contiguous_layout(seq, P);
    auto pairs = [&](const seqpar::DocLayout& l, int a, int b) {
      int64_t n = 0;
      for (const PosRun& q : l.runs[size_t(a)])
        for (const PosRun& k : l.runs[size_t(b)]) n += brute_force_pairs(ids, q, k, causal);
      return n;
    };
    auto brute_cost = [&](const seqpar::DocLayout& l) {
      return brute_step_cost(phases, P, [&](int a, int b) { return pairs(l, a, b); });
    };
    EXPECT_DOUBLE_EQ(seqpar::step_cost(start, docs, causal, phases), brute_cost(start));
    const auto work = seqpar::phase_work(start, docs, causal, fwd);
    for (int x = 0; x < P; ++x)
      EXPECT_EQ(work[size_t(x)],
                pairs(start, 2 * (x / 2), 0) + pairs(start, 2 * (x / 2), 1) +
                    pairs(start, 2 * (x / 2), 2) + pairs(start, 2 * (x / 2), 3) +
                    pairs(start, 2 * (x / 2) + 1, 0) + pairs(start, 2 * (x / 2) + 1, 1) +
                    pairs(start, 2 * (x / 2) + 1, 2) + pairs(start, 2 * (x / 2) + 1, 3));
    // From the contiguous layout (causal: imbalanced, above the cap) and from a refined one.
    const seqpar::DocLayout once = seqpar::refine_doc_layout(start, docs, causal, phases);
    seqpar::check_doc_layout(once, seq);
    const double imb0 = seqpar::imbalance(seqpar::phase_work(start, docs, causal, fwd));
    const double imb1 = seqpar::imbalance(seqpar::phase_work(once, docs, causal, fwd));
    EXPECT_LE(imb1, std::max(1.08, imb0)) << causal;
    if (imb0 > 1.08) {
      EXPECT_LT(imb1, imb0) << causal;
    }
    if (imb1 <= 1.08) {
      const seqpar::DocLayout twice = seqpar::refine_doc_layout(once, docs, causal, phases);
      EXPECT_LE(brute_cost(twice), brute_cost(once)) << causal;
      EXPECT_LE(seqpar::imbalance(seqpar::phase_work(twice, docs, causal, fwd)), 1.08) << causal;
    }
  }
  // Patterns that do not fit the layout.
  seqpar::StepPattern bad = fwd;
  bad.keys[0][0] = {P};
  EXPECT_THROW(seqpar::step_cost(seqpar::contiguous_layout(seq, P), docs, true, {bad}), Error);
  bad = fwd;
  bad.queries.pop_back();
  EXPECT_THROW(seqpar::step_cost(seqpar::contiguous_layout(seq, P), docs, true, {bad}), Error);
}

// The counting functions with a sliding window against a pair-by-pair count of the windowed mask:
// layout_pair_work and layout_work, step_cost (kept pairs, and the kernels' tiles against a
// tile-by-tile count) and phase_work, on the contiguous layout and on the balanced layout counted
// for the window; window 0 is no window (the default's numbers and layouts); a window of the
// whole sequence counts what no window does; the refinement for the window holds the windowed
// forward imbalance at the cap.
TEST(DocLayout, WindowedCountsAgainstBruteForce) {
  const int64_t seq = 512;
  const int P = 4;
  const std::vector<seqpar::StepPattern> phases = two_team_phases();
  const seqpar::StepPattern& fwd = phases[0];
  const seqpar::TileSize tiles{16, 32};
  for (double median : {60.0, 400.0}) {
    const std::vector<int64_t> lengths = seqpar::random_doc_lengths(seq, 7, median);
    const DocBounds docs = kernels::doc_bounds_from_lengths(lengths, seq);
    const std::vector<int32_t> ids = kernels::doc_of_pos(docs);
    for (int64_t window : {int64_t(1), int64_t(20), int64_t(100), seq}) {
      const std::string what = fmt::format("median {} window {}", median, window);
      // Rank a's queries against rank b's keys, in kept pairs and in the pairs of the tiles a
      // kernel computes (tiles from the first row of each run, a tile counted whole when the
      // mask keeps any pair of it).
      auto pairs = [&](const seqpar::DocLayout& l, int a, int b, bool in_tiles) {
        int64_t n = 0;
        for (const PosRun& q : l.runs[size_t(a)])
          for (const PosRun& k : l.runs[size_t(b)]) {
            if (!in_tiles) {
              n += brute_force_pairs(ids, q, k, true, window);
              continue;
            }
            for (int64_t i = q.begin; i < q.end; i += tiles.q)
              for (int64_t j = k.begin; j < k.end; j += tiles.k) {
                const PosRun tq{i, std::min(i + tiles.q, q.end)},
                    tk{j, std::min(j + tiles.k, k.end)};
                if (brute_force_pairs(ids, tq, tk, true, window) > 0) n += tq.size() * tk.size();
              }
          }
        return n;
      };
      auto brute_cost = [&](const seqpar::DocLayout& l, bool in_tiles) {
        return brute_step_cost(phases, P, [&](int a, int b) { return pairs(l, a, b, in_tiles); });
      };
      const seqpar::DocLayout bal = seqpar::balanced_doc_layout(docs, P, true, 8, window);
      for (const seqpar::DocLayout& l : {seqpar::contiguous_layout(seq, P), bal}) {
        const auto pw = seqpar::layout_pair_work(l, docs, true, window);
        const auto work = seqpar::layout_work(l, docs, true, window);
        for (int a = 0; a < P; ++a) {
          int64_t row = 0;
          for (int b = 0; b < P; ++b) {
            EXPECT_EQ(pw[size_t(a)][size_t(b)], pairs(l, a, b, false)) << what;
            row += pairs(l, a, b, false);
          }
          EXPECT_EQ(work[size_t(a)], row) << what;
        }
        EXPECT_DOUBLE_EQ(seqpar::step_cost(l, docs, true, phases, {}, window), brute_cost(l, false))
            << what;
        EXPECT_DOUBLE_EQ(seqpar::step_cost(l, docs, true, phases, tiles, window),
                         brute_cost(l, true))
            << what;
        const auto fw = seqpar::phase_work(l, docs, true, fwd, window);
        for (int x = 0; x < P; ++x) {
          int64_t want = 0;
          for (int a : fwd.queries[0][size_t(x)])
            for (int b = 0; b < P; ++b) want += pairs(l, a, b, false);
          EXPECT_EQ(fw[size_t(x)], want) << what;
        }
      }
      // The refinement for the window: every position once, and the windowed forward imbalance
      // within its cap (or where the start had it).
      const seqpar::DocLayout once =
          seqpar::refine_doc_layout(bal, docs, true, phases, tiles, 8, 1.08, window);
      seqpar::check_doc_layout(once, seq);
      const double imb0 = seqpar::imbalance(seqpar::phase_work(bal, docs, true, fwd, window));
      const double imb1 = seqpar::imbalance(seqpar::phase_work(once, docs, true, fwd, window));
      EXPECT_LE(imb1, std::max(1.08, imb0)) << what;
      // The window of the whole sequence keeps every causal pair: the same numbers and layouts as
      // no window.
      if (window == seq) {
        EXPECT_EQ(bal.runs, seqpar::balanced_doc_layout(docs, P, true).runs) << what;
        EXPECT_EQ(once.runs, seqpar::refine_doc_layout(bal, docs, true, phases, tiles).runs)
            << what;
      }
    }
    // Window 0 is no window.
    const seqpar::DocLayout start = seqpar::contiguous_layout(seq, P);
    for (bool causal : {false, true}) {
      EXPECT_EQ(seqpar::balanced_doc_layout(docs, P, causal, 8, 0).runs,
                seqpar::balanced_doc_layout(docs, P, causal).runs);
      EXPECT_EQ(seqpar::layout_work(start, docs, causal, 0),
                seqpar::layout_work(start, docs, causal));
      EXPECT_EQ(seqpar::step_cost(start, docs, causal, phases, tiles, 0),
                seqpar::step_cost(start, docs, causal, phases, tiles));
      EXPECT_EQ(seqpar::refine_doc_layout(start, docs, causal, phases, tiles, 8, 1.08, 0).runs,
                seqpar::refine_doc_layout(start, docs, causal, phases, tiles).runs);
    }
  }
}

TEST(DocLayout, ChecksItsArguments) {
  const DocBounds docs = kernels::doc_bounds_from_lengths({1000}, 1000);
  expect_usage_error([&] { seqpar::balanced_doc_layout(docs, 4, true); },
                     "multiple of 32 for 4 ranks");
  EXPECT_THROW(seqpar::zigzag_layout(100, 8), UsageError);
  EXPECT_THROW(seqpar::contiguous_layout(100, 0), UsageError);
  seqpar::DocLayout l = seqpar::contiguous_layout(100, 4);
  l.runs[1][0].begin += 1;  // position 25 held by nobody, rank 1 one short
  EXPECT_THROW(seqpar::check_doc_layout(l, 100), Error);
  l = seqpar::contiguous_layout(100, 4);
  std::swap(l.runs[1], l.runs[2]);  // still a partition: fine
  EXPECT_NO_THROW(seqpar::check_doc_layout(l, 100));
  l.runs[3] = l.runs[2];  // positions 25..49 twice, 75..99 never
  EXPECT_THROW(seqpar::check_doc_layout(l, 100), Error);
}

// The target: imbalance <= 1.10 on the long-tailed mix of random_doc_lengths (log-normal, median
// 2048, sigma 2) at S = 65536 and P = 4, 8, 16, causal (GPT) and full (DiT), over several seeds,
// and on a few fixed mixes. Prints the table of docs/documents.md.
TEST(DocLayout, BalancedLayoutMeetsTheTarget) {
  constexpr int64_t kSeq = 65536;
  constexpr double kTarget = 1.10;
  struct Mix {
    std::string name;
    std::vector<int64_t> lengths;
  };
  std::vector<Mix> mixes;
  for (uint64_t seed = 1; seed <= 6; ++seed)
    mixes.push_back(
        {fmt::format("lognormal seed {}", seed), seqpar::random_doc_lengths(kSeq, seed)});
  mixes.push_back({"one document", {kSeq}});
  std::vector<int64_t> half(1, kSeq / 2);
  for (int i = 0; i < 256; ++i) half.push_back(128);
  mixes.push_back({"half + 256 x 128", half});
  std::vector<int64_t> tail(256, 128);
  tail.push_back(kSeq / 2);
  mixes.push_back({"256 x 128 + half", tail});
  mixes.push_back({"1024 x 64", std::vector<int64_t>(1024, 64)});

  std::string table =
      fmt::format("{:<18} {:>5} {:>7} {:>3} {:>6} {:>10} {:>7} {:>9} {:>5}\n", "mix", "docs",
                  "longest", "P", "mask", "contiguous", "zigzag", "balanced", "runs");
  double worst = 0;
  for (const Mix& mix : mixes) {
    const DocBounds docs = kernels::doc_bounds_from_lengths(mix.lengths, kSeq);
    const int64_t longest = *std::max_element(mix.lengths.begin(), mix.lengths.end());
    for (bool causal : {true, false})
      for (int p : {4, 8, 16}) {
        const seqpar::DocLayout bal = seqpar::balanced_doc_layout(docs, p, causal);
        seqpar::check_doc_layout(bal, kSeq);
        size_t runs = 0;
        for (const auto& r : bal.runs) {
          EXPECT_LE(r.size(), 8u);
          runs = std::max(runs, r.size());
        }
        const double ib = seqpar::imbalance(seqpar::layout_work(bal, docs, causal));
        const double ic = seqpar::imbalance(
            seqpar::layout_work(seqpar::contiguous_layout(kSeq, p), docs, causal));
        const double iz =
            seqpar::imbalance(seqpar::layout_work(seqpar::zigzag_layout(kSeq, p), docs, causal));
        EXPECT_LE(ib, kTarget) << mix.name << " P " << p << (causal ? " causal" : " full");
        worst = std::max(worst, ib);
        table += fmt::format("{:<18} {:>5} {:>7} {:>3} {:>6} {:>10.3f} {:>7.3f} {:>9.3f} {:>5}\n",
                             mix.name, docs.count(), longest, p, causal ? "causal" : "full", ic, iz,
                             ib, runs);
      }
  }
  std::printf("%s", table.c_str());
  std::printf("worst balanced imbalance %.4f (target %.2f)\n", worst, kTarget);
}

}  // namespace
}  // namespace wallfacer
