#pragma once
// The attention a model calls over the rows its rank holds (the contract of
// seqpar::DistAttention): q (B, T, H, D), k, v (B, T, Hkv, D) -> o (B, T, H, D), lse (B, H, T).
// Training passes the sequence-parallel DistAttention; tests and single-process tools pass
// LocalAttention.

#include <vector>

namespace wallfacer::model {

class AttentionOp {
 public:
  virtual ~AttentionOp() = default;
  virtual void forward(const float* q, const float* k, const float* v, float* o, float* lse) = 0;
  virtual void backward(const float* q, const float* k, const float* v, const float* o,
                        const float* lse, const float* dout, float* dq, float* dk, float* dv) = 0;
};

}  // namespace wallfacer::model
