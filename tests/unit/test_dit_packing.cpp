// train.packing = "documents" for the DiT: several clips of different lengths packed into one
// sequence, each attending to itself only, with its own conditioning and positions from its
// frame 0, against each clip run as a sequence of its own; the clip lengths; the config keys.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "wallfacer/core/error.h"
#include "wallfacer/core/rng.h"
#include "wallfacer/model/dit.h"
#include "wallfacer/model/local_attention.h"
#include "wallfacer/train/config.h"
#include "wallfacer/train/video.h"

namespace wallfacer {
namespace {

using model::Dit;
using model::DitConfig;
using model::Dtype;
using model::LocalAttention;

DitConfig small_config(int frames) {
  DitConfig cfg;
  cfg.channels = 3;
  cfg.patch = 2;
  cfg.size = 8;  // 4 x 4 patches: 16 tokens per frame
  cfg.frames = frames;
  cfg.layers = 2;
  cfg.dim = 24;
  cfg.heads = 2;
  cfg.mlp_ratio = 2;
  cfg.freq_dim = 8;
  cfg.classes = 4;
  return cfg;
}

std::vector<int64_t> iota_positions(int64_t n) {
  std::vector<int64_t> p(static_cast<size_t>(n));
  std::iota(p.begin(), p.end(), 0);
  return p;
}

// Random parameters (the adaLN-Zero initialisation would make every clip's modulation zero).
std::vector<float> random_params(const DitConfig& cfg) {
  std::vector<float> p(size_t(model::dit_num_params(cfg)));
  Rng rng(21);
  for (float& v : p) v = float(0.2 * (rng.uniform() - 0.5));
  return p;
}

// One clip: its frames, its noisy patches and targets (tokens, PD), its time and label.
struct Clip {
  int frames;
  std::vector<float> xt, target;
  float t;
  int32_t label;
};

std::vector<Clip> make_clips(const DitConfig& cfg, const std::vector<int>& frames) {
  std::vector<Clip> clips;
  Rng rng(8);
  const int64_t frame_values = int64_t(cfg.grid()) * cfg.grid() * cfg.patch_dim();
  for (int f : frames) {
    Clip c{f, std::vector<float>(size_t(f * frame_values)), {}, 0, 0};
    c.target.resize(c.xt.size());
    for (float& v : c.xt) v = float(rng.normal());
    for (float& v : c.target) v = float(rng.normal());
    c.t = float(0.05 + 0.9 * rng.uniform());
    c.label = int32_t(rng.next_u64() % uint64_t(cfg.classes));
    clips.push_back(std::move(c));
  }
  return clips;
}

struct StepResult {
  double loss = 0;
  std::vector<double> grads;
};

// The reference: each clip as a sequence of its own (a DiT of that clip's frames, positions from
// its frame 0), the squared errors and the gradients summed.
StepResult separate_clips(const std::vector<Clip>& clips, const std::vector<float>& params,
                          Dtype dtype) {
  StepResult r;
  for (const Clip& c : clips) {
    const DitConfig cfg = small_config(c.frames);
    LocalAttention attn(1, int(cfg.tokens()), cfg.heads, cfg.heads, cfg.head_dim(), false);
    Dit dit(cfg, 1, iota_positions(cfg.tokens()), attn, dtype);
    std::copy(params.begin(), params.end(), dit.params());
    r.loss += dit.forward(c.xt.data(), &c.t, &c.label, c.target.data());
    dit.zero_grads();
    dit.backward(1.0f);
    r.grads.resize(size_t(dit.num_params()), 0.0);
    for (size_t i = 0; i < r.grads.size(); ++i) r.grads[i] += dit.grads()[i];
  }
  return r;
}

// The clips packed into sequences (seqs[b]: the clip numbers of sequence b, each sequence `frames`
// frames) and run as one batch. documents / per_clip false: the same batch without the
// documents' mask / with every row conditioned by the first clip of its sequence.
StepResult packed(const std::vector<Clip>& clips, const std::vector<std::vector<int>>& seqs,
                  int frames, const std::vector<float>& params, Dtype dtype, bool documents = true,
                  bool per_clip = true) {
  const DitConfig cfg = small_config(frames);
  const int B = int(seqs.size());
  const int64_t T = cfg.tokens(), ft = int64_t(cfg.grid()) * cfg.grid(), PD = cfg.patch_dim();
  std::vector<float> xt(size_t(B * T * PD)), target(xt.size()), t;
  std::vector<int32_t> labels, clip_of_row(size_t(B * T));
  std::vector<int64_t> clip_positions(clip_of_row.size());
  std::vector<std::vector<int64_t>> docs(static_cast<size_t>(B));
  for (int b = 0; b < B; ++b) {
    int64_t row = b * T;
    const int first = int(t.size());
    for (int k : seqs[size_t(b)]) {
      const Clip& c = clips[size_t(k)];
      const int64_t n = c.frames * ft;
      std::copy(c.xt.begin(), c.xt.end(), xt.begin() + row * PD);
      std::copy(c.target.begin(), c.target.end(), target.begin() + row * PD);
      for (int64_t i = 0; i < n; ++i) {
        clip_of_row[size_t(row + i)] = per_clip ? int32_t(t.size()) : first;
        clip_positions[size_t(row + i)] = i;
      }
      t.push_back(c.t);
      labels.push_back(c.label);
      docs[size_t(b)].push_back(n);
      row += n;
    }
    EXPECT_EQ(row, (b + 1) * T) << "the clips of sequence " << b << " must fill it";
  }
  LocalAttention attn(B, int(T), cfg.heads, cfg.heads, cfg.head_dim(), false);
  if (documents) attn.set_documents(docs);
  Dit dit(cfg, B, iota_positions(T), attn, dtype, int(t.size()));
  std::copy(params.begin(), params.end(), dit.params());
  dit.set_clips(int(t.size()), clip_of_row, clip_positions);
  StepResult r;
  r.loss = dit.forward(xt.data(), t.data(), labels.data(), target.data());
  dit.zero_grads();
  dit.backward(1.0f);
  r.grads.assign(dit.grads(), dit.grads() + dit.num_params());
  return r;
}

// The largest difference of each parameter tensor's gradients, relative to that tensor's
// largest reference gradient; the worst over the tensors.
double worst_gradient(const StepResult& got, const StepResult& want) {
  double worst = 0;
  for (const auto& tensor : model::dit_param_tensors(small_config(1))) {
    double scale = 0, diff = 0;
    for (int64_t i = tensor.offset; i < tensor.offset + tensor.size; ++i) {
      scale = std::max(scale, std::abs(want.grads[size_t(i)]));
      diff = std::max(diff, std::abs(got.grads[size_t(i)] - want.grads[size_t(i)]));
    }
    EXPECT_GT(scale, 0) << tensor.name << " has no gradient in the reference";
    worst = std::max(worst, diff / scale);
  }
  return worst;
}

void check_against_separate_clips(Dtype dtype, double loss_tol, double grad_tol) {
  // Sequence 0: clips of 1, 3 and 2 frames; sequence 1: 2 and 4 frames.
  const std::vector<Clip> clips = make_clips(small_config(1), {1, 3, 2, 2, 4});
  const std::vector<std::vector<int>> seqs = {{0, 1, 2}, {3, 4}};
  const std::vector<float> params = random_params(small_config(1));
  const StepResult want = separate_clips(clips, params, dtype);
  const StepResult got = packed(clips, seqs, 6, params, dtype);
  EXPECT_NEAR(got.loss, want.loss, loss_tol * want.loss);
  const double worst = worst_gradient(got, want);
  EXPECT_LE(worst, grad_tol);
  std::printf("packed vs separate clips (%s): loss %.9g vs %.9g, worst gradient %.2e\n",
              dtype == Dtype::bf16 ? "bf16" : "fp32", got.loss, want.loss, worst);
  // Without the mask, or with one conditioning per sequence, the batch is another computation
  // (the random targets dominate the loss, which moves by 5e-6 relative; the gradients by 0.2).
  for (const auto& other : {packed(clips, seqs, 6, params, dtype, false),
                            packed(clips, seqs, 6, params, dtype, true, false)}) {
    EXPECT_GT(std::abs(other.loss - want.loss), loss_tol * want.loss);
    EXPECT_GT(worst_gradient(other, want), 10 * grad_tol);
  }
}

// Measured: loss 4e-9 relative, gradients 5e-7 (fp32) and 4e-7 (bf16) of each tensor's largest.
TEST(DitPacking, ClipsTrainAsSeparateSequencesFp32) {
  check_against_separate_clips(Dtype::fp32, 1e-7, 1e-5);
}

TEST(DitPacking, ClipsTrainAsSeparateSequencesBf16) {
  check_against_separate_clips(Dtype::bf16, 1e-6, 1e-4);
}

// A packed sequence of one clip makes the calls of one clip per sequence.
TEST(DitPacking, OneClipPerSequenceIsBitIdenticalToNoPacking) {
  for (Dtype dtype : {Dtype::fp32, Dtype::bf16}) {
    const std::vector<Clip> clips = make_clips(small_config(1), {3, 3});
    const std::vector<float> params = random_params(small_config(1));
    const StepResult got = packed(clips, {{0}, {1}}, 3, params, dtype);
    // No packing: the constructor's one clip per sequence, no set_clips, no documents.
    const DitConfig cfg = small_config(3);
    const int64_t n = cfg.tokens() * cfg.patch_dim();
    std::vector<float> xt(size_t(2 * n)), target(xt.size());
    for (int b = 0; b < 2; ++b) {
      std::copy(clips[size_t(b)].xt.begin(), clips[size_t(b)].xt.end(), xt.begin() + b * n);
      std::copy(clips[size_t(b)].target.begin(), clips[size_t(b)].target.end(),
                target.begin() + b * n);
    }
    const float t[2] = {clips[0].t, clips[1].t};
    const int32_t labels[2] = {clips[0].label, clips[1].label};
    LocalAttention attn(2, int(cfg.tokens()), cfg.heads, cfg.heads, cfg.head_dim(), false);
    Dit dit(cfg, 2, iota_positions(cfg.tokens()), attn, dtype);
    std::copy(params.begin(), params.end(), dit.params());
    const double loss = dit.forward(xt.data(), t, labels, target.data());
    dit.zero_grads();
    dit.backward(1.0f);
    EXPECT_EQ(loss, got.loss);
    for (int64_t i = 0; i < dit.num_params(); ++i)
      ASSERT_EQ(double(dit.grads()[i]), got.grads[size_t(i)]) << "parameter " << i;
  }
}

TEST(DitPacking, ClipFramesFillTheSequence) {
  int shorter = 0, longer = 0;
  for (int64_t j = 0; j < 50; ++j) {
    const auto f = train::packed_clip_frames(3, 7, j, 20, 2, 5);
    EXPECT_EQ(std::accumulate(f.begin(), f.end(), 0), 20);
    for (size_t k = 0; k < f.size(); ++k) {
      EXPECT_LE(f[k], 5);
      if (k + 1 < f.size()) {
        EXPECT_GE(f[k], 2) << "only the last clip may be cut short";
      }
      shorter += f[k] == 2;
      longer += f[k] == 5;
    }
    EXPECT_EQ(f, train::packed_clip_frames(3, 7, j, 20, 2, 5));  // a pure function of the keys
  }
  EXPECT_GT(shorter, 0);
  EXPECT_GT(longer, 0);
  EXPECT_NE(train::packed_clip_frames(3, 7, 0, 20, 1, 5),
            train::packed_clip_frames(3, 8, 0, 20, 1, 5));
  // min_frames = frames = the sequence: one whole clip.
  EXPECT_EQ(train::packed_clip_frames(3, 7, 0, 4, 4, 4), std::vector<int>{4});
}

std::string usage_error(const train::TrainConfig& c) {
  try {
    c.validate(1);
  } catch (const UsageError& e) {
    return e.what();
  }
  return "";
}

TEST(DitPacking, ConfigKeys) {
  // 8 x 8 pixels in 2 x 2 patches: 16 tokens per frame.
  const std::string base =
      "[model]\nkind = \"dit\"\npatch = 2\n[data]\nframes = 4\nsize = 8\n[train]\n"
      "packing = \"documents\"\n";
  auto c = train::TrainConfig::from_toml(base, "t");
  EXPECT_EQ(c.seq, 64);  // no train.seq: one clip of data.frames
  EXPECT_EQ(c.packed_min_frames(), 4);
  EXPECT_EQ(usage_error(c), "");
  c.set("train.seq=160");  // 10 frames
  EXPECT_EQ(c.seq, 160);
  c.set("data.min_frames=1");
  EXPECT_EQ(usage_error(c), "");
  EXPECT_EQ(train::TrainConfig::from_toml(c.to_toml(), "t").seq, 160);
  c.set("train.seq=170");
  EXPECT_NE(usage_error(c).find("train.seq = 170 must be a whole number of frames of 16 tokens"),
            std::string::npos)
      << usage_error(c);
  EXPECT_NE(usage_error(c).find("use 160 or 176"), std::string::npos) << usage_error(c);
  c.set("train.seq=10");
  EXPECT_NE(usage_error(c).find("must be a whole number of frames of 16 tokens ((data.size 8 / "
                                "model.patch 2)^2) with train.packing = 'documents': use 16"),
            std::string::npos)
      << usage_error(c);
  c.set("train.seq=160");
  c.set("data.min_frames=5");
  EXPECT_NE(usage_error(c).find("data.min_frames = 5 must be in 1..data.frames (4)"),
            std::string::npos)
      << usage_error(c);
  // Without packing, train.seq stays one clip.
  auto none = train::TrainConfig::from_toml(base + "seq = 160\n", "t");
  none.set("train.packing=none");
  EXPECT_EQ(none.seq, 64);
  EXPECT_FALSE(train::TrainConfig::is_shape_key("data.min_frames"));
}

}  // namespace
}  // namespace wallfacer
