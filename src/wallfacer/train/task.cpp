#include "wallfacer/train/task.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <string>

#include "wallfacer/core/error.h"
#include "wallfacer/core/rng.h"
#include "wallfacer/model/dit.h"
#include "wallfacer/model/gpt.h"
#include "wallfacer/train/data.h"
#include "wallfacer/train/video.h"

namespace wallfacer::train {

namespace {

// `positions` once for each of nb sequences: the rows of a layout that does not move.
std::vector<int64_t> repeat_positions(const std::vector<int64_t>& positions, int nb) {
  std::vector<int64_t> out;
  for (int b = 0; b < nb; ++b) out.insert(out.end(), positions.begin(), positions.end());
  return out;
}

// After set_documents: the positions of each sequence's rows where the attention's layout follows
// the documents (AttentionOp::row_positions), into row_pos (nb * T); whether any moved.
bool follow_layout(const model::AttentionOp& attn, int nb, std::vector<int64_t>& row_pos) {
  const int64_t T = int64_t(row_pos.size()) / nb;
  bool moved = false;
  for (int b = 0; b < nb; ++b) {
    const std::vector<int64_t> p = attn.row_positions(b);
    if (p.empty()) continue;
    WF_CHECK(int64_t(p.size()) == T, "row_positions: {} positions for the {} rows of sequence {}",
             p.size(), T, b);
    std::copy(p.begin(), p.end(), row_pos.begin() + b * T);
    moved = true;
  }
  return moved;
}

// The startup line's words on model.window ("" without one).
std::string window_note(const TrainConfig& cfg) {
  const model::GptConfig& m = cfg.model;
  if (m.window == 0) return "";
  if (m.window >= cfg.seq)
    return fmt::format(", window {} >= seq {}: the full causal mask", m.window, cfg.seq);
  if (m.window_layers.empty()) return fmt::format(", window {} on every layer", m.window);
  return fmt::format(", window {} on layers {}", m.window, fmt::join(m.window_layers, ","));
}

// The startup line's words on model.rope_scaling ("" without it).
std::string rope_note(const TrainConfig& cfg) {
  const kernels::RopeScaling& r = cfg.model.rope_scaling;
  if (r.type == kernels::RopeScalingType::None) return "";
  return fmt::format(", rope_scaling {} x{}{}", kernels::rope_scaling_type_name(r.type), r.factor,
                     r.type == kernels::RopeScalingType::Llama3
                         ? fmt::format(" (from {} positions)", r.original_max_position_embeddings)
                         : "");
}

class GptTask : public Task {
 public:
  static ModelFacts facts(const TrainConfig& cfg) {
    const model::GptConfig& m = cfg.model;
    ModelFacts f;
    f.num_params = model::gpt_num_params(m);
    // Per layer 10 values of width dim, and the MLP's fc output and activation (fc_dim +
    // mlp_hidden values); the logits and their gradient.
    const double mlp = double(m.fc_dim()) + double(m.mlp_hidden());
    f.values_per_row = double(m.layers) * (10.0 * double(m.dim) + mlp) + 2.0 * double(m.vocab);
    f.notes = window_note(cfg) + rope_note(cfg);
    return f;
  }

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
        model_(cfg.run_model(), nb, positions, cfg.checkpointing, attn, cfg.run_dtype()),
        attn_(attn),
        tokens_(positions.size() * size_t(nb)),
        targets_(tokens_.size()),
        docs_(size_t(nb)),
        starts_(size_t(nb)),
        row_pos_(repeat_positions(positions, nb)) {
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
    for (int b = 0; b < nb_; ++b) starts_[size_t(b)] = train_loader_.start(step, b0_ + b);
    return forward(train_loader_);
  }
  double eval_forward(int e) override {
    const int64_t num_eval = int64_t(cfg_.eval_batches) * cfg_.batch;
    const int64_t j0 = int64_t(e) * cfg_.batch + b0_;
    for (int b = 0; b < nb_; ++b) starts_[size_t(b)] = val_loader_.eval_start(j0 + b, num_eval);
    return forward(val_loader_);
  }
  void zero_grads() override { model_.zero_grads(); }
  void backward(float dloss) override { model_.backward(dloss); }
  double loss_terms() const override { return double(cfg_.batch) * double(cfg_.seq); }

 private:
  bool packing() const { return cfg_.packs(); }

  // The forward of the windows at starts_: with packing, their documents first (the attention's
  // layout may place the rows by them: the rows are loaded and rotated at the positions it gives).
  double forward(const SequenceLoader& loader) {
    if (packing()) {
      for (int b = 0; b < nb_; ++b) docs_[size_t(b)] = loader.documents(starts_[size_t(b)]);
      attn_.set_documents(docs_);
      if (follow_layout(attn_, nb_, row_pos_)) model_.set_positions(row_pos_);
    }
    const int64_t T = int64_t(positions_.size());
    for (int b = 0; b < nb_; ++b)
      loader.load_window(starts_[size_t(b)], row_pos_.data() + b * T, T, tokens_.data() + b * T,
                         targets_.data() + b * T);
    return model_.forward(tokens_.data(), targets_.data());
  }

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
  std::vector<int64_t> starts_;             // window start of each local sequence
  std::vector<int64_t> row_pos_;            // (nb * T): global position of each local row
};

// The DiT task. Each sequence holds one clip of data.frames (train.packing = "none") or several
// whole clips of different lengths, each attending to itself only ("documents"): every rank
// draws the same clip lengths from the seeds, no communication.
class DitTask : public Task {
 public:
  static ModelFacts facts(const TrainConfig& cfg) {
    const model::DitConfig d = cfg.dit_model();
    ModelFacts f;
    f.num_params = model::dit_num_params(d);
    // Per layer 10 values of width dim, and the MLP's hidden output and activation.
    const double mlp = 2.0 * d.mlp_ratio * double(d.dim);
    f.values_per_row = double(d.layers) * (10.0 * double(d.dim) + mlp);
    return f;
  }

  DitTask(const TrainConfig& cfg, int64_t b0, int nb, const std::vector<int64_t>& positions,
          model::AttentionOp& attn)
      : cfg_(cfg),
        dcfg_(cfg.dit_model()),
        video_(cfg.video_spec()),
        b0_(b0),
        nb_(nb),
        positions_(positions),
        seq_frames_(cfg.seq / cfg.frame_tokens()),
        model_(dcfg_, nb, positions, attn, cfg.run_dtype(), max_clips()),
        attn_(attn),
        clip_(size_t(video_.values())),
        noise_(clip_.size()),
        xt_(positions.size() * size_t(nb) * size_t(dcfg_.patch_dim())),
        target_(xt_.size()),
        t_(size_t(max_clips())),
        labels_(t_.size()),
        clip_of_row_(positions.size() * size_t(nb)),
        clip_positions_(clip_of_row_.size()),
        docs_(size_t(nb)),
        row_pos_(repeat_positions(positions, nb)) {}
  int64_t num_params() const override { return model_.num_params(); }
  float* params() override { return model_.params(); }
  float* grads() override { return model_.grads(); }
  const std::vector<model::ParamTensor>& tensors() const override { return model_.tensors(); }
  void init_params(uint64_t seed) override { model::dit_init_params(dcfg_, model_.params(), seed); }
  double train_forward(int64_t step) override {
    // Clip k of sequence j: a training clip picked by a seeded index, with its own time and noise
    // keyed by (step, clip number j + k * batch).
    load(step, cfg_.batch, [&](int64_t j, int k) {
      const uint64_t key = mix64(uint64_t(cfg_.seed), uint64_t(step * cfg_.batch + j));
      return int64_t((k == 0 ? key : mix64(key, uint64_t(k))) % uint64_t(cfg_.clips));
    });
    return model_.forward(xt_.data(), t_.data(), labels(), target_.data());
  }
  double eval_forward(int e) override {
    // Held-out clips (indices past the training set) with fixed lengths, times and noise.
    const int64_t num_eval = int64_t(cfg_.eval_batches) * cfg_.batch;
    load(
        -1, num_eval, [&](int64_t j, int k) { return cfg_.clips + j + k * num_eval; },
        int64_t(e) * cfg_.batch);
    return model_.forward(xt_.data(), t_.data(), labels(), target_.data());
  }
  void zero_grads() override { model_.zero_grads(); }
  void backward(float dloss) override { model_.backward(dloss); }
  // Every value of every sequence, whatever clips fill it.
  double loss_terms() const override {
    return double(cfg_.batch) * double(cfg_.seq) * double(dcfg_.patch_dim());
  }

 private:
  bool packing() const { return cfg_.packs(); }
  // The most clips of this rank's sequences: every packed clip but the last of a sequence has at
  // least data.min_frames frames.
  int max_clips() const {
    return packing() ? nb_ * int((seq_frames_ - 1) / cfg_.packed_min_frames() + 1) : nb_;
  }

  // The local rows of the sequences j = j0 + b0 + b of step key_step (-1: evaluation), out of
  // `sequences` numbered ones: clip k of sequence j is clip index_of(j, k) of the videos, drawn
  // with the time and noise of clip number j + k * sequences. x_t = (1 - t) x0 + t noise, and the
  // target is the velocity noise - x0.
  template <typename IndexOf>
  void load(int64_t key_step, int64_t sequences, IndexOf index_of, int64_t j0 = 0) {
    const int64_t T = int64_t(positions_.size()), PD = dcfg_.patch_dim(), ft = cfg_.frame_tokens();
    // The clips' frames first: the attention's layout may place the rows by them.
    std::vector<std::vector<int>> frames_of(static_cast<size_t>(nb_));
    for (int b = 0; b < nb_; ++b) {
      auto& frames = frames_of[size_t(b)];
      frames = packing() ? packed_clip_frames(uint64_t(cfg_.seed), key_step, j0 + b0_ + b,
                                              seq_frames_, cfg_.packed_min_frames(), cfg_.frames)
                         : std::vector<int>{cfg_.frames};
      auto& lengths = docs_[size_t(b)];
      lengths.clear();
      for (int f : frames) lengths.push_back(f * ft);
    }
    if (packing()) {
      attn_.set_documents(docs_);
      follow_layout(attn_, nb_, row_pos_);
    }
    int clips = 0;  // conditioned clips so far
    for (int b = 0; b < nb_; ++b) {
      const int64_t j = j0 + b0_ + b;
      const std::vector<int>& frames = frames_of[size_t(b)];
      int64_t first = 0;  // first token of clip k in the sequence
      for (int k = 0; k < int(frames.size()); ++k) {
        const int64_t tokens = frames[size_t(k)] * ft;
        render(clips + k, frames[size_t(k)], index_of(j, k), key_step, j + k * sequences);
        for (int64_t t = 0; t < T; ++t) {
          const int64_t n = row_pos_[size_t(b * T + t)], r = b * T + t;
          if (n < first || n >= first + tokens) continue;
          clip_of_row_[size_t(r)] = clips + k;
          clip_positions_[size_t(r)] = n - first;
          const int64_t* at = &clip_positions_[size_t(r)];
          model::dit_patchify(dcfg_, noise_.data(), at, 1, xt_.data() + r * PD);
          model::dit_patchify(dcfg_, clip_.data(), at, 1, target_.data() + r * PD);
        }
        first += tokens;
      }
      clips += int(frames.size());
    }
    if (packing()) model_.set_clips(clips, clip_of_row_, clip_positions_);
  }
  // Clip `index` of the videos cut to its first `frames` frames, as conditioned clip c: its label,
  // its time t and x_t (in noise_) and the velocity (in clip_), keyed by (seed, key_step, number).
  void render(int c, int frames, int64_t index, int64_t key_step, int64_t number) {
    VideoSpec spec = video_;
    spec.frames = frames;
    labels_[size_t(c)] = render_clip(spec, uint64_t(cfg_.seed), index, clip_.data());
    const float t = flow_time(uint64_t(cfg_.seed), key_step, number, cfg_.time_sampling);
    t_[size_t(c)] = t;
    for (int64_t i = 0; i < spec.values(); ++i) {
      const float n = flow_noise(uint64_t(cfg_.seed), key_step, number, i);
      noise_[size_t(i)] = (1 - t) * clip_[size_t(i)] + t * n;  // x_t
      clip_[size_t(i)] = n - clip_[size_t(i)];                 // v
    }
  }
  const int32_t* labels() const { return dcfg_.classes > 0 ? labels_.data() : nullptr; }

  const TrainConfig& cfg_;
  model::DitConfig dcfg_;
  VideoSpec video_;
  int64_t b0_;
  int nb_;
  std::vector<int64_t> positions_;
  int64_t seq_frames_;  // frames of a sequence
  model::Dit model_;
  model::AttentionOp& attn_;
  std::vector<float> clip_, noise_, xt_, target_, t_;
  std::vector<int32_t> labels_;             // of each conditioned clip
  std::vector<int32_t> clip_of_row_;        // (nb * T): conditioned clip of each local row
  std::vector<int64_t> clip_positions_;     // (nb * T): token of each local row in its clip
  std::vector<std::vector<int64_t>> docs_;  // clip lengths in tokens, of each local sequence
  std::vector<int64_t> row_pos_;            // (nb * T): global position of each local row
};

}  // namespace

ModelFacts model_facts(const TrainConfig& cfg) {
  if (cfg.kind == ModelKind::Dit) return DitTask::facts(cfg);
  return GptTask::facts(cfg);
}

std::unique_ptr<Task> make_task(const TrainConfig& cfg, int64_t b0, int nb,
                                const std::vector<int64_t>& positions, model::AttentionOp& attn) {
  if (cfg.kind == ModelKind::Dit) return std::make_unique<DitTask>(cfg, b0, nb, positions, attn);
  return std::make_unique<GptTask>(cfg, b0, nb, positions, attn);
}

}  // namespace wallfacer::train
