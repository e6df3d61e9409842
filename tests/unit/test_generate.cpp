// The rules of generation across ranks (model/generate.h) and the draw of a token (sampler.h).

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <vector>

#include "wallfacer/core/error.h"
#include "wallfacer/model/generate.h"
#include "wallfacer/model/sampler.h"

namespace wallfacer::model {
namespace {

GptConfig tiny() {
  GptConfig c;
  c.layers = 2;
  c.dim = 32;
  c.heads = 4;
  c.kv_heads = 2;
  return c;
}

// Every prompt length on every strategy: the padded sequence is the next multiple the layout
// splits, and the ranks hold each prompt position once, each rank's in increasing order (the
// rows of its shard).
TEST(Generate, SplitPadsToTheLayoutAndHoldsThePromptOnce) {
  for (const auto s : {seqpar::Strategy::Ring, seqpar::Strategy::Zigzag}) {
    for (int P : {1, 2, 3, 4, 8}) {
      for (int64_t L : {1, 2, 7, 8, 9, 31, 100}) {
        seqpar::AttnConfig a;
        a.strategy = s;
        const PromptSplit sp = split_prompt(tiny(), a, P, L);
        const int64_t unit = s == seqpar::Strategy::Zigzag ? 2 * P : P;
        EXPECT_EQ(sp.padded % unit, 0);
        EXPECT_GE(sp.padded, L);
        EXPECT_LT(sp.padded - L, unit);
        EXPECT_EQ(std::accumulate(sp.held.begin(), sp.held.end(), int64_t(0)), L)
            << "P " << P << " L " << L;
        std::vector<int> seen(size_t(L), 0);
        for (int r = 0; r < P; ++r) {
          int64_t rows = 0, last = -1;
          for (const seqpar::PositionRun& run : sp.runs[size_t(r)]) {
            EXPECT_EQ(run.row0, rows);
            EXPECT_GT(run.pos0, last);
            for (int64_t i = 0; i < run.rows; ++i) ++seen[size_t(run.pos0 + i)];
            rows += run.rows;
            last = run.pos0 + run.rows - 1;
          }
          EXPECT_EQ(rows, sp.held[size_t(r)]);
        }
        EXPECT_EQ(std::count(seen.begin(), seen.end(), 1), L) << "P " << P << " L " << L;
      }
    }
  }
}

TEST(Generate, NewTokensGoToTheSmallestShard) {
  EXPECT_EQ(next_owner({5, 3, 3, 4}), 1);
  const std::vector<int64_t> after = shard_sizes({5, 3, 3, 4}, 6);
  EXPECT_EQ(after, (std::vector<int64_t>{6, 5, 5, 5}));
  const std::vector<int64_t> many = shard_sizes({0, 0, 0}, 100);
  EXPECT_EQ(
      *std::max_element(many.begin(), many.end()) - *std::min_element(many.begin(), many.end()), 1);
}

TEST(Generate, RefusesAnEmptyPrompt) {
  EXPECT_THROW(split_prompt(tiny(), seqpar::AttnConfig{}, 2, 0), UsageError);
}

// The chunk under a limit: a multiple of the layout's unit, shorter than the prompt, whose
// estimate fits, the longest such up to evening out the chunks (one more unit would not fit
// unless the chunks stay as many); none when one unit does not fit. The estimate falls with the
// chunk while the cache stays.
TEST(Generate, PrefillChunkIsTheLongestThatFits) {
  const GptConfig c = tiny();
  for (const auto s : {seqpar::Strategy::Ring, seqpar::Strategy::Zigzag}) {
    for (int P : {1, 3, 8}) {
      seqpar::AttnConfig a;
      a.strategy = s;
      const int64_t L = 5000, unit = prefill_chunk_unit(c, a, P);
      EXPECT_EQ(unit, s == seqpar::Strategy::Zigzag ? 2 * P : P);
      const int64_t rows = (L + P - 1) / P + 1;
      const double small = chunked_memory_bytes(c, a, P, unit, 0, rows);
      const double large = chunked_memory_bytes(c, a, P, 64 * unit, 0, rows);
      EXPECT_LT(small, large);
      EXPECT_GT(small, double(cache_bytes(c, rows)));
      EXPECT_EQ(choose_prefill_chunk(c, a, P, L, 0, rows, small * 0.999), 0);
      for (const double limit : {small, (small + large) / 2, large}) {
        const int64_t chunk = choose_prefill_chunk(c, a, P, L, 0, rows, limit);
        ASSERT_GT(chunk, 0) << "P " << P;
        EXPECT_EQ(chunk % unit, 0);
        EXPECT_LT(chunk, L);
        EXPECT_LE(chunked_memory_bytes(c, a, P, chunk, 0, rows), limit);
        const int64_t chunks = (L + chunk - 1) / chunk;
        const int64_t longer = chunk + unit;
        EXPECT_TRUE(longer >= L || chunked_memory_bytes(c, a, P, longer, 0, rows) > limit ||
                    (L + longer - 1) / longer == chunks)
            << "P " << P << " chunk " << chunk;
      }
    }
  }
}

TEST(Sampler, TopKAndTopPKeepTheMostLikelyTokens) {
  const std::vector<float> logits{0.0f, 3.0f, 1.0f, 2.9f, -1.0f};
  const int V = int(logits.size());
  // Greedy, and top-k 1, pick the largest logit whatever the draw.
  for (double u : {0.0, 0.5, 0.999}) {
    EXPECT_EQ(sample_token(logits.data(), V, Sampling{0.0, 0, 1.0}, u), 1);
    EXPECT_EQ(sample_token(logits.data(), V, Sampling{1.0, 1, 1.0}, u), 1);
    // top-k 2: ids 1 and 3 only.
    const int32_t t = sample_token(logits.data(), V, Sampling{1.0, 2, 1.0}, u);
    EXPECT_TRUE(t == 1 || t == 3) << t;
    // A tiny top-p keeps the most likely token only.
    EXPECT_EQ(sample_token(logits.data(), V, Sampling{1.0, 0, 1e-6}, u), 1);
  }
  // Without a cut, the last draws reach the least likely token's share.
  EXPECT_EQ(sample_token(logits.data(), V, Sampling{100.0, 0, 1.0}, 0.999), 4);
}

}  // namespace
}  // namespace wallfacer::model
