#pragma once
// A text or video model's attention over the ranks of a sequence-parallel group, as training runs
// it (DistAttentionOp), and a text model spread over such a group and run on whole token
// sequences (DistGpt: `score`, and the tests against transformers).

#include <algorithm>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "wallfacer/comm/communicator.h"
#include "wallfacer/core/error.h"
#include "wallfacer/model/gpt.h"
#include "wallfacer/model/parts.h"
#include "wallfacer/seqpar/attention.h"
#include "wallfacer/train/config.h"

namespace wallfacer::train {

// The model's attention: the sequence-parallel DistAttention of this rank's sp group. With
// per_sequence (train.packing = "documents" and more than one local sequence), one DistAttention
// of batch 1 per sequence, each masking its sequence's documents: sequence b of the tensors
// (B, n, H, D), (B, n, Hkv, D) and (B, H, n) is a contiguous slice.
class DistAttentionOp : public model::AttentionOp {
 public:
  // `windows`: the sliding windows the model's layers use (set_window), distinct, in the order
  // the sequence attentions are built (collective: the same on every rank).
  DistAttentionOp(const seqpar::AttnConfig& cfg, comm::Communicator& group, int64_t rows,
                  bool per_sequence, const std::vector<int64_t>& windows) {
    seqpar::AttnConfig one = cfg;
    if (per_sequence && cfg.batch > 1) {
      one.batch = 1;
      qn_ = rows * cfg.heads * cfg.head_dim;
      kn_ = rows * cfg.kv_heads * cfg.head_dim;
      sn_ = rows * cfg.heads;
    }
    for (const int64_t w : windows) {
      one.window = w;
      windows_.push_back(w);
      sets_.emplace_back();
      for (int b = 0; b < cfg.batch / one.batch; ++b)
        sets_.back().push_back(std::make_unique<seqpar::DistAttention>(one, group));
    }
    balanced_ = cfg.layout == seqpar::Layout::Balanced;
  }
  // Selects the sequence attentions built for this window.
  void set_window(int64_t window) override {
    const auto at = std::find(windows_.begin(), windows_.end(), window);
    WF_CHECK(at != windows_.end(), "set_window: no attention built for window {}", window);
    cur_ = size_t(at - windows_.begin());
  }
  void forward(const model::Act& q, const model::Act& k, const model::Act& v, const model::Act& o,
               float* lse) override {
    model::with_element_type(
        [&](auto x) {
          using T = decltype(x);
          using model::data_of;
          run_fwd(data_of<T>(q), data_of<T>(k), data_of<T>(v), data_of<T>(o), lse);
        },
        q, k, v, o);
  }
  void backward(const model::Act& q, const model::Act& k, const model::Act& v, const model::Act& o,
                const float* lse, const model::Act& dout, const model::Act& dq,
                const model::Act& dk, const model::Act& dv) override {
    model::with_element_type(
        [&](auto x) {
          using T = decltype(x);
          using model::data_of;
          run_bwd(data_of<T>(q), data_of<T>(k), data_of<T>(v), data_of<T>(o), lse, data_of<T>(dout),
                  data_of<T>(dq), data_of<T>(dk), data_of<T>(dv));
        },
        q, k, v, o, dout, dq, dk, dv);
  }
  // A sequence of one document passes no lengths: the calls are those of train.packing = "none".
  void set_documents(const std::vector<std::vector<int64_t>>& lengths) override {
    for (auto& set : sets_) {
      WF_CHECK(lengths.size() == set.size(),
               "set_documents: {} lists of lengths for {} sequence attention(s)", lengths.size(),
               set.size());
      for (size_t b = 0; b < set.size(); ++b) {
        const auto& l = lengths[b];
        set[b]->set_documents(l.data(), l.size() > 1 ? int(l.size()) : 0);
      }
    }
  }
  // With Layout::Balanced the rows of sequence b follow its documents.
  std::vector<int64_t> row_positions(int b) const override {
    if (!balanced_) return {};
    // Every window's attention lays the documents out alike (the layout counts the window of
    // AttnConfig::layout_window, the same in all: TrainConfig::attn_config).
    WF_CHECK(b >= 0 && size_t(b) < sets_[0].size(), "row_positions: sequence {} of {}", b,
             sets_[0].size());
    return sets_[0][size_t(b)]->local_positions();
  }
  // This rank's attention work of the latest forward of each window's attentions (in the order
  // of `windows`): its forward FLOPs (4 H D x the kept pairs of its queries, summed over its
  // sequences).
  std::vector<double> work() const {
    std::vector<double> w(sets_.size(), 0.0);
    for (size_t i = 0; i < sets_.size(); ++i)
      for (const auto& a : sets_[i]) w[i] += a->stats().attn_flops;
    return w;
  }

 private:
  // Each sequence attention over its slice of the tensors (fp32 or bf16).
  template <typename T>
  void run_fwd(const T* q, const T* k, const T* v, T* o, float* lse) {
    auto& set = sets_[cur_];
    for (size_t b = 0; b < set.size(); ++b)
      set[b]->forward(q + b * qn_, k + b * kn_, v + b * kn_, o + b * qn_, lse + b * sn_);
  }
  template <typename T>
  void run_bwd(const T* q, const T* k, const T* v, const T* o, const float* lse, const T* dout,
               T* dq, T* dk, T* dv) {
    auto& set = sets_[cur_];
    for (size_t b = 0; b < set.size(); ++b)
      set[b]->backward(q + b * qn_, k + b * kn_, v + b * kn_, o + b * qn_, lse + b * sn_,
                       dout + b * qn_, dq + b * qn_, dk + b * kn_, dv + b * kn_);
  }

  // One sequence attention per sequence (per_sequence) or one for the batch, per window.
  std::vector<std::vector<std::unique_ptr<seqpar::DistAttention>>> sets_;
  std::vector<int64_t> windows_;      // the window of each set
  size_t cur_ = 0;                    // the set of the following calls (set_window)
  int64_t qn_ = 0, kn_ = 0, sn_ = 0;  // elements of one sequence (per_sequence)
  bool balanced_ = false;             // the rows follow the documents (Layout::Balanced)
};

// The distinct sliding windows of the model's layers, ascending (0: global), each with the number
// of its layers: one set of sequence attentions each (a DiT: one global set).
std::vector<std::pair<int64_t, int>> layer_windows(const TrainConfig& cfg);
// The windows of `layers` (as layer_windows gives them), in their order.
std::vector<int64_t> windows_of(const std::vector<std::pair<int64_t, int>>& layers);

// A text model (model.kind = "gpt", any model.arch) on the ranks of `group`, one sequence-parallel
// group (cfg.sp = group.size(), every one of the cfg.batch sequences of cfg.seq tokens on it),
// in the layout of cfg's strategy (or, with train.packing = "documents", of parallel.layout),
// in cfg.run_dtype(). Its inputs are given whole on every rank; each rank loads its rows.
class DistGpt {
 public:
  DistGpt(const TrainConfig& cfg, comm::Communicator& group);
  model::Gpt& model() { return *model_; }
  // tokens (batch, seq + 1), the same on every rank: inputs [:, :-1], targets [:, 1:]. docs[b]:
  // the document lengths of sequence b (summing to seq; empty or one: a single document; only
  // with train.packing = "documents"). Returns the sum of the losses of this rank's rows whose
  // position is below `valid` (fp64; the other rows are computed and left out: padding at the
  // end of a causal sequence changes no earlier row).
  double forward(const int32_t* tokens, const std::vector<std::vector<int64_t>>& docs,
                 int64_t valid);
  // The rows of a sequence on this rank, and the global position of every local row of the last
  // forward (batch * rows(): row n belongs to sequence n / rows()).
  int64_t rows() const { return T_; }
  const std::vector<int64_t>& row_positions() const { return row_pos_; }

 private:
  TrainConfig cfg_;
  seqpar::AttnConfig acfg_;
  std::vector<int64_t> positions_;
  int64_t T_;
  std::unique_ptr<DistAttentionOp> attn_;
  std::unique_ptr<model::Gpt> model_;
  std::vector<int64_t> row_pos_;
  std::vector<int32_t> tokens_, targets_;
};

}  // namespace wallfacer::train
