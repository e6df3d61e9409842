#pragma once
// Documents of a packed sequence: many documents in one long sequence, each token attending only
// to tokens of its own document (causally for a GPT, fully for DiT clips). Builds the doc_of_pos
// array the attention kernels take (kernels/attention.h) and counts the (query, key) pairs a
// document mask keeps, the work measure of seqpar/doc_layout.h.
//
// Positions are global (0 .. seq - 1). Document d holds positions [starts[d], starts[d + 1]).

#include <cstdint>
#include <vector>

namespace wallfacer::kernels {

// A run of consecutive global positions [begin, end).
struct PosRun {
  int64_t begin = 0, end = 0;
  int64_t size() const { return end - begin; }
  bool operator==(const PosRun& o) const { return begin == o.begin && end == o.end; }
};

// Documents as cumulative lengths: starts[0] = 0 < starts[1] < ... < starts[count()] = seq().
struct DocBounds {
  std::vector<int64_t> starts;
  int count() const { return static_cast<int>(starts.size()) - 1; }
  int64_t seq() const { return starts.back(); }
  int64_t length(int d) const { return starts[d + 1] - starts[d]; }
  // The document holding global position pos (0 <= pos < seq()).
  int doc_at(int64_t pos) const;
};

// Cumulative lengths of documents of the given lengths, which must be positive and sum to seq
// (throws wallfacer::UsageError saying which length is wrong otherwise).
DocBounds doc_bounds_from_lengths(const std::vector<int64_t>& lengths, int64_t seq);

// Checks cumulative lengths: starts[0] == 0, strictly increasing, last == seq (UsageError).
DocBounds doc_bounds_from_starts(std::vector<int64_t> starts, int64_t seq);

// The doc_of_pos array of the attention kernels: entry t is the document of position t.
std::vector<int32_t> doc_of_pos(const DocBounds& docs);

// One document's part of a run of positions.
struct DocPiece {
  int doc = 0;
  PosRun run;  // the positions of the run inside document `doc`
};

// The documents a run of positions touches, in order, each with its part of the run:
// O(log documents + documents touched).
std::vector<DocPiece> docs_in_run(const DocBounds& docs, PosRun run);

// Number of (query, key) pairs kept between a query run and a key run of the sequence when a
// token sees only its own document (and, when causal, keys at positions <= its own; with a
// sliding window W > 0, causal only, keys at positions > its own - W as well):
// O(log documents + documents touched). Runs must lie inside [0, seq()).
int64_t kept_pairs(const DocBounds& docs, PosRun q, PosRun k, bool causal, int64_t window = 0);

// The same without documents (one document spanning everything).
int64_t kept_pairs(PosRun q, PosRun k, bool causal, int64_t window = 0);

}  // namespace wallfacer::kernels
