#include "wallfacer/train/dist_model.h"

#include <map>

namespace wallfacer::train {

// The windows of `layers` (as layer_windows gives them), in their order.
std::vector<int64_t> windows_of(const std::vector<std::pair<int64_t, int>>& layers) {
  std::vector<int64_t> windows;
  for (const auto& wl : layers) windows.push_back(wl.first);
  return windows;
}

// The distinct sliding windows of the model's layers, ascending (0: global), each with the number
// of its layers: one set of sequence attentions each (a DiT: one global set).
std::vector<std::pair<int64_t, int>> layer_windows(const TrainConfig& cfg) {
  if (cfg.kind != ModelKind::Gpt) return {{0, cfg.model.layers}};
  const model::GptConfig m = cfg.run_model();
  std::map<int64_t, int> layers;
  for (int l = 0; l < m.layers; ++l) ++layers[m.layer_window(l)];
  return {layers.begin(), layers.end()};
}

DistGpt::DistGpt(const TrainConfig& cfg, comm::Communicator& group)
    : cfg_(cfg),
      acfg_(cfg.attn_config(group.size())),
      positions_(seqpar::local_positions(acfg_, group.size(), group.rank())),
      T_(int64_t(positions_.size())) {
  WF_CHECK(cfg.kind == ModelKind::Gpt, "DistGpt: model.kind is not 'gpt'");
  WF_CHECK(cfg.sp == group.size(), "DistGpt: parallel.sp = {} on a group of {} ranks", cfg.sp,
           group.size());
  attn_ = std::make_unique<DistAttentionOp>(acfg_, group, T_, cfg.packs(),
                                            windows_of(layer_windows(cfg)));
  std::vector<int64_t> rows;
  for (int b = 0; b < cfg.batch; ++b) rows.insert(rows.end(), positions_.begin(), positions_.end());
  row_pos_ = rows;
  model_ = std::make_unique<model::Gpt>(cfg.run_model(), cfg.batch, positions_, cfg.checkpointing,
                                        *attn_, cfg.run_dtype());
  tokens_.assign(row_pos_.size(), 0);
  targets_.assign(row_pos_.size(), 0);
}

double DistGpt::forward(const int32_t* tokens, const std::vector<std::vector<int64_t>>& docs,
                        int64_t valid) {
  const int B = cfg_.batch;
  const int64_t S = cfg_.seq;
  if (cfg_.packs()) {
    std::vector<std::vector<int64_t>> lengths(static_cast<size_t>(B));
    for (int b = 0; b < B; ++b) {
      lengths[size_t(b)] = size_t(b) < docs.size() && !docs[size_t(b)].empty()
                               ? docs[size_t(b)]
                               : std::vector<int64_t>{S};
      int64_t sum = 0;
      for (const int64_t l : lengths[size_t(b)]) sum += l;
      WF_CHECK(sum == S, "DistGpt: the documents of sequence {} hold {} tokens, not {}", b, sum, S);
    }
    attn_->set_documents(lengths);
    bool moved = false;
    for (int b = 0; b < B; ++b) {
      const std::vector<int64_t> p = attn_->row_positions(b);
      if (p.empty()) continue;
      std::copy(p.begin(), p.end(), row_pos_.begin() + b * T_);
      moved = true;
    }
    if (moved) model_->set_positions(row_pos_);
  } else {
    WF_CHECK(docs.empty() ||
                 std::all_of(docs.begin(), docs.end(), [](const auto& d) { return d.size() <= 1; }),
             "DistGpt: documents need train.packing = \"documents\"");
  }
  for (int b = 0; b < B; ++b)
    for (int64_t t = 0; t < T_; ++t) {
      const int64_t n = b * T_ + t, p = row_pos_[size_t(n)];
      tokens_[size_t(n)] = tokens[b * (S + 1) + p];
      targets_[size_t(n)] = tokens[b * (S + 1) + p + 1];
    }
  model_->forward(tokens_.data(), targets_.data());
  const float* losses = model_->losses();
  double sum = 0;
  for (size_t n = 0; n < row_pos_.size(); ++n)
    if (row_pos_[n] < valid) sum += double(losses[n]);
  return sum;
}

}  // namespace wallfacer::train
