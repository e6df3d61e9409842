#pragma once
// What every model family (GPT, DiT) shares: the attention a model calls over the rows its rank
// holds (the contract of seqpar::DistAttention: q (B, T, H, D), k, v (B, T, Hkv, D) -> o (B, T, H,
// D), lse (B, H, T); training passes the DistAttention, single-process tools LocalAttention), and
// the named parameter tensors of an arena.

#include <cstdint>
#include <initializer_list>
#include <string>
#include <type_traits>
#include <vector>

#include "wallfacer/core/bf16.h"
#include "wallfacer/seqpar/config.h"

namespace wallfacer::model {

// The number format of a model's products and stored activations (train.dtype): the one of
// seqpar/config.h.
using Dtype = seqpar::Dtype;

// n contiguous values rounded to bf16 (to nearest even) or widened to fp32, over the threads.
void round_to_bf16(const float* in, bf16* out, int64_t n);
void widen_to_fp32(const bf16* in, float* out, int64_t n);

// An activation in a model's dtype: exactly one of the pointers is set.
struct Act {
  float* f32 = nullptr;
  bf16* b16 = nullptr;
};
// The fp32 tensor (bf false) or the bf16 one (bf true).
inline Act pick(bool bf, float* f32, bf16* b16) {
  return bf ? Act{nullptr, b16} : Act{f32, nullptr};
}
// t's pointer of element type T (float: f32, bf16: b16).
template <class T>
T* data_of(const Act& t) {
  if constexpr (std::is_same_v<T, bf16>) {
    return t.b16;
  } else {
    return t.f32;
  }
}
// Throws (wallfacer::Error) unless every entry of `bf` equals `first`.
void check_element_types(bool first, std::initializer_list<bool> bf);
// Calls f(T{}) with T the element type of `first` (bf16 where its b16 is set, else float),
// after checking that every one of `rest` has that element type.
template <class F, class... Rest>
decltype(auto) with_element_type(F&& f, const Act& first, const Rest&... rest) {
  const bool bf = first.b16 != nullptr;
  check_element_types(bf, {(rest.b16 != nullptr)...});
  if (bf) return f(bf16{});
  return f(float{});
}
// x as an input of a product: x itself (fp32), or x rounded into scratch16 (bf16).
Act in_dtype(bool bf, float* x, bf16* scratch16, int64_t n);
// t as fp32: t itself, or t widened into scratch.
const float* as_fp32(const Act& t, float* scratch, int64_t n);

// The products and GELU of a layer in the dtype of their Act arguments: the kernels of
// kernels/ops.h (fp32, weight w) or of kernels/dense_bf16.h (bf16, weight w16: the bf16 copy of
// w; may be null in fp32). out (N, OC) = in (N, C) @ w^T [+ bias]; the backward writes din and
// adds to dw and dbias (fp32; dbias may be null).
void dense_fwd(const Act& out, const Act& in, const float* w, const bf16* w16, const float* bias,
               int64_t N, int C, int OC);
void dense_bwd(const Act& din, float* dw, float* dbias, const Act& dout, const Act& in,
               const float* w, const bf16* w16, int64_t N, int C, int OC);
void gelu_fwd(const Act& out, const Act& in, int64_t n);
void gelu_bwd(const Act& din, const Act& in, const Act& dout, int64_t n);
// SwiGLU (kernels/llama_ops.h): out (N, I) = silu(in[:, :I]) * in[:, I:]; din (N, 2I).
void swiglu_fwd(const Act& out, const Act& in, int64_t N, int I);
void swiglu_bwd(const Act& din, const Act& in, const Act& dout, int64_t N, int I);

class AttentionOp {
 public:
  virtual ~AttentionOp() = default;
  // q, k, v, o, dout, dq, dk, dv in the model's dtype (Dtype::bf16: their b16, else their f32
  // pointer), all of one dtype; lse fp32. The forward writes o, lse; the backward dq, dk, dv.
  virtual void forward(const Act& q, const Act& k, const Act& v, const Act& o, float* lse) = 0;
  virtual void backward(const Act& q, const Act& k, const Act& v, const Act& o, const float* lse,
                        const Act& dout, const Act& dq, const Act& dk, const Act& dv) = 0;
  // The packed documents of the following calls (docs/documents.md): lengths[b] lists the
  // document lengths of sequence b of the batch, in order, positive and summing to the sequence
  // length; an empty list or a single length: one document. Every rank of a group passes the
  // same lengths. The default refuses documents (UsageError) and accepts one document each.
  virtual void set_documents(const std::vector<std::vector<int64_t>>& lengths);
  // Where this rank's rows of sequence b are after the latest set_documents: their global
  // positions in row order, for an op whose layout follows the documents (the trainer's with
  // parallel.layout = "balanced"), which the caller then loads and positions its rows by. Empty
  // (the default): the rows stay at the positions the caller built the model for.
  virtual std::vector<int64_t> row_positions(int b) const;
  // The sliding window of the following calls (seqpar::AttnConfig::window; 0: none), which a
  // model with windowed and global layers sets before each layer's forward and backward. The
  // default accepts 0 only (UsageError otherwise).
  virtual void set_window(int64_t window);
};

// One named parameter tensor inside the arena.
struct ParamTensor {
  std::string name;
  int64_t offset = 0;  // in floats, from the start of the arena
  int64_t size = 0;
  bool decay = false;  // weight decay applies (matrices, not norms or biases)
};

}  // namespace wallfacer::model
