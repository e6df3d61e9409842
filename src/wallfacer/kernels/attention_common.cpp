#include "wallfacer/kernels/attention_common.h"

#include <algorithm>

#include "wallfacer/core/error.h"

namespace wallfacer::kernels::detail {

int visible_keys(int64_t q_pos, int64_t k_pos_first, int nk) {
  const int64_t v = q_pos - k_pos_first + 1;
  return static_cast<int>(std::clamp<int64_t>(v, 0, nk));
}

int window_first_key(int64_t q_pos, int64_t window, int64_t k_pos_first, int nk) {
  return static_cast<int>(std::clamp<int64_t>(q_pos - window + 1 - k_pos_first, 0, nk));
}

void check_window(const char* fn, bool causal, int64_t window) {
  WF_CHECK(window >= 0, "{}: window {} must be >= 0 (0: no window)", fn, window);
  WF_CHECK(window == 0 || causal,
           "{}: a window ({}) needs the causal mask: a query sees keys in (pos - window, pos]", fn,
           window);
}

int first_query_block(const AttnDims& d, int64_t q_pos0, int64_t k_pos_first, int block_q) {
  const int64_t first = k_pos_first - q_pos0;  // first query row that sees a key of the tile
  if (first >= d.seq_q) return d.seq_q;
  return static_cast<int>(std::max<int64_t>(0, first) / block_q * block_q);
}

TileDocs tile_docs(const int32_t* doc, int64_t q_first, int64_t q_last, int64_t k_first,
                   int64_t k_last) {
  if (doc[q_last] < doc[k_first] || doc[k_last] < doc[q_first]) return TileDocs::Disjoint;
  if (doc[q_first] == doc[q_last] && doc[k_first] == doc[k_last] && doc[q_first] == doc[k_first])
    return TileDocs::Inside;
  return TileDocs::Crossing;
}

void doc_key_range(const int32_t* doc, int64_t q_pos, int64_t k_first, int nk, int* lo, int* hi) {
  const int32_t id = doc[q_pos];
  const int32_t* keys = doc + k_first;
  const auto [first, last] = std::equal_range(keys, keys + nk, id);
  *lo = static_cast<int>(first - keys);
  *hi = static_cast<int>(last - keys);
}

int first_row_from_doc(const int32_t* doc, int64_t pos0, int n, int32_t id) {
  const int32_t* rows = doc + pos0;
  return static_cast<int>(std::lower_bound(rows, rows + n, id) - rows);
}

void check_doc_of_pos(const char* fn, const int32_t* doc, int64_t q_pos0, int seq_q, int64_t k_pos0,
                      int seq_k) {
  WF_CHECK(q_pos0 >= 0 && k_pos0 >= 0,
           "{}: with doc_of_pos, q_pos0 {} and k_pos0 {} index it and must be >= 0", fn, q_pos0,
           k_pos0);
  const auto check_run = [&](const char* what, int64_t pos0, int n) {
    for (int64_t t = pos0 + 1; t < pos0 + n; ++t)
      WF_CHECK(doc[t - 1] <= doc[t],
               "{}: doc_of_pos must be non-decreasing along positions, but the {} rows have id {} "
               "at position {} and {} at position {}; number documents in sequence order",
               fn, what, doc[t - 1], t - 1, doc[t], t);
  };
  check_run("query", q_pos0, seq_q);
  check_run("key", k_pos0, seq_k);
}

void check_strides(const char* name, const Strides3& s, int seq, int heads, int head_dim) {
  WF_CHECK(s.seq >= head_dim || seq <= 1,
           "attention: {} seq stride {} is smaller than head_dim {}; rows must not overlap", name,
           s.seq, head_dim);
  WF_CHECK(s.head >= head_dim || heads <= 1,
           "attention: {} head stride {} is smaller than head_dim {}", name, s.head, head_dim);
  WF_CHECK(s.batch >= 0 && s.seq >= 0 && s.head >= 0, "attention: {} has a negative stride", name);
}

void check_dims(const AttnDims& d) {
  WF_CHECK(d.batch >= 1, "attention: batch must be >= 1, got {}", d.batch);
  WF_CHECK(d.seq_q >= 0 && d.seq_k >= 0, "attention: seq_q {} and seq_k {} must be >= 0", d.seq_q,
           d.seq_k);
  WF_CHECK(d.heads >= 1 && d.kv_heads >= 1, "attention: heads {} and kv_heads {} must be >= 1",
           d.heads, d.kv_heads);
  WF_CHECK(d.heads % d.kv_heads == 0,
           "attention: heads {} must be a multiple of kv_heads {} (grouped-query attention)",
           d.heads, d.kv_heads);
  WF_CHECK(d.head_dim >= 1 && d.head_dim <= kMaxHeadDim, "attention: head_dim {} not in [1, {}]",
           d.head_dim, kMaxHeadDim);
}

void zero_rows(float* base, int64_t row_stride, int rows, int head_dim) {
  for (int i = 0; i < rows; ++i)
    std::fill(base + i * row_stride, base + i * row_stride + head_dim, 0.0f);
}

int bwd_key_parts(const AttnDims& d, int threads, int block_k) {
  const int tasks = d.batch * d.kv_heads;
  if (tasks >= threads || d.seq_k == 0) return 1;
  const int key_tiles = (d.seq_k + block_k - 1) / block_k;
  return std::min((threads + tasks - 1) / tasks, key_tiles);
}

int64_t bwd_extra_dq_floats(const AttnDims& d, int parts) {
  return int64_t(parts - 1) * d.batch * d.heads * d.seq_q * d.head_dim;
}

std::vector<int> split_keys(const AttnDims& d, bool causal, int64_t window, int64_t q_pos0,
                            int64_t k_pos0, int block_k, int parts) {
  const int bk = block_k;
  const int tiles = (d.seq_k + bk - 1) / bk;
  std::vector<double> work(tiles);
  double total = 0;
  for (int jt = 0; jt < tiles; ++jt) {
    int64_t rows = d.seq_q;
    if (causal) {
      const int64_t first = k_pos0 + int64_t(jt) * bk - q_pos0;  // first row seeing the tile
      rows = d.seq_q - std::clamp<int64_t>(first, 0, d.seq_q);
      if (window > 0) {  // rows past the last that has a key of the tile in its window
        const int64_t last_key = std::min<int64_t>(int64_t(jt + 1) * bk, d.seq_k) - 1;
        const int64_t end = k_pos0 + last_key + window - q_pos0;  // one past the last row
        rows -= d.seq_q - std::clamp<int64_t>(end, 0, d.seq_q);
        rows = std::max<int64_t>(rows, 0);
      }
    }
    work[jt] = double(rows) + 1.0;
    total += work[jt];
  }
  std::vector<int> cut(parts + 1, d.seq_k);
  cut[0] = 0;
  double acc = 0;
  int next = 1;
  for (int jt = 0; jt < tiles && next < parts; ++jt) {
    acc += work[jt];
    if (acc >= total * next / parts) cut[next++] = std::min((jt + 1) * bk, d.seq_k);
  }
  return cut;
}

}  // namespace wallfacer::kernels::detail
