#pragma once
// Where the positions of a packed sequence (many documents, kernels/doc_mask.h) go among P ranks,
// so that each rank holds seq / P positions and the document-masked attention work is balanced.
// Pure functions: no MPI.
//
// Work. Rank r computes the attention of its query positions against every key position; the work
// of a pair of ranks (r, s) is the number of (query, key) pairs the mask keeps between r's runs and
// s's runs (kernels::kept_pairs), and rank r's work is its row of that matrix summed over s.
// Imbalance = max / mean of the ranks' work (1.0: perfect). Every function that counts the work
// takes the sliding window of the mask last (`window`, causal only: a query keeps the keys less
// than `window` positions back; 0, the default: none), so that a windowed attention is balanced
// for the pairs its kernels compute.
//
// Layouts. contiguous_layout: rank r holds [r seq / P, (r + 1) seq / P). zigzag_layout: the
// sequence cut into 2P equal chunks, rank r holding chunks r and 2P - 1 - r (balanced for one
// causal document). balanced_doc_layout: the document-aware layout, described at its declaration.

#include <cstdint>
#include <string>
#include <vector>

#include "wallfacer/kernels/doc_mask.h"

namespace wallfacer::seqpar {

using kernels::DocBounds;
using kernels::PosRun;

// The runs of positions each rank holds, sorted; adjacent runs are merged, except in
// refine_doc_layout's layouts (one run per chunk: a kernel call each, so that the tiles it
// computes are those the refinement counted).
struct DocLayout {
  std::vector<std::vector<PosRun>> runs;  // runs[r]: rank r's positions
  int ranks() const { return static_cast<int>(runs.size()); }
  int64_t positions(int rank) const;
};

// The defaults of balanced_doc_layout and refine_doc_layout: chunks per rank, and the forward
// imbalance the refinement holds.
inline constexpr int kChunksPerRank = 8;
inline constexpr double kMaxImbalance = 1.08;

DocLayout contiguous_layout(int64_t seq, int ranks);
DocLayout zigzag_layout(int64_t seq, int ranks);

// The document-aware layout. The sequence is cut into ranks * chunks_per_rank chunks of equal size;
// each chunk's work (its queries against the whole sequence under the document mask) is counted
// exactly; chunks go to ranks longest-processing-time first (heaviest chunk to the least loaded
// rank that still has room for a chunk, so that every rank gets chunks_per_rank chunks), and then
// pairwise swaps of chunks between the most loaded rank and another rank are made while they lower
// the larger of the two loads. Adjacent chunks of a rank merge into one run, so a rank holds at
// most chunks_per_rank runs. seq must be a multiple of ranks * chunks_per_rank (UsageError
// otherwise).
DocLayout balanced_doc_layout(const DocBounds& docs, int ranks, bool causal,
                              int chunks_per_rank = kChunksPerRank, int64_t window = 0);

// The work of a schedule step by step, for refine_doc_layout: at step t, rank r computes the
// queries of the ranks queries[t][r] against the keys of the ranks keys[t][r] (every pair of the
// two lists). The ranks meet at every step (a block moves on), so a phase costs about the sum over
// its steps of the busiest rank's work there, times `weight` (a backward pair costs about 2.5
// forward ones).
struct StepPattern {
  double weight = 1.0;
  std::vector<std::vector<std::vector<int>>> queries, keys;  // [step][rank]: ranks
};

// The tiles of the attention kernels (query rows x key rows), to count the work the way they do
// it: every tile the mask does not cut away entirely is computed whole (attention_tile_pairs).
// 0 x 0: count the kept pairs.
struct TileSize {
  int q = 0, k = 0;
};

// The cost of a layout under the phases: sum over the phases of weight x the sum over the steps
// of the largest rank's work at that step: the kept pairs, or with tiles the pairs of the tiles
// computed for each pair of runs (tiles from the first row of each run, as the kernels do).
double step_cost(const DocLayout& layout, const DocBounds& docs, bool causal,
                 const std::vector<StepPattern>& phases, TileSize tiles = {}, int64_t window = 0);

// Each rank's kept pairs over all steps of one phase (the work whose max / mean is the imbalance).
std::vector<int64_t> phase_work(const DocLayout& layout, const DocBounds& docs, bool causal,
                                const StepPattern& phase, int64_t window = 0);

// The layout refined for a schedule's steps, starting from `start` (of chunks of
// seq / (ranks * chunks_per_rank) positions, as balanced_doc_layout gives): swaps of two chunks of
// two ranks, proposed in a fixed pseudo-random order (every rank computes the same layout), are
// kept when they lower the imbalance of the first phase's work (the forward's) while it is above
// max_imbalance, or keep it at most max_imbalance (or where it was) and do not raise step_cost.
// Balancing each rank's total alone leaves a step in which one rank holds the queries of a long
// document and its neighbour's keys while the others wait; this balances the steps. Every rank
// keeps its number of positions. With tiles, the cost counts the tiles of each pair of chunks
// (from each chunk's first row); the layout keeps every chunk a run of its own, so that step_cost
// of the result counts the same.
DocLayout refine_doc_layout(const DocLayout& start, const DocBounds& docs, bool causal,
                            const std::vector<StepPattern>& phases, TileSize tiles = {},
                            int chunks_per_rank = kChunksPerRank,
                            double max_imbalance = kMaxImbalance, int64_t window = 0);

// Kept (query, key) pairs between rank r's runs (queries) and rank s's runs (keys): work[r][s].
std::vector<std::vector<int64_t>> layout_pair_work(const DocLayout& layout, const DocBounds& docs,
                                                   bool causal, int64_t window = 0);

// Each rank's work: its row of layout_pair_work summed.
std::vector<int64_t> layout_work(const DocLayout& layout, const DocBounds& docs, bool causal,
                                 int64_t window = 0);

// max / mean of the work (1.0 when all are zero).
double imbalance(const std::vector<int64_t>& work);

// Checks that the layout covers every position of [0, seq) exactly once and gives every rank
// seq / ranks positions; throws wallfacer::Error saying what is wrong otherwise.
void check_doc_layout(const DocLayout& layout, int64_t seq);

// Document lengths of a packed sequence of seq positions for tests and benchmarks, seeded: lengths
// drawn from a log-normal distribution with median `median` and sigma 2 (long-tailed: half of the
// draws are under the median, about one in 12 is over 16 times it, i.e. over half of a 65536
// sequence at the default median), each rounded up to at least 1 and cut to what is left of the
// sequence; the last document ends the sequence.
std::vector<int64_t> random_doc_lengths(int64_t seq, uint64_t seed, double median = 2048.0);

// `count` document lengths filling seq positions, seeded: weights drawn from the same log-normal
// (sigma 2), lengths 1 + their share of the other seq - count positions (remainders to the first
// documents). 1 <= count <= seq (UsageError otherwise).
std::vector<int64_t> random_doc_lengths_count(int64_t seq, int64_t count, uint64_t seed);

// The document lengths of a command's --docs L1,L2,... (`lengths`) or --docs-random N
// (`random_count` > 0: random_doc_lengths_count, seeded) for a sequence of seq positions; empty
// when neither is given (one document). UsageError naming the option when both are given, a
// length is not positive, the lengths do not sum to seq, or N is not in 1 .. seq.
std::vector<int64_t> doc_lengths_from_options(const std::vector<int64_t>& lengths,
                                              int64_t random_count, int64_t seq, uint64_t seed);

}  // namespace wallfacer::seqpar
