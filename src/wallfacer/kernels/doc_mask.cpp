#include "wallfacer/kernels/doc_mask.h"

#include <algorithm>
#include <limits>

#include "wallfacer/core/error.h"

namespace wallfacer::kernels {

int DocBounds::doc_at(int64_t pos) const {
  return static_cast<int>(std::upper_bound(starts.begin(), starts.end(), pos) - starts.begin()) - 1;
}

DocBounds doc_bounds_from_lengths(const std::vector<int64_t>& lengths, int64_t seq) {
  WF_USAGE_CHECK(!lengths.empty(), "documents: no document lengths given; give at least one");
  WF_USAGE_CHECK(lengths.size() <= size_t(std::numeric_limits<int32_t>::max()),
                 "documents: {} documents exceed the {} that int32 ids can number", lengths.size(),
                 std::numeric_limits<int32_t>::max());
  DocBounds b;
  b.starts.reserve(lengths.size() + 1);
  b.starts.push_back(0);
  for (size_t d = 0; d < lengths.size(); ++d) {
    WF_USAGE_CHECK(lengths[d] > 0,
                   "documents: length {} of document {} must be positive; drop empty documents",
                   lengths[d], d);
    WF_USAGE_CHECK(lengths[d] <= seq - b.starts.back(),
                   "documents: the lengths exceed the sequence of {} positions at document {}; "
                   "they must sum to the sequence length",
                   seq, d);
    b.starts.push_back(b.starts.back() + lengths[d]);
  }
  WF_USAGE_CHECK(b.starts.back() == seq,
                 "documents: the {} lengths sum to {}, not to the sequence length {}; pad with a "
                 "last document of {} positions or fix the lengths",
                 lengths.size(), b.starts.back(), seq, seq - b.starts.back());
  return b;
}

DocBounds doc_bounds_from_starts(std::vector<int64_t> starts, int64_t seq) {
  WF_USAGE_CHECK(starts.size() >= 2 && starts.front() == 0 && starts.back() == seq,
                 "documents: cumulative lengths must run from 0 to the sequence length {}", seq);
  for (size_t d = 0; d + 1 < starts.size(); ++d)
    WF_USAGE_CHECK(starts[d] < starts[d + 1],
                   "documents: cumulative lengths must increase, but entry {} is {} and entry {} "
                   "is {}; every document needs at least one position",
                   d, starts[d], d + 1, starts[d + 1]);
  WF_USAGE_CHECK(starts.size() - 1 <= size_t(std::numeric_limits<int32_t>::max()),
                 "documents: too many documents for int32 ids");
  return DocBounds{std::move(starts)};
}

std::vector<int32_t> doc_of_pos(const DocBounds& docs) {
  std::vector<int32_t> ids(docs.seq());
  for (int d = 0; d < docs.count(); ++d)
    std::fill(ids.begin() + docs.starts[d], ids.begin() + docs.starts[d + 1], int32_t(d));
  return ids;
}

std::vector<DocPiece> docs_in_run(const DocBounds& docs, PosRun run) {
  std::vector<DocPiece> pieces;
  if (run.size() <= 0) return pieces;
  WF_CHECK(run.begin >= 0 && run.end <= docs.seq(), "documents: run [{}, {}) outside [0, {})",
           run.begin, run.end, docs.seq());
  for (int d = docs.doc_at(run.begin); d < docs.count() && docs.starts[d] < run.end; ++d)
    pieces.push_back(
        {d, {std::max(run.begin, docs.starts[d]), std::min(run.end, docs.starts[d + 1])}});
  return pieces;
}

namespace {

// sum_{t=1}^{m} t
int64_t triangle(int64_t m) { return m > 0 ? m * (m + 1) / 2 : 0; }

// The causal pairs: query i sees the keys at positions <= i.
int64_t causal_pairs(PosRun q, PosRun k) {
  // Query i sees clamp(i - k.begin + 1, 0, |k|) keys: a ramp over [k.begin, k.end), then flat.
  const int64_t n = k.size();
  const int64_t ramp_lo = std::max(q.begin, k.begin), ramp_hi = std::min(q.end, k.end);
  int64_t pairs = 0;
  if (ramp_hi > ramp_lo) pairs += triangle(ramp_hi - k.begin) - triangle(ramp_lo - k.begin);
  const int64_t flat_lo = std::max(q.begin, k.end);
  if (q.end > flat_lo) pairs += (q.end - flat_lo) * n;
  return pairs;
}

}  // namespace

int64_t kept_pairs(PosRun q, PosRun k, bool causal, int64_t window) {
  if (q.size() <= 0 || k.size() <= 0) return 0;
  if (!causal) return q.size() * k.size();
  // With a window W the pairs j <= i less those with j <= i - W: the causal pairs of the queries
  // moved W positions back.
  const int64_t pairs = causal_pairs(q, k);
  if (window <= 0) return pairs;
  return pairs - causal_pairs({q.begin - window, q.end - window}, k);
}

int64_t kept_pairs(const DocBounds& docs, PosRun q, PosRun k, bool causal, int64_t window) {
  if (q.size() <= 0 || k.size() <= 0) return 0;
  WF_CHECK(q.begin >= 0 && q.end <= docs.seq() && k.begin >= 0 && k.end <= docs.seq(),
           "documents: runs [{}, {}) and [{}, {}) must lie in [0, {})", q.begin, q.end, k.begin,
           k.end, docs.seq());
  // Only documents that both runs touch contribute.
  const int first = std::max(docs.doc_at(q.begin), docs.doc_at(k.begin));
  const int last = std::min(docs.doc_at(q.end - 1), docs.doc_at(k.end - 1));
  int64_t pairs = 0;
  for (int d = first; d <= last; ++d) {
    const PosRun doc{docs.starts[d], docs.starts[d + 1]};
    const PosRun qd{std::max(q.begin, doc.begin), std::min(q.end, doc.end)};
    const PosRun kd{std::max(k.begin, doc.begin), std::min(k.end, doc.end)};
    pairs += kept_pairs(qd, kd, causal, window);
  }
  return pairs;
}

}  // namespace wallfacer::kernels
