#pragma once
// Attention (causal for the GPT, full for the DiT) over a whole sequence held by one process (the
// single-process flash kernel), an AttentionOp for tests and tools that run without a
// sequence-parallel group.

#include <vector>

#include "wallfacer/model/parts.h"

namespace wallfacer::model {

class LocalAttention : public AttentionOp {
 public:
  // Rows are the tokens 0..seq-1 of `batch` sequences.
  LocalAttention(int batch, int seq, int heads, int kv_heads, int head_dim, bool causal = true);
  void forward(const float* q, const float* k, const float* v, float* o, float* lse) override;
  void backward(const float* q, const float* k, const float* v, const float* o, const float* lse,
                const float* dout, float* dq, float* dk, float* dv) override;

 private:
  int batch_, seq_, heads_, kv_heads_, head_dim_;
  bool causal_;
  std::vector<float> delta_;  // (B, H, S)
};

}  // namespace wallfacer::model
