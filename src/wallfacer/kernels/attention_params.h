#pragma once
// One place that fills the kernels' parameter structs (AttnFwdParams, AttnBwdParams and their bf16
// twins) from the tensors of one attention call. Every caller lays its tensors out alike: q, o,
// dout and dq share one stride, k, v, dk and dv another, lse and delta a third.

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

// Forward into o (B, Sq, H, D) and lse (B, H, Sq).
AttnFwdParams fwd_params(const AttnInputs<float>& t, float* o, float* lse);
// bf16 inputs; o in bf16 (rounded once) or in fp32 (what `accumulate` needs).
AttnFwdBf16Params fwd_params(const AttnInputs<bf16>& t, bf16* o, float* lse);
AttnFwdBf16Params fwd_params(const AttnInputs<bf16>& t, float* o, float* lse);

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

AttnBwdParams bwd_params(const AttnInputs<float>& t, const AttnGrads<float, float>& g);
// bf16 inputs; gradients in bf16 (rounded once) or in fp32 (what `accumulate` needs).
AttnBwdBf16Params bwd_params(const AttnInputs<bf16>& t, const AttnGrads<bf16, bf16>& g);
AttnBwdBf16Params bwd_params(const AttnInputs<bf16>& t, const AttnGrads<bf16, float>& g);

}  // namespace wallfacer::kernels
