#pragma once
// One place that fills the kernels' parameter structs (AttnFwdParamsOf, AttnBwdParamsOf) from the
// tensors of one attention call, and calls the kernels of their element type. Every caller lays its
// tensors out alike: q, o, dout and dq share one stride, k, v, dk and dv another, lse and delta a
// third.

#include <cstdint>

#include "wallfacer/core/bf16.h"
#include "wallfacer/kernels/attention.h"
#include "wallfacer/kernels/attention_bf16.h"

namespace wallfacer::kernels {

// The inputs of one call, of element type T (float or bf16), and what the call does.
template <class T>
struct AttnInputs {
  AttnDims dims;
  const T* q = nullptr;  // (B, Sq, H, D); o, dout, dq have the same stride
  Strides3 q_stride;
  const T* k = nullptr;  // (B, Sk, Hkv, D); v, dk, dv have the same stride
  const T* v = nullptr;
  Strides3 kv_stride;
  Strides2 stat_stride;  // lse, delta (B, H, Sq)
  float scale = 1.0f;    // usually 1 / sqrt(head_dim)
  bool causal = false;
  int64_t q_pos0 = 0, k_pos0 = 0;  // global positions of query row 0 and key row 0
  // Document id of every global position (AttnFwdParams::doc_of_pos); nullptr: no documents.
  const int32_t* doc_of_pos = nullptr;
  int64_t window = 0;       // sliding window (AttnFwdParams::window); 0: none
  bool accumulate = false;  // merge into (o, lse) / add into dq, dk, dv
};

// Forward into o (B, Sq, H, D) and lse (B, H, Sq). G, the element type of o: T, or float for
// bf16 inputs (what `accumulate` needs; bf16 outputs are rounded once).
template <class T, class G>
AttnFwdParamsOf<T> fwd_params(const AttnInputs<T>& t, G* o, float* lse);

// The gradient arguments of a backward: dout (B, Sq, H, D), the forward's final lse and
// delta = rowsum(dout * o) (B, H, Sq), and the outputs dq (B, Sq, H, D), dk, dv (B, Sk, Hkv, D).
template <class T, class G>
struct AttnGrads {
  const T* dout = nullptr;
  const float* lse = nullptr;
  const float* delta = nullptr;
  G* dq = nullptr;
  G* dk = nullptr;
  G* dv = nullptr;
};

// G, the element type of dq, dk, dv: as in fwd_params (T where g is a braced list).
template <class T, class G = T>
AttnBwdParamsOf<T> bwd_params(const AttnInputs<T>& t, const AttnGrads<T, G>& g);

// The kernels of the element type of p (attention.h, attention_bf16.h).
inline void run_attn_fwd(const AttnFwdParams& p) { attn_fwd(p); }
inline void run_attn_fwd(const AttnFwdBf16Params& p) { attn_fwd_bf16(p); }
inline void run_attn_bwd(const AttnBwdParams& p) { attn_bwd(p); }
inline void run_attn_bwd(const AttnBwdBf16Params& p) { attn_bwd_bf16(p); }
inline void run_attn_bwd_preprocess(const AttnDims& dims, const float* o, Strides3 o_stride,
                                    const float* dout, Strides3 dout_stride, float* delta,
                                    Strides2 delta_stride) {
  attn_bwd_preprocess(dims, o, o_stride, dout, dout_stride, delta, delta_stride);
}
inline void run_attn_bwd_preprocess(const AttnDims& dims, const bf16* o, Strides3 o_stride,
                                    const bf16* dout, Strides3 dout_stride, float* delta,
                                    Strides2 delta_stride) {
  attn_bwd_preprocess_bf16(dims, o, o_stride, dout, dout_stride, delta, delta_stride);
}

}  // namespace wallfacer::kernels
