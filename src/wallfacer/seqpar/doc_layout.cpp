#include "wallfacer/seqpar/doc_layout.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "wallfacer/core/error.h"
#include "wallfacer/core/rng.h"
#include "wallfacer/seqpar/schedule.h"

namespace wallfacer::seqpar {
namespace {

void check_ranks(int64_t seq, int ranks, int64_t multiple_of, const char* layout) {
  WF_USAGE_CHECK(ranks >= 1, "{} layout: ranks must be >= 1, got {}", layout, ranks);
  WF_USAGE_CHECK(seq > 0 && seq % multiple_of == 0,
                 "{} layout: the sequence length {} must be a positive multiple of {} for {} "
                 "ranks; pad the sequence or change the number of ranks",
                 layout, seq, multiple_of, ranks);
}

// A rank's runs in order of position.
std::vector<PosRun> sorted(std::vector<PosRun> runs) {
  std::sort(runs.begin(), runs.end(),
            [](const PosRun& a, const PosRun& b) { return a.begin < b.begin; });
  return runs;
}

// Sorts a rank's runs and merges those that touch.
std::vector<PosRun> merged(std::vector<PosRun> runs) {
  runs = sorted(std::move(runs));
  std::vector<PosRun> out;
  for (const PosRun& r : runs) {
    if (!out.empty() && out.back().end == r.begin)
      out.back().end = r.end;
    else
      out.push_back(r);
  }
  return out;
}

// The layout in which rank r holds the chunks owned[r] of `size` positions (chunk c: positions
// [c size, (c + 1) size)), sorted, adjacent ones merged when `merge`.
DocLayout chunk_layout(const std::vector<std::vector<int64_t>>& owned, int64_t size,
                       bool merge = true) {
  DocLayout l;
  for (const auto& chunks : owned) {
    std::vector<PosRun> runs;
    for (int64_t c : chunks) runs.push_back({c * size, (c + 1) * size});
    l.runs.push_back(merge ? merged(std::move(runs)) : sorted(std::move(runs)));
  }
  return l;
}

}  // namespace

int64_t DocLayout::positions(int rank) const {
  int64_t n = 0;
  for (const PosRun& r : runs[rank]) n += r.size();
  return n;
}

DocLayout contiguous_layout(int64_t seq, int ranks) {
  check_ranks(seq, ranks, ranks, "contiguous");
  const int64_t n = seq / ranks;
  DocLayout l;
  for (int r = 0; r < ranks; ++r) l.runs.push_back({{r * n, (r + 1) * n}});
  return l;
}

DocLayout zigzag_layout(int64_t seq, int ranks) {
  check_ranks(seq, ranks, 2 * int64_t(ranks), "zigzag");
  const int64_t c = seq / (2 * int64_t(ranks));
  DocLayout l;
  for (int r = 0; r < ranks; ++r) {
    const int64_t mirror = 2 * int64_t(ranks) - 1 - r;
    l.runs.push_back(merged({{r * c, (r + 1) * c}, {mirror * c, (mirror + 1) * c}}));
  }
  return l;
}

DocLayout balanced_doc_layout(const DocBounds& docs, int ranks, bool causal, int chunks_per_rank,
                              int64_t window) {
  WF_USAGE_CHECK(chunks_per_rank >= 1, "balanced layout: chunks_per_rank must be >= 1, got {}",
                 chunks_per_rank);
  const int64_t seq = docs.seq();
  const int64_t chunks = int64_t(ranks) * chunks_per_rank;
  check_ranks(seq, ranks, chunks, "balanced");
  const int64_t size = seq / chunks;
  const PosRun all{0, seq};
  std::vector<int64_t> work(chunks);
  for (int64_t c = 0; c < chunks; ++c)
    work[c] = kernels::kept_pairs(docs, {c * size, (c + 1) * size}, all, causal, window);

  // Longest processing time first, at most chunks_per_rank chunks per rank.
  std::vector<int64_t> order(chunks);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t a, int64_t b) { return work[a] > work[b]; });
  std::vector<std::vector<int64_t>> owned(ranks);
  std::vector<int64_t> load(ranks, 0);
  for (int64_t c : order) {
    int best = -1;
    for (int r = 0; r < ranks; ++r)
      if (int64_t(owned[r].size()) < chunks_per_rank && (best < 0 || load[r] < load[best]))
        best = r;
    owned[best].push_back(c);
    load[best] += work[c];
  }

  // Swaps between the most loaded rank and another while the larger of the two loads drops.
  for (int iter = 0; iter < 64 * chunks; ++iter) {
    const int hi = static_cast<int>(std::max_element(load.begin(), load.end()) - load.begin());
    int64_t best_gain = 0;
    int best_r = -1;
    size_t best_a = 0, best_b = 0;
    for (int r = 0; r < ranks; ++r) {
      if (r == hi) continue;
      for (size_t a = 0; a < owned[hi].size(); ++a)
        for (size_t b = 0; b < owned[r].size(); ++b) {
          const int64_t delta = work[owned[hi][a]] - work[owned[r][b]];
          if (delta <= 0) continue;
          const int64_t new_max = std::max(load[hi] - delta, load[r] + delta);
          const int64_t gain = load[hi] - new_max;
          if (gain > best_gain) best_gain = gain, best_r = r, best_a = a, best_b = b;
        }
    }
    if (best_r < 0) break;
    const int64_t delta = work[owned[hi][best_a]] - work[owned[best_r][best_b]];
    std::swap(owned[hi][best_a], owned[best_r][best_b]);
    load[hi] -= delta;
    load[best_r] += delta;
  }

  return chunk_layout(owned, size);
}

namespace {

// The phases' cost and per-rank work, from the work between the ranks' positions (w[a * P + b]:
// rank a's queries against rank b's keys, in kept pairs or tile pairs).
struct StepCounter {
  const std::vector<StepPattern>& phases;
  int P;

  void check() const {
    for (const StepPattern& ph : phases) {
      WF_CHECK(ph.queries.size() == ph.keys.size(), "step pattern: {} query steps, {} key steps",
               ph.queries.size(), ph.keys.size());
      for (size_t t = 0; t < ph.queries.size(); ++t) {
        WF_CHECK(int(ph.queries[t].size()) == P && int(ph.keys[t].size()) == P,
                 "step pattern: step {} lists {} / {} ranks, not {}", t, ph.queries[t].size(),
                 ph.keys[t].size(), P);
        for (int r = 0; r < P; ++r)
          for (const auto* list : {&ph.queries[t][size_t(r)], &ph.keys[t][size_t(r)]})
            for (int x : *list)
              WF_CHECK(x >= 0 && x < P, "step pattern: rank {} outside 0..{}", x, P - 1);
      }
    }
  }

  int64_t at(const std::vector<int64_t>& w, const StepPattern& ph, size_t t, int r) const {
    int64_t sum = 0;
    for (int q : ph.queries[t][size_t(r)])
      for (int k : ph.keys[t][size_t(r)]) sum += w[size_t(q) * size_t(P) + size_t(k)];
    return sum;
  }

  double cost(const std::vector<int64_t>& w) const {
    double total = 0;
    for (const StepPattern& ph : phases) {
      int64_t steps = 0;
      for (size_t t = 0; t < ph.queries.size(); ++t) {
        int64_t top = 0;
        for (int r = 0; r < P; ++r) top = std::max(top, at(w, ph, t, r));
        steps += top;
      }
      total += ph.weight * double(steps);
    }
    return total;
  }

  std::vector<int64_t> work(const std::vector<int64_t>& w, const StepPattern& ph) const {
    std::vector<int64_t> out(size_t(P), 0);
    for (size_t t = 0; t < ph.queries.size(); ++t)
      for (int r = 0; r < P; ++r) out[size_t(r)] += at(w, ph, t, r);
    return out;
  }
};

// w[a * P + b]: rank a's queries against rank b's keys, in kept pairs, or with tiles in the pairs
// of the tiles a kernel computes for each pair of runs (attention_tile_pairs).
std::vector<int64_t> flat_pair_work(const DocLayout& layout, const DocBounds& docs, bool causal,
                                    TileSize tiles, int64_t window) {
  if (tiles.q <= 0 || tiles.k <= 0) {
    std::vector<int64_t> w;
    for (const auto& row : layout_pair_work(layout, docs, causal, window))
      w.insert(w.end(), row.begin(), row.end());
    return w;
  }
  const int P = layout.ranks();
  std::vector<int64_t> w(size_t(P) * size_t(P), 0);
  for (int a = 0; a < P; ++a)
    for (int b = 0; b < P; ++b)
      for (const PosRun& q : layout.runs[size_t(a)])
        for (const PosRun& k : layout.runs[size_t(b)])
          w[size_t(a) * size_t(P) + size_t(b)] += attention_tile_pairs(
              docs, q.begin, q.size(), k.begin, k.size(), causal, tiles.q, tiles.k, window);
  return w;
}

// A matrix over chunks (m[q * K + k]: chunk q's queries against chunk k's keys) summed over the
// chunks the ranks own: w[a * P + b] for ranks a, b, kept up to date as ranks swap chunks.
// by_keys[c * P + x]: chunk c against rank x's chunks (as keys); by_queries[c * P + x]: rank x's
// chunks (as queries) against chunk c.
struct RankSums {
  const std::vector<int64_t>& m;
  int64_t K;
  int P;
  std::vector<int64_t> by_keys, by_queries, w;

  int64_t at(int64_t q, int64_t k) const { return m[size_t(q * K + k)]; }
  size_t cell(int64_t c, int x) const { return size_t(c) * size_t(P) + size_t(x); }

  void init(const std::vector<std::vector<int64_t>>& owned) {
    by_keys.assign(size_t(K) * size_t(P), 0);
    by_queries.assign(size_t(K) * size_t(P), 0);
    w.assign(size_t(P) * size_t(P), 0);
    for (int64_t c = 0; c < K; ++c)
      for (int x = 0; x < P; ++x)
        for (int64_t o : owned[size_t(x)]) {
          by_keys[cell(c, x)] += at(c, o);
          by_queries[cell(c, x)] += at(o, c);
        }
    for (int a = 0; a < P; ++a)
      for (int64_t c : owned[size_t(a)])
        for (int b = 0; b < P; ++b) w[cell(a, b)] += by_keys[cell(c, b)];
  }

  // w after rank i gave chunk ca for rank j's chunk cb (`owned` already swapped): the rows and
  // columns of i and j change.
  void trial(const std::vector<std::vector<int64_t>>& owned, int i, int j, int64_t ca, int64_t cb,
             std::vector<int64_t>& out) const {
    out = w;
    for (int x = 0; x < P; ++x) {
      if (x == i || x == j) continue;
      const size_t xa = cell(ca, x), xb = cell(cb, x);
      out[cell(i, x)] += by_keys[xb] - by_keys[xa];
      out[cell(j, x)] += by_keys[xa] - by_keys[xb];
      out[cell(x, i)] += by_queries[xb] - by_queries[xa];
      out[cell(x, j)] += by_queries[xa] - by_queries[xb];
    }
    for (int u : {i, j})
      for (int v : {i, j}) {
        int64_t sum = 0;
        for (int64_t q : owned[size_t(u)])
          for (int64_t k : owned[size_t(v)]) sum += at(q, k);
        out[cell(u, v)] = sum;
      }
  }

  void accept(int i, int j, int64_t ca, int64_t cb, std::vector<int64_t>& out) {
    w.swap(out);
    for (int64_t x = 0; x < K; ++x) {
      const int64_t dk = at(x, cb) - at(x, ca), dq = at(cb, x) - at(ca, x);
      by_keys[cell(x, i)] += dk;
      by_keys[cell(x, j)] -= dk;
      by_queries[cell(x, i)] += dq;
      by_queries[cell(x, j)] -= dq;
    }
  }
};

}  // namespace

double step_cost(const DocLayout& layout, const DocBounds& docs, bool causal,
                 const std::vector<StepPattern>& phases, TileSize tiles, int64_t window) {
  const StepCounter count{phases, layout.ranks()};
  count.check();
  return count.cost(flat_pair_work(layout, docs, causal, tiles, window));
}

std::vector<int64_t> phase_work(const DocLayout& layout, const DocBounds& docs, bool causal,
                                const StepPattern& phase, int64_t window) {
  const std::vector<StepPattern> one = {phase};
  const StepCounter count{one, layout.ranks()};
  count.check();
  return count.work(flat_pair_work(layout, docs, causal, {}, window), phase);
}

DocLayout refine_doc_layout(const DocLayout& start, const DocBounds& docs, bool causal,
                            const std::vector<StepPattern>& phases, TileSize tiles,
                            int chunks_per_rank, double max_imbalance, int64_t window) {
  const int P = start.ranks();
  const int64_t K = int64_t(P) * chunks_per_rank, size = docs.seq() / K;
  WF_CHECK(size > 0 && docs.seq() % K == 0 && !phases.empty(),
           "refine_doc_layout: {} positions, {} ranks, {} chunks each, {} phases", docs.seq(), P,
           chunks_per_rank, phases.size());
  const StepCounter count{phases, P};
  count.check();
  if (P == 1) return start;
  std::vector<std::vector<int64_t>> owned(P);
  for (int r = 0; r < P; ++r)
    for (const PosRun& run : start.runs[r]) {
      WF_CHECK(run.begin % size == 0 && run.end % size == 0,
               "refine_doc_layout: run {}..{} is not made of chunks of {}", run.begin, run.end,
               size);
      for (int64_t c = run.begin / size; c < run.end / size; ++c) owned[r].push_back(c);
    }
  // Between chunk q (queries) and chunk k (keys): the kept pairs, and what the steps' cost
  // counts (the pairs of the tiles computed from each chunk's first row, or the kept pairs).
  std::vector<int64_t> pairs(size_t(K * K)), costs(size_t(K * K));
  for (int64_t q = 0; q < K; ++q)
    for (int64_t k = 0; k < K; ++k) {
      const PosRun qr{q * size, (q + 1) * size}, kr{k * size, (k + 1) * size};
      pairs[size_t(q * K + k)] = kernels::kept_pairs(docs, qr, kr, causal, window);
      costs[size_t(q * K + k)] = attention_tile_pairs(docs, qr.begin, size, kr.begin, size, causal,
                                                      tiles.q, tiles.k, window);
    }
  RankSums kept{pairs, K, P, {}, {}, {}}, costed{costs, K, P, {}, {}, {}};
  kept.init(owned);
  costed.init(owned);
  // Lower is better: the first phase's imbalance (kept pairs) above the cap, then the cost.
  auto excess = [&](const std::vector<int64_t>& cells) {
    return std::max(0.0, imbalance(count.work(cells, phases.front())) - max_imbalance);
  };
  double over = excess(kept.w), cost = count.cost(costed.w);
  std::vector<int64_t> trial_kept, trial_cost;
  Rng rng(0x5EED1A70u);
  const int64_t proposals = std::min<int64_t>(40 * K, 20000);
  for (int64_t proposal = 0; proposal < proposals; ++proposal) {
    const int i = int(rng.next_u64() % uint64_t(P));
    const int j = int((uint64_t(i) + 1 + rng.next_u64() % uint64_t(P - 1)) % uint64_t(P));
    const size_t a = rng.next_u64() % owned[i].size(), b = rng.next_u64() % owned[j].size();
    const int64_t ca = owned[i][a], cb = owned[j][b];
    std::swap(owned[i][a], owned[j][b]);
    kept.trial(owned, i, j, ca, cb, trial_kept);
    costed.trial(owned, i, j, ca, cb, trial_cost);
    const double o = excess(trial_kept), c = count.cost(trial_cost);
    if (o < over || (o == over && c <= cost)) {
      over = o;
      cost = c;
      kept.accept(i, j, ca, cb, trial_kept);
      costed.accept(i, j, ca, cb, trial_cost);
    } else {
      std::swap(owned[i][a], owned[j][b]);
    }
  }
  return chunk_layout(owned, size, /*merge=*/false);
}

std::vector<std::vector<int64_t>> layout_pair_work(const DocLayout& layout, const DocBounds& docs,
                                                   bool causal, int64_t window) {
  const int p = layout.ranks();
  std::vector<std::vector<int64_t>> w(p, std::vector<int64_t>(p, 0));
  for (int r = 0; r < p; ++r)
    for (int s = 0; s < p; ++s)
      for (const PosRun& q : layout.runs[r])
        for (const PosRun& k : layout.runs[s])
          w[r][s] += kernels::kept_pairs(docs, q, k, causal, window);
  return w;
}

std::vector<int64_t> layout_work(const DocLayout& layout, const DocBounds& docs, bool causal,
                                 int64_t window) {
  const auto pair = layout_pair_work(layout, docs, causal, window);
  std::vector<int64_t> w;
  for (const auto& row : pair) w.push_back(std::accumulate(row.begin(), row.end(), int64_t(0)));
  return w;
}

double imbalance(const std::vector<int64_t>& work) {
  if (work.empty()) return 1.0;
  const double total = std::accumulate(work.begin(), work.end(), 0.0);
  if (total == 0) return 1.0;
  return double(*std::max_element(work.begin(), work.end())) / (total / double(work.size()));
}

void check_doc_layout(const DocLayout& layout, int64_t seq) {
  const int p = layout.ranks();
  WF_CHECK(p >= 1 && seq % p == 0, "doc layout: {} ranks cannot hold {} positions equally", p, seq);
  std::vector<std::pair<PosRun, int>> all;
  for (int r = 0; r < p; ++r) {
    WF_CHECK(layout.positions(r) == seq / p, "doc layout: rank {} holds {} positions, not {}", r,
             layout.positions(r), seq / p);
    for (const PosRun& run : layout.runs[r]) {
      WF_CHECK(run.size() > 0, "doc layout: rank {} has an empty run at {}", r, run.begin);
      all.push_back({run, r});
    }
  }
  std::sort(all.begin(), all.end(),
            [](const auto& a, const auto& b) { return a.first.begin < b.first.begin; });
  int64_t next = 0;
  for (const auto& [run, r] : all) {
    WF_CHECK(run.begin == next, "doc layout: position {} is {} (rank {}'s run starts at {})", next,
             run.begin > next ? "held by no rank" : "held twice", r, run.begin);
    next = run.end;
  }
  WF_CHECK(next == seq, "doc layout: positions {} .. {} are held by no rank", next, seq - 1);
}

std::vector<int64_t> random_doc_lengths(int64_t seq, uint64_t seed, double median) {
  WF_USAGE_CHECK(seq > 0 && median > 0, "random documents: seq {} and median {} must be positive",
                 seq, median);
  Rng rng(mix64(seed, 0x646f6373));
  std::vector<int64_t> lengths;
  int64_t left = seq;
  while (left > 0) {
    const double x = median * std::exp(2.0 * rng.normal());
    const int64_t len =
        std::clamp<int64_t>(static_cast<int64_t>(std::ceil(std::min(x, 1e18))), 1, left);
    lengths.push_back(len);
    left -= len;
  }
  return lengths;
}

std::vector<int64_t> random_doc_lengths_count(int64_t seq, int64_t count, uint64_t seed) {
  WF_USAGE_CHECK(count >= 1 && count <= seq,
                 "random documents: {} documents cannot fill {} positions; give 1 to {} documents",
                 count, seq, seq);
  Rng rng(mix64(seed, 0x636f756e74));
  std::vector<double> w(count);
  double total = 0;
  for (double& x : w) total += x = std::exp(2.0 * rng.normal());
  const int64_t spare = seq - count;
  std::vector<int64_t> lengths(count);
  int64_t used = 0;
  for (int64_t d = 0; d < count; ++d) {
    lengths[d] =
        1 + std::min(spare, static_cast<int64_t>(std::floor(double(spare) * w[d] / total)));
    used += lengths[d];
  }
  for (int64_t d = 0; used < seq; d = (d + 1) % count, ++used) ++lengths[d];
  return lengths;
}

std::vector<int64_t> doc_lengths_from_options(const std::vector<int64_t>& lengths,
                                              int64_t random_count, int64_t seq, uint64_t seed) {
  WF_USAGE_CHECK(lengths.empty() || random_count == 0,
                 "--docs and --docs-random exclude each other; give one");
  WF_USAGE_CHECK(random_count >= 0, "--docs-random is {}; give a number of documents >= 1",
                 random_count);
  if (random_count > 0) {
    WF_USAGE_CHECK(random_count <= seq,
                   "--docs-random {} exceeds --seq {}: a document holds at least one position",
                   random_count, seq);
    return random_doc_lengths_count(seq, random_count, seed);
  }
  if (lengths.empty()) return {};
  int64_t sum = 0;
  for (size_t i = 0; i < lengths.size(); ++i) {
    WF_USAGE_CHECK(lengths[i] > 0, "--docs: length {} (document {}) must be positive", lengths[i],
                   i);
    sum += lengths[i];
  }
  WF_USAGE_CHECK(sum == seq, "--docs lengths sum to {}, not to --seq {}; make them sum to --seq",
                 sum, seq);
  return lengths;
}

}  // namespace wallfacer::seqpar
