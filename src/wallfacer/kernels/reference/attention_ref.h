#pragma once
// Naive fp64 attention, forward and backward: the independent reference for the flash kernels.
// Contiguous tensors only: q, o, dout, dq: (B, Sq, H, D); k, v, dk, dv: (B, Sk, Hkv, D);
// lse: (B, H, Sq). Same semantics as kernels/attention.h: causal by global positions
// (keep (i, j) when q_pos0 + i >= k_pos0 + j), query head h reads kv head h / (H / Hkv),
// fully masked rows give O = 0, LSE = -inf and zero gradients. With documents (doc_of_pos, indexed
// by global position), (i, j) is kept only when doc_of_pos[q_pos0 + i] == doc_of_pos[k_pos0 + j];
// the reference compares ids pair by pair and needs no ordering of them. With causal and
// window = W > 0, (i, j) is kept only when q_pos0 + i - (k_pos0 + j) < W as well.

#include <cstdint>
#include <vector>

#include "wallfacer/kernels/attention.h"

namespace wallfacer::kernels::reference {

struct AttnRefProblem {
  AttnDims dims;
  double scale = 1.0;
  bool causal = false;
  int64_t q_pos0 = 0;
  int64_t k_pos0 = 0;
  const int32_t* doc_of_pos = nullptr;  // document id of every global position; nullptr: none
  int64_t window = 0;                   // sliding window (causal only); 0: none
};

// Fills o (B*Sq*H*D) and lse (B*H*Sq).
void attn_fwd_ref(const AttnRefProblem& pr, const std::vector<double>& q,
                  const std::vector<double>& k, const std::vector<double>& v,
                  std::vector<double>& o, std::vector<double>& lse);

// Gradients of sum(dout * O) with respect to q, k, v (recomputes the forward itself).
void attn_bwd_ref(const AttnRefProblem& pr, const std::vector<double>& q,
                  const std::vector<double>& k, const std::vector<double>& v,
                  const std::vector<double>& dout, std::vector<double>& dq, std::vector<double>& dk,
                  std::vector<double>& dv);

// One output row of the forward, for spot checks of large problems: o_row (head_dim values) and
// the returned LSE of query row i of head h in batch b, reading contiguous fp32 tensors.
double attn_fwd_ref_row(const AttnRefProblem& pr, const float* q, const float* k, const float* v,
                        int b, int h, int i, double* o_row);

}  // namespace wallfacer::kernels::reference
