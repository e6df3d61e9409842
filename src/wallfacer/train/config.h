#pragma once
// Training configuration: a TOML file plus `--set key=value` overrides. Every key has a type and a
// default; unknown keys, values of the wrong type and inconsistent values raise UsageError with a
// one-line message before any work starts.

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "wallfacer/model/dit.h"
#include "wallfacer/model/gpt.h"
#include "wallfacer/seqpar/attention.h"
#include "wallfacer/train/video.h"

namespace wallfacer::train {

// model.kind: "gpt" (text, causal) or "dit" (video diffusion, full attention).
enum class ModelKind { Gpt, Dit };
// train.packing: "none" or "documents".
enum class Packing { None, Documents };

// The value names of the keys above, as a config writes them ("gpt", "documents", ...).
std::string_view kind_name(ModelKind k);
std::string_view packing_name(Packing p);

// The config's choices are parsed once, when a key is read or set (a bad value is a UsageError
// naming the key then), into the enums below; the TOML a config writes names them as they were
// given.
struct TrainConfig {
  // model.kind. Both kinds share model.layers, model.dim, model.heads and model.mlp_ratio.
  // model.arch ("gpt" | "llama" | "dit") names the architecture: "dit" is model.kind = "dit",
  // "gpt" and "llama" are text models (model.kind = "gpt") with model.arch = model::Arch of that
  // name (GptConfig: norm, MLP; model.intermediate, model.norm_eps, model.tie_embeddings,
  // model.qkv_bias, model.rope_scaling.*). A config that gives only model.kind keeps its meaning
  // (arch "gpt" or "dit"); a config writes both.
  ModelKind kind = ModelKind::Gpt;
  model::GptConfig model;
  // DiT only: model.patch, model.freq_dim, model.classes (0: unconditional, at most 4 shape kinds)
  int patch = 4;
  int freq_dim = 64;
  int classes = 4;
  // DiT data: data.frames x data.size x data.size x data.channels clips, data.clips of them for
  // training (held-out clips follow). train.seq is derived: frames * (size / patch)^2, except
  // with train.packing = "documents", where a given train.seq (a multiple of the tokens of a
  // frame) sets the sequence the clips are packed into. data.min_frames: the fewest frames of a
  // packed clip (0: data.frames).
  int frames = 16;
  int min_frames = 0;
  int size = 64;
  int channels = 3;
  int64_t clips = 256;
  TimeSampling time_sampling = TimeSampling::LogitNormal;  // train.time_sampling
  // train.trace_steps = [a, b]: the steps (1-based, inclusive) a trace records (--trace FILE, or
  // OUT/trace.json when set without it); [0, 0]: every step with --trace, no trace without.
  std::array<int64_t, 2> trace_steps{0, 0};
  // train.*
  int64_t seq = 1024;
  bool seq_given = false;  // train.seq was read or set (not a key: what derive() may override)
  int batch = 1;           // sequences per step, over all data-parallel replicas
  int64_t steps = 100;
  double lr = 1e-3;
  double min_lr = 1e-4;
  int64_t warmup = 10;
  double weight_decay = 0.1;
  double beta1 = 0.9;
  double beta2 = 0.95;
  double grad_clip = 1.0;  // 0: off
  int64_t seed = 1;
  int64_t ckpt_every = 0;    // 0: no checkpoints
  int keep_checkpoints = 3;  // train.keep_checkpoints: the newest N are kept (0: all)
  int64_t eval_every = 0;    // 0: no evaluation
  int eval_batches = 1;
  double timeout = 600;  // train.timeout: seconds a wait for another rank may last (0: no limit)
  // train.dtype: "auto" (none here: bf16 where the CPU has AVX512-BF16, else fp32; run_dtype()),
  // "fp32" or "bf16" (products and stored activations in bf16 with fp32 accumulation, fp32 master
  // weights and AdamW state; model::Dtype; docs/training.md).
  std::optional<model::Dtype> dtype;
  // train.packing: "none" (each training sequence is one document) or "documents" (the GPT's
  // attention masks at the documents of each input window: a document ends after each end-of-text
  // token; the DiT packs several clips into each sequence, each attending to itself only;
  // docs/documents.md).
  Packing packing = Packing::None;
  // data.*
  std::string data_dir = "data/kjv";
  // parallel.*
  int sp = 1;
  // parallel.strategy, teams, inner, ulysses and keep_kv, checked together
  // (seqpar::validate_parallel) where a config is parsed (from_toml, from_file). parallel.inner:
  // the double ring's inner ring length W (seqpar::AttnConfig::inner); 0: the ranks per node,
  // resolved when the job starts (config_as_run, seqpar::resolved_inner_in_world). parallel.ulysses
  // > 1: Ulysses of this degree x ring/zigzag/WallFacer-C over sp / ulysses. parallel.keep_kv:
  // WallFacer (teams > 1) keeps each layer's placed K,V from its forward for its backward
  // (seqpar::AttnConfig::keep_kv): one team K,V block per layer more memory, no placement hop and
  // no K,V gather in the backward.
  seqpar::ParallelSpec parallel;
  model::Checkpointing checkpointing = model::Checkpointing::None;  // "none" | "attention"
  // parallel.layout: where the rows of a sequence go among the sp ranks. "balanced" (the default
  // with train.packing = "documents"): the balanced layout of each sequence's documents
  // (seqpar::Layout::Balanced), which changes every step; "strategy": the strategy's own layout
  // (the only one without packing). "" (none here): the default.
  std::optional<seqpar::Layout> layout;
  // The layout a run uses: parallel.layout, or its default.
  seqpar::Layout run_layout() const;

  // Fills the config from TOML text (name is the file name, for messages), then applies the
  // "section.key=value" overrides of `sets` in order (as set does), then checks the strategy
  // options together (seqpar::validate_parallel, UsageError naming their keys): the parsed
  // config's `parallel` is one the rest may read as it is.
  static TrainConfig from_toml(const std::string& text, const std::string& name,
                               const std::vector<std::string>& sets = {});
  static TrainConfig from_file(const std::string& path, const std::vector<std::string>& sets = {});
  // The config a run recorded (checkpoint_config): its keys as written, the strategy options not
  // checked together (they were when it ran, by the rules of its day; validate checks them
  // against today's), so that every checkpoint written before still reads.
  static TrainConfig from_record(const std::string& text, const std::string& name);
  // Applies one "section.key=value" override. It checks the value alone: the strategy options
  // are checked together where a config is parsed (from_toml with its overrides).
  void set(const std::string& assignment);
  // Checks the values against each other and against a world of P ranks.
  void validate(int P) const;
  // The config as TOML (what the checkpoint manifest records).
  std::string to_toml() const;

  struct Change {
    std::string key, before, after;
  };
  // The keys whose values differ from `before`, in schema order.
  std::vector<Change> changes_from(const TrainConfig& before) const;
  // Whether a key sets the shape of the model's parameters (a resumed run may not change it).
  static bool is_shape_key(const std::string& key);

  int dp(int P) const { return P / sp; }
  // model.arch as a config writes it: "gpt", "llama" or "dit".
  std::string_view arch_name() const;
  // Whether train.packing = "documents".
  bool packs() const { return packing == Packing::Documents; }
  // The WallFacer team size C of parallel.strategy and parallel.teams (seqpar::team_size).
  int team_size() const { return seqpar::team_size(parallel.strategy, parallel.teams); }
  model::DitConfig dit_model() const;
  VideoSpec video_spec() const;
  // DiT packing: the tokens of one frame, and the fewest frames of a packed clip.
  int64_t frame_tokens() const { return int64_t(size / patch) * (size / patch); }
  int packed_min_frames() const { return min_frames > 0 ? min_frames : frames; }
  // For the DiT, sets train.seq to the tokens of a clip (after reading or overriding keys) when
  // the clip's shape is in range (validate refuses it otherwise), unless train.packing =
  // "documents" and train.seq was given.
  void derive();
  seqpar::AttnConfig attn_config(int P) const;
  // The GPT as run: model, with a model.window of train.seq or more (which keeps every causal
  // pair) run as no window.
  model::GptConfig run_model() const;
  // The dtype a run uses: train.dtype, with "auto" decided by this CPU (bf16 where it has
  // AVX512-BF16, else fp32). Parses nothing.
  model::Dtype run_dtype() const;

 private:
  // validate's checks, in its order: the model's shape, the training numbers (with sp and batch
  // against P), train.packing and parallel.layout, the parallel layout (Ulysses, teams and the
  // strategy's own checks).
  void validate_model() const;
  void validate_training(int P) const;
  void validate_packing() const;
  void validate_parallel(int P) const;
};

}  // namespace wallfacer::train
