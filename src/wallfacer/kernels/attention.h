#pragma once
// Flash attention on the CPU (fp32): forward with row log-sum-exp, backward, and the one LSE-merge
// routine that the kernel's own blocking, the ring and the reduce-scatter all use.
//
// Layouts (strides in elements, head_dim contiguous):
//   q, o, dout, dq : (B, Sq, H,   D)
//   k, v, dk, dv   : (B, Sk, Hkv, D)   H % Hkv == 0; query head h reads kv head h / (H / Hkv)
//   lse, delta     : (B, H,  Sq)       contiguous along Sq
// Causal masks compare global positions: query row i sits at q_pos0 + i, key row j at k_pos0 + j,
// and (i, j) is kept when q_pos0 + i >= k_pos0 + j. Fully masked rows give O = 0, LSE = -inf.
// LSE is the natural log of the row's softmax denominator, sum_j exp(scale * q_i . k_j).
//
// Documents (packed sequences): with doc_of_pos set, the sequence holds several documents and a
// token attends only to tokens of its own document. doc_of_pos is one array over the whole global
// sequence, indexed by global position: doc_of_pos[t] is the document id of position t. Ids must be
// non-decreasing along positions (documents numbered in sequence order; kernels/doc_mask.h builds
// the array from document lengths). Pair (i, j) is kept when
//     doc_of_pos[q_pos0 + i] == doc_of_pos[k_pos0 + j]   (and q_pos0 + i >= k_pos0 + j if causal),
// so the same array serves every slice of the sequence a rank holds: it must cover positions
// [q_pos0, q_pos0 + Sq) and [k_pos0, k_pos0 + Sk), and q_pos0, k_pos0 must be >= 0. The kernels
// check that the ids are non-decreasing over those positions. A (query tile, key tile) pair with no
// document in common costs one comparison of the tiles' first and last ids and is skipped; a pair
// inside one document runs the unmasked path; only pairs across a document boundary mask per
// element. Rows that see no key (e.g. a key segment entirely in other documents) give O = 0,
// LSE = -inf, as under the causal mask. nullptr: one document, the results bit-identical to a call
// without the field.
//
// Sliding window: with causal set and window = W > 0, query row i keeps key j only when
//     q_pos0 + i - W < k_pos0 + j <= q_pos0 + i,
// the W most recent positions including its own (and, with documents, only those of its
// document). Key tiles entirely outside every window of a query tile are skipped, so the work grows
// as Sq * W rather than Sq * Sk; tiles cut by the window's edge mask per element like the diagonal.
// W >= the sequence is the causal mask itself, with bit-identical results. window = 0: no window
// (the default); window < 0, or > 0 without causal, is an argument error.
//
// Memory: the caller owns every tensor (any strides as described, no overlap between an output
// and any other tensor); the kernels allocate their scratch per call (attn_*_workspace_bytes) and
// keep nothing between calls.
// Threads: each call runs OpenMP threads, as many as wallfacer uses (OMP_NUM_THREADS, else the
// CPUs this process may use), each computing its tiles' products on its own (kernels/sgemm.h).
// Errors: attn_fwd, attn_bwd, attn_bwd_preprocess and lse_merge check their arguments; bad
// dimensions, strides or null pointers throw wallfacer::Error (core/error.h) before any work.
// Results are deterministic for a given thread count and CPU (docs/numerics.md).

#include <cstdint>
#include <type_traits>

#include "wallfacer/core/bf16.h"

namespace wallfacer::kernels {

// Largest head_dim the kernels accept.
inline constexpr int kMaxHeadDim = 256;

struct AttnDims {
  int batch = 1;     // B
  int seq_q = 0;     // Sq: query rows (0 allowed: nothing to do)
  int seq_k = 0;     // Sk: key rows (0: O = 0, LSE = -inf)
  int heads = 1;     // H
  int kv_heads = 1;  // Hkv, dividing H
  int head_dim = 0;  // D, 1..kMaxHeadDim
};

// Strides of a (B, S, H, D) tensor in elements; D has unit stride.
struct Strides3 {
  int64_t batch = 0, seq = 0, head = 0;
  // Contiguous (B, S, H, D).
  static Strides3 contiguous(int seq, int heads, int head_dim) {
    return {int64_t(seq) * heads * head_dim, int64_t(heads) * head_dim, head_dim};
  }
};

// Strides of a (B, H, S) row statistic (lse, delta) in elements; S has unit stride.
struct Strides2 {
  int64_t batch = 0, head = 0;
  static Strides2 contiguous(int heads, int seq) { return {int64_t(heads) * seq, seq}; }
};

// Where a bf16 kernel (kernels/attention_bf16.h) writes one output (o, dq, dk, dv): exactly one of
// the two pointers is set. bf16: the fp32 result rounded to bf16 once; fp32: the result exactly,
// what `accumulate` needs.
struct AttnOutput {
  bf16* bf16_data = nullptr;
  float* fp32_data = nullptr;
};

// The parameter structs are templates over T, the element type of q, k, v and dout: float (the
// kernels of this file, outputs float) or bf16 (kernels/attention_bf16.h, outputs AttnOutput).
// lse and delta are float with either.
template <class T>
using AttnOut = std::conditional_t<std::is_same_v<T, bf16>, AttnOutput, float*>;

// What a forward and a backward both take: the inputs q, k, v and the mask.
template <class T>
struct AttnArgs {
  AttnDims dims;
  const T* q = nullptr;  // (B, Sq, H, D)
  Strides3 q_stride;
  const T* k = nullptr;  // (B, Sk, Hkv, D)
  Strides3 k_stride;
  const T* v = nullptr;  // (B, Sk, Hkv, D)
  Strides3 v_stride;
  float scale = 1.0f;  // multiplies q . k; usually 1 / sqrt(head_dim)
  bool causal = false;
  int64_t q_pos0 = 0;  // global position of query row 0
  int64_t k_pos0 = 0;  // global position of key row 0
  // Document id of every global position (see the top of this file); nullptr: no documents. A
  // backward takes the forward's.
  const int32_t* doc_of_pos = nullptr;
  // Sliding window (see the top of this file): 0 none; > 0 needs causal. A backward takes the
  // forward's.
  int64_t window = 0;
  // false: overwrite the outputs. true, forward: merge this block's result into the running
  // (o, lse) with lse_merge (o, lse must hold a valid partial result, e.g. from
  // attn_fwd_init_output); backward: add into dq, dk, dv (ring steps accumulate partial
  // gradients). With bf16 inputs the outputs must then be fp32.
  bool accumulate = false;
};

template <class T>
struct AttnFwdParamsOf : AttnArgs<T> {
  AttnOut<T> o{};  // (B, Sq, H, D)
  Strides3 o_stride;
  float* lse = nullptr;  // (B, H, Sq)
  Strides2 lse_stride;
};

template <class T>
struct AttnBwdParamsOf : AttnArgs<T> {
  const T* dout = nullptr;  // (B, Sq, H, D)
  Strides3 dout_stride;
  const float* lse = nullptr;  // (B, H, Sq): LSE of the full (final) forward
  Strides2 lse_stride;
  const float* delta = nullptr;  // (B, H, Sq): rowsum(dout * o), from attn_bwd_preprocess
  Strides2 delta_stride;
  AttnOut<T> dq{};  // (B, Sq, H, D)
  Strides3 dq_stride;
  AttnOut<T> dk{};  // (B, Sk, Hkv, D)
  Strides3 dk_stride;
  AttnOut<T> dv{};  // (B, Sk, Hkv, D)
  Strides3 dv_stride;
};

using AttnFwdParams = AttnFwdParamsOf<float>;
using AttnBwdParams = AttnBwdParamsOf<float>;

// O and LSE of softmax(scale * Q K^T + mask) V. Checks its arguments (throws wallfacer::Error).
void attn_fwd(const AttnFwdParams& p);

// Sets o = 0 and lse = -inf: the identity of lse_merge, the start of a running result.
void attn_fwd_init_output(const AttnDims& dims, float* o, Strides3 o_stride, float* lse,
                          Strides2 lse_stride);

// delta[b, h, i] = sum_d dout[b, i, h, d] * o[b, i, h, d]   (dims.seq_q rows)
void attn_bwd_preprocess(const AttnDims& dims, const float* o, Strides3 o_stride, const float* dout,
                         Strides3 dout_stride, float* delta, Strides2 delta_stride);

// dQ, dK, dV of the forward above, given the final LSE and delta.
void attn_bwd(const AttnBwdParams& p);

// Merges rows of a partial result (o2, lse2) into (o, lse):
//   lse <- log(exp(lse) + exp(lse2)),  o <- exp(lse_old - lse) o + exp(lse2 - lse) o2.
// Rows with -inf on both sides stay (0, -inf). o rows have `head_dim` contiguous floats.
void lse_merge_rows(int rows, int head_dim, float* o, int64_t o_row_stride, float* lse,
                    int64_t lse_row_stride, const float* o2, int64_t o2_row_stride,
                    const float* lse2, int64_t lse2_row_stride);

// lse_merge_rows over every (batch, head) of (B, S, H, D) / (B, H, S) tensors
// (uses dims.batch, dims.seq_q as S, dims.heads, dims.head_dim).
void lse_merge(const AttnDims& dims, float* o, Strides3 o_stride, float* lse, Strides2 lse_stride,
               const float* o2, Strides3 o2_stride, const float* lse2, Strides2 lse2_stride);

// Tile sizes the kernels use (query rows x key rows per tile). The forward's avx512 path (head dims
// a multiple of 16) works in strips of 6 query rows by 64 keys inside tiles of 256 keys, so it
// skips masked work at least as finely as these tiles say.
struct AttnTiling {
  int block_q = 0;
  int block_k = 0;
};
AttnTiling attn_fwd_tiling(const AttnDims& dims);
AttnTiling attn_bwd_tiling(const AttnDims& dims);

// Bytes of scratch memory attn_fwd / attn_bwd allocate when run with `threads` threads (the
// kernels use wallfacer::num_threads()): O(tile) per thread, independent of the sequence lengths;
// plus, for the forward's avx512 path (head dims a multiple of 16), K^T packed once per call in
// whole tiles of 256 keys: the size of K, rounded up.
int64_t attn_fwd_workspace_bytes(const AttnDims& dims, int threads);
int64_t attn_bwd_workspace_bytes(const AttnDims& dims, int threads);

}  // namespace wallfacer::kernels
