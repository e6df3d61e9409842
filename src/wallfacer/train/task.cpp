#include "wallfacer/train/task.h"

#include "wallfacer/core/error.h"
#include "wallfacer/core/rng.h"
#include "wallfacer/model/dit.h"
#include "wallfacer/model/gpt.h"
#include "wallfacer/train/data.h"
#include "wallfacer/train/video.h"

namespace wallfacer::train {

namespace {

class GptTask : public Task {
 public:
  GptTask(const TrainConfig& cfg, int64_t b0, int nb, const std::vector<int64_t>& positions,
          model::AttentionOp& attn)
      : cfg_(cfg),
        b0_(b0),
        nb_(nb),
        positions_(positions),
        train_shard_(cfg.data_dir + "/train.bin"),
        val_shard_(cfg.data_dir + "/val.bin"),
        train_loader_(train_shard_, cfg.seq, uint64_t(cfg.seed)),
        val_loader_(val_shard_, cfg.seq, uint64_t(cfg.seed)),
        model_(cfg.model, nb, positions, model::parse_checkpointing(cfg.checkpointing), attn,
               cfg.run_dtype()),
        attn_(attn),
        tokens_(positions.size() * size_t(nb)),
        targets_(tokens_.size()),
        docs_(size_t(nb)) {
    for (const TokenShard* s : {&train_shard_, &val_shard_}) {
      WF_USAGE_CHECK(s->vocab() <= cfg.model.vocab,
                     "the vocabulary of '{}' ({}) is larger than model.vocab ({}): set "
                     "model.vocab to at least {}",
                     s->path(), s->vocab(), cfg.model.vocab, s->vocab());
    }
  }
  int64_t num_params() const override { return model_.num_params(); }
  float* params() override { return model_.params(); }
  float* grads() override { return model_.grads(); }
  const std::vector<model::ParamTensor>& tensors() const override { return model_.tensors(); }
  void init_params(uint64_t seed) override {
    model::gpt_init_params(cfg_.model, model_.params(), seed);
  }
  double train_forward(int64_t step) override {
    train_loader_.load(step, b0_, nb_, positions_, tokens_.data(), targets_.data());
    if (packing()) {
      for (int b = 0; b < nb_; ++b)
        docs_[size_t(b)] = train_loader_.documents(train_loader_.start(step, b0_ + b));
      attn_.set_documents(docs_);
    }
    return model_.forward(tokens_.data(), targets_.data());
  }
  double eval_forward(int e) override {
    const int64_t num_eval = int64_t(cfg_.eval_batches) * cfg_.batch;
    const int64_t j0 = int64_t(e) * cfg_.batch + b0_;
    val_loader_.load_eval(j0, nb_, positions_, tokens_.data(), targets_.data(), num_eval);
    if (packing()) {
      for (int b = 0; b < nb_; ++b)
        docs_[size_t(b)] = val_loader_.documents(val_loader_.eval_start(j0 + b, num_eval));
      attn_.set_documents(docs_);
    }
    return model_.forward(tokens_.data(), targets_.data());
  }
  void zero_grads() override { model_.zero_grads(); }
  void backward(float dloss) override { model_.backward(dloss); }
  double loss_terms() const override { return double(cfg_.batch) * double(cfg_.seq); }

 private:
  bool packing() const { return cfg_.packing == "documents"; }

  const TrainConfig& cfg_;
  int64_t b0_;
  int nb_;
  std::vector<int64_t> positions_;
  TokenShard train_shard_, val_shard_;
  SequenceLoader train_loader_, val_loader_;
  model::Gpt model_;
  model::AttentionOp& attn_;
  std::vector<int32_t> tokens_, targets_;
  std::vector<std::vector<int64_t>> docs_;  // of each local sequence (train.packing)
};

class DitTask : public Task {
 public:
  DitTask(const TrainConfig& cfg, int64_t b0, int nb, const std::vector<int64_t>& positions,
          model::AttentionOp& attn)
      : cfg_(cfg),
        dcfg_(cfg.dit_model()),
        video_(cfg.video_spec()),
        b0_(b0),
        nb_(nb),
        positions_(positions),
        model_(dcfg_, nb, positions, attn, cfg.run_dtype()),
        clip_(size_t(video_.values())),
        noise_(clip_.size()),
        xt_(positions.size() * size_t(nb) * size_t(dcfg_.patch_dim())),
        target_(xt_.size()),
        t_(size_t(nb)),
        labels_(size_t(nb)) {}
  int64_t num_params() const override { return model_.num_params(); }
  float* params() override { return model_.params(); }
  float* grads() override { return model_.grads(); }
  const std::vector<model::ParamTensor>& tensors() const override { return model_.tensors(); }
  void init_params(uint64_t seed) override { model::dit_init_params(dcfg_, model_.params(), seed); }
  double train_forward(int64_t step) override {
    for (int b = 0; b < nb_; ++b) {
      const int64_t j = b0_ + b;  // clip number in the global batch
      const int64_t index = int64_t(mix64(uint64_t(cfg_.seed), uint64_t(step * cfg_.batch + j)) %
                                    uint64_t(cfg_.clips));
      load(b, index, step, j);
    }
    return model_.forward(xt_.data(), t_.data(), labels(), target_.data());
  }
  double eval_forward(int e) override {
    // Held-out clips (indices past the training set) with fixed times and noise.
    for (int b = 0; b < nb_; ++b) {
      const int64_t j = int64_t(e) * cfg_.batch + b0_ + b;
      load(b, cfg_.clips + j, -1, j);
    }
    return model_.forward(xt_.data(), t_.data(), labels(), target_.data());
  }
  void zero_grads() override { model_.zero_grads(); }
  void backward(float dloss) override { model_.backward(dloss); }
  double loss_terms() const override { return double(cfg_.batch) * double(video_.values()); }

 private:
  // Local rows of clip `index` as the b-th clip of this rank: x_t = (1 - t) x0 + t noise and the
  // velocity target noise - x0, with t and noise keyed by (seed, key_step, j).
  void load(int b, int64_t index, int64_t key_step, int64_t j) {
    labels_[size_t(b)] = render_clip(video_, uint64_t(cfg_.seed), index, clip_.data());
    const float t = flow_time(uint64_t(cfg_.seed), key_step, j, time_sampling_);
    t_[size_t(b)] = t;
    for (int64_t i = 0; i < video_.values(); ++i) {
      const float n = flow_noise(uint64_t(cfg_.seed), key_step, j, i);
      noise_[size_t(i)] = (1 - t) * clip_[size_t(i)] + t * n;  // x_t
      clip_[size_t(i)] = n - clip_[size_t(i)];                 // v
    }
    const int64_t T = int64_t(positions_.size()), off = b * T * dcfg_.patch_dim();
    model::dit_patchify(dcfg_, noise_.data(), positions_.data(), int(T), xt_.data() + off);
    model::dit_patchify(dcfg_, clip_.data(), positions_.data(), int(T), target_.data() + off);
  }
  const int32_t* labels() const { return dcfg_.classes > 0 ? labels_.data() : nullptr; }

  const TrainConfig& cfg_;
  model::DitConfig dcfg_;
  VideoSpec video_;
  TimeSampling time_sampling_ = parse_time_sampling(cfg_.time_sampling.c_str());
  int64_t b0_;
  int nb_;
  std::vector<int64_t> positions_;
  model::Dit model_;
  std::vector<float> clip_, noise_, xt_, target_, t_;
  std::vector<int32_t> labels_;
};

}  // namespace

std::unique_ptr<Task> make_task(const TrainConfig& cfg, int64_t b0, int nb,
                                const std::vector<int64_t>& positions, model::AttentionOp& attn) {
  if (cfg.kind == "dit") return std::make_unique<DitTask>(cfg, b0, nb, positions, attn);
  return std::make_unique<GptTask>(cfg, b0, nb, positions, attn);
}

}  // namespace wallfacer::train
