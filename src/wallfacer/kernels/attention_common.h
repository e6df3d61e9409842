#pragma once
// What the fp32 and bf16 flash-attention kernels share: argument checks, causal visibility and
// the backward's work split. Internal to the kernels.

#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "wallfacer/core/bf16.h"
#include "wallfacer/kernels/attention.h"

namespace wallfacer::kernels::detail {

// Number of leading keys of a tile of nk keys starting at global position k_pos_first that a query
// at global position q_pos may see under a causal mask.
int visible_keys(int64_t q_pos, int64_t k_pos_first, int nk);

// Sliding window (AttnFwdParams::window = W > 0, causal): the first of the nk keys of a tile
// starting at global position k_pos_first that a query at global position q_pos sees (keys at
// positions > q_pos - W); nk when it sees none of them.
int window_first_key(int64_t q_pos, int64_t window, int64_t k_pos_first, int nk);

// Checks the window argument of `fn`: >= 0, and > 0 only with a causal mask (throws
// wallfacer::Error).
void check_window(const char* fn, bool causal, int64_t window);

// The backward under a causal mask: the first query row of the first block of `block_q` rows that
// sees a key of a tile whose first key is at global position k_pos_first (seq_q when none does).
int first_query_block(const AttnDims& d, int64_t q_pos0, int64_t k_pos_first, int block_q);

// Document masks (AttnFwdParams::doc_of_pos; ids non-decreasing along positions).
// How a (query tile, key tile) pair relates to the documents of its rows:
//   Disjoint: no document has both a query and a key of the pair (the pair is skipped);
//   Inside:   every query and key is in one document (the unmasked code path);
//   Crossing: the rows straddle a boundary (each row keeps the keys of its own document).
enum class TileDocs { Disjoint, Inside, Crossing };
TileDocs tile_docs(const int32_t* doc, int64_t q_first, int64_t q_last, int64_t k_first,
                   int64_t k_last);

// The keys [*lo, *hi) of a tile of nk keys starting at global position k_first that lie in the
// document of the query at global position q_pos (*lo == *hi when none does).
void doc_key_range(const int32_t* doc, int64_t q_pos, int64_t k_first, int nk, int* lo, int* hi);

// The first of n rows starting at global position pos0 whose document id is >= id (n when none).
int first_row_from_doc(const int32_t* doc, int64_t pos0, int n, int32_t id);

// The masks of one (query tile, key tile) pair that has work: the pair's first query and key
// positions, whether the causal mask or the sliding window cuts its rows (the tile straddles the
// diagonal or the window's lower edge), the window (0: none) and, when the pair crosses a document
// boundary, the document ids (nullptr inside one document).
struct TileMask {
  int64_t q_first = 0, k_first = 0;
  bool partial = false;
  const int32_t* doc = nullptr;
  int64_t window = 0;
  // Whether every row keeps every key of the tile.
  bool whole() const { return !partial && !doc; }
  // The keys [*lo, *hi) of the tile's nk keys that query row i keeps: its causal prefix, from the
  // first key of its window, within its document. *lo == *hi when it keeps none.
  void keys(int i, int nk, int* lo, int* hi) const {
    const int64_t q_pos = q_first + i;
    *lo = 0;
    *hi = partial ? visible_keys(q_pos, k_first, nk) : nk;
    if (partial && window > 0) *lo = window_first_key(q_pos, window, k_first, nk);
    if (doc) {
      int doc_lo, doc_hi;
      doc_key_range(doc, q_pos, k_first, nk, &doc_lo, &doc_hi);
      *lo = std::max(*lo, doc_lo);
      *hi = std::min(*hi, doc_hi);
    }
    *hi = std::max(*lo, *hi);
  }
};

// The mask of the tile pair of query positions [q_first, q_last] and key positions
// [k_first, k_last]; `crossing`: the pair straddles a document boundary (doc is then kept).
inline TileMask tile_mask(int64_t q_first, int64_t q_last, int64_t k_first, int64_t k_last,
                          bool causal, int64_t window, const int32_t* doc, bool crossing) {
  const bool cut_window = window > 0 && k_first <= q_last - window;
  return TileMask{q_first, k_first, causal && (k_last > q_first || cut_window),
                  crossing ? doc : nullptr, causal ? window : 0};
}

// The forward's walk over key tiles: calls fn(j0, nk, mask) for the tiles of `block_k` keys (tile
// starts multiples of block_k, key row j at global position k_pos0 + j) that the query rows at
// global positions [q_first, q_last] see a key of, in order. Tiles in the future (causal) end the
// walk; with a window (causal, window > 0) it starts at the tile of the first query's first key in
// the window; with documents (doc non-null) it starts at the tile of the first key of the first
// query's document, skips tiles with no document in common and ends past the last query's document.
template <typename Fn>
void for_each_key_tile(int seq_k, int64_t k_pos0, int block_k, int64_t q_first, int64_t q_last,
                       bool causal, int64_t window, const int32_t* doc, Fn fn) {
  int j_start = doc ? first_row_from_doc(doc, k_pos0, seq_k, doc[q_first]) / block_k * block_k : 0;
  if (causal && window > 0) {
    const int64_t first = std::clamp<int64_t>(q_first - window + 1 - k_pos0, 0, seq_k);
    j_start = std::max(j_start, first == seq_k ? seq_k : int(first) / block_k * block_k);
  }
  for (int j0 = j_start; j0 < seq_k; j0 += block_k) {
    const int nk = std::min(block_k, seq_k - j0);
    const int64_t k_first = k_pos0 + j0, k_last = k_first + nk - 1;
    if (causal && k_first > q_last) break;  // this tile and all later ones are future
    const TileDocs docs = doc ? tile_docs(doc, q_first, q_last, k_first, k_last) : TileDocs::Inside;
    if (docs == TileDocs::Disjoint) {
      if (doc[k_first] > doc[q_last]) break;  // later tiles are in later documents
      continue;
    }
    fn(j0, nk,
       tile_mask(q_first, q_last, k_first, k_last, causal, window, doc,
                 docs == TileDocs::Crossing));
  }
}

// The backward's walk over query blocks for one key tile (global positions [k_first, k_last]):
// calls fn(i0, nq, mask) for the blocks of `block_q` rows (query row i at global position
// q_pos0 + i) that see a key of the tile, in order, skipping those that the causal mask or the
// documents leave without work and ending past the last query whose window (causal, window > 0)
// holds a key of the tile.
template <typename Fn>
void for_each_query_block(const AttnDims& d, int64_t q_pos0, int block_q, int64_t k_first,
                          int64_t k_last, bool causal, int64_t window, const int32_t* doc, Fn fn) {
  // Query blocks that end before the key tile starts are entirely masked under causal, and so are
  // those before the tile's first document.
  int i_start = causal ? first_query_block(d, q_pos0, k_first, block_q) : 0;
  if (doc)
    i_start = std::max(i_start,
                       first_row_from_doc(doc, q_pos0, d.seq_q, doc[k_first]) / block_q * block_q);
  for (int i0 = i_start; i0 < d.seq_q; i0 += block_q) {
    const int nq = std::min(block_q, d.seq_q - i0);
    const int64_t q_first = q_pos0 + i0, q_last = q_first + nq - 1;
    if (causal && k_first > q_last) continue;
    if (causal && window > 0 && q_first - window >= k_last) break;  // later blocks are further
    const TileDocs docs = doc ? tile_docs(doc, q_first, q_last, k_first, k_last) : TileDocs::Inside;
    if (docs == TileDocs::Disjoint) {
      if (doc[q_first] > doc[k_last]) break;  // later blocks are in later documents
      continue;
    }
    fn(i0, nq,
       tile_mask(q_first, q_last, k_first, k_last, causal, window, doc,
                 docs == TileDocs::Crossing));
  }
}

// Checks a document mask's arguments: non-negative positions and ids non-decreasing over the query
// rows and over the key rows (throws wallfacer::Error naming `fn`).
void check_doc_of_pos(const char* fn, const int32_t* doc, int64_t q_pos0, int seq_q, int64_t k_pos0,
                      int seq_k);

void check_dims(const AttnDims& d);
void check_strides(const char* name, const Strides3& s, int seq, int heads, int head_dim);

// Zeroes rows [0, rows) of one head of a (B, S, H, D) tensor.
void zero_rows(float* base, int64_t row_stride, int rows, int head_dim);

// Backward work splitting. The main decomposition is one task per (batch, kv head): it owns dK, dV
// of its kv head and dQ of the query heads of its group, so nothing is shared. When there are fewer
// such tasks than threads (e.g. MQA with batch 1), each task's keys are also split into `parts`
// ranges of whole key tiles (block_k rows); part 0 adds into dq directly, the others into private
// dQ buffers that are added to dq afterwards in part order, so results do not depend on scheduling.
int bwd_key_parts(const AttnDims& d, int threads, int block_k);

// Floats of private dQ the split needs.
int64_t bwd_extra_dq_floats(const AttnDims& d, int parts);

// Key-row boundaries (parts + 1 of them) splitting [0, seq_k) into ranges of whole tiles with about
// equal work; under a causal mask (and window) a key tile's work is the number of query rows that
// see it.
std::vector<int> split_keys(const AttnDims& d, bool causal, int64_t window, int64_t q_pos0,
                            int64_t k_pos0, int block_k, int parts);

inline float widen(float x) { return x; }
inline float widen(bf16 x) { return to_float(x); }

// delta[b, h, i] = sum_d dout[b, i, h, d] * o[b, i, h, d] in fp32 (dims.seq_q rows).
template <typename T>
void bwd_delta(const AttnDims& dims, const T* o, Strides3 o_stride, const T* dout,
               Strides3 dout_stride, float* delta, Strides2 delta_stride, int threads) {
  const int64_t tasks = int64_t(dims.batch) * dims.heads;
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int64_t t = 0; t < tasks; ++t) {
    const int64_t b = t / dims.heads, h = t % dims.heads;
    for (int i = 0; i < dims.seq_q; ++i) {
      const T* orow = o + b * o_stride.batch + i * o_stride.seq + h * o_stride.head;
      const T* grow = dout + b * dout_stride.batch + i * dout_stride.seq + h * dout_stride.head;
      float acc = 0.0f;
#pragma omp simd reduction(+ : acc)
      for (int k = 0; k < dims.head_dim; ++k) acc += widen(orow[k]) * widen(grow[k]);
      delta[b * delta_stride.batch + h * delta_stride.head + i] = acc;
    }
  }
}

// One unit of the backward's work: a kv head over key rows [j_begin, j_end), adding dQ of the query
// heads of its group into an fp32 target (head h at dq + (h - first head) * dq_head).
struct BwdTask {
  int b, hk;
  int j_begin, j_end;
  float* dq;
  int64_t dq_head, dq_seq;
};

// One query head of a backward task (g-th of its kv head's group): the head's rows of q and dout
// (element type T), its LSE and delta, and where its dQ adds up.
template <typename T>
struct BwdHead {
  const T* q;
  const T* dout;
  const float* lse;
  const float* delta;
  float* dq;
};

// The query head g of a task's group, from the fp32 or bf16 backward's params.
template <typename Params>
auto bwd_head(const Params& p, const BwdTask& task, int g) {
  const int h = task.hk * (p.dims.heads / p.dims.kv_heads) + g;
  const int64_t b = task.b;
  return BwdHead<std::remove_cvref_t<decltype(*p.q)>>{
      p.q + b * p.q_stride.batch + h * p.q_stride.head,
      p.dout + b * p.dout_stride.batch + h * p.dout_stride.head,
      p.lse + b * p.lse_stride.batch + h * p.lse_stride.head,
      p.delta + b * p.delta_stride.batch + h * p.delta_stride.head, task.dq + g * task.dq_head};
}

// Runs run(task, thread) for every (batch, kv head, key part) on `threads` threads (see
// bwd_key_parts): part 0 adds into dq (fp32; its rows zeroed first when zero_dq), the other parts
// into private buffers that are added to dq afterwards, in part order.
template <typename Run>
void run_bwd_tasks(const AttnDims& d, bool causal, int64_t window, int64_t q_pos0, int64_t k_pos0,
                   int block_k, int threads, float* dq, Strides3 dq_stride, bool zero_dq, Run run) {
  const int D = d.head_dim;
  const int group = d.heads / d.kv_heads;
  const int tasks = d.batch * d.kv_heads;
  const int parts = bwd_key_parts(d, threads, block_k);
  const std::vector<int> cut = split_keys(d, causal, window, q_pos0, k_pos0, block_k, parts);
  const int64_t dq_task = int64_t(group) * d.seq_q * D;  // private dQ of one (task, part)
  std::vector<float> dq_extra(bwd_extra_dq_floats(d, parts));
#pragma omp parallel for num_threads(threads) schedule(dynamic, 1)
  for (int64_t u = 0; u < int64_t(tasks) * parts; ++u) {
    const int t = static_cast<int>(u / parts), part = static_cast<int>(u % parts);
    BwdTask task;
    task.b = t / d.kv_heads;
    task.hk = t % d.kv_heads;
    task.j_begin = cut[part];
    task.j_end = cut[part + 1];
    if (part == 0) {
      task.dq = dq + task.b * dq_stride.batch + int64_t(task.hk) * group * dq_stride.head;
      task.dq_head = dq_stride.head;
      task.dq_seq = dq_stride.seq;
      if (zero_dq)
        for (int g = 0; g < group; ++g)
          zero_rows(task.dq + g * task.dq_head, task.dq_seq, d.seq_q, D);
    } else {
      task.dq = dq_extra.data() + (int64_t(part - 1) * tasks + t) * dq_task;
      task.dq_head = int64_t(d.seq_q) * D;
      task.dq_seq = D;
    }
    run(task, omp_get_thread_num());
  }
  if (parts == 1) return;
  const int64_t rows = int64_t(tasks) * group * d.seq_q;
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t t = r / (int64_t(group) * d.seq_q), g = r / d.seq_q % group, i = r % d.seq_q;
    const int64_t b = t / d.kv_heads, h = (t % d.kv_heads) * group + g;
    float* out = dq + b * dq_stride.batch + i * dq_stride.seq + h * dq_stride.head;
    for (int part = 1; part < parts; ++part) {
      const float* add =
          dq_extra.data() + (int64_t(part - 1) * tasks + t) * dq_task + (g * d.seq_q + i) * D;
      for (int c = 0; c < D; ++c) out[c] += add[c];
    }
  }
}

}  // namespace wallfacer::kernels::detail
