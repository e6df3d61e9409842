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
  // The flash kernels of the tensors' dtype (kernels/attention.h, kernels/attention_bf16.h).
  void forward(const Act& q, const Act& k, const Act& v, const Act& o, float* lse) override;
  void backward(const Act& q, const Act& k, const Act& v, const Act& o, const float* lse,
                const Act& dout, const Act& dq, const Act& dk, const Act& dv) override;
  // Masks each sequence at its own documents (the kernels' doc_of_pos), one kernel call per
  // sequence while any sequence holds more than one document; lengths.size() must be the batch.
  void set_documents(const std::vector<std::vector<int64_t>>& lengths) override;
  // The kernels' sliding window (0: none; needs causal).
  void set_window(int64_t window) override;

 private:
  template <typename T, typename F>
  void each_sequence(const T* q, const T* k, const T* v, F call);

  int batch_, seq_, heads_, kv_heads_, head_dim_;
  bool causal_;
  int64_t window_ = 0;
  std::vector<float> delta_;  // (B, H, S)
  // doc_of_pos of each sequence (empty: one document); no entry at all: no documents anywhere.
  std::vector<std::vector<int32_t>> docs_;
};

}  // namespace wallfacer::model
