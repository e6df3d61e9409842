#pragma once
// Training configuration: a TOML file plus `--set key=value` overrides. Every key has a type and a
// default; unknown keys, values of the wrong type and inconsistent values raise UsageError with a
// one-line message before any work starts.

#include <cstdint>
#include <string>
#include <vector>

#include "wallfacer/model/gpt.h"
#include "wallfacer/seqpar/attention.h"

namespace wallfacer::train {

struct TrainConfig {
  model::GptConfig model;
  // train.*
  int64_t seq = 1024;
  int batch = 1;  // sequences per step, over all data-parallel replicas
  int64_t steps = 100;
  double lr = 1e-3;
  double min_lr = 1e-4;
  int64_t warmup = 10;
  double weight_decay = 0.1;
  double beta1 = 0.9;
  double beta2 = 0.95;
  double grad_clip = 1.0;  // 0: off
  int64_t seed = 1;
  int64_t ckpt_every = 0;  // 0: no checkpoints
  int64_t eval_every = 0;  // 0: no evaluation
  int eval_batches = 1;
  // data.*
  std::string data_dir = "data/kjv";
  // parallel.*
  int sp = 1;
  std::string strategy = "ring";
  int teams = 1;
  std::string checkpointing = "none";

  // Fills the config from TOML text (name is the file name, for messages).
  static TrainConfig from_toml(const std::string& text, const std::string& name);
  static TrainConfig from_file(const std::string& path);
  // Applies one "section.key=value" override.
  void set(const std::string& assignment);
  // Checks the values against each other and against a world of P ranks.
  void validate(int P) const;
  // The config as TOML (what the checkpoint manifest records).
  std::string to_toml() const;

  int dp(int P) const { return P / sp; }
  seqpar::AttnConfig attn_config(int P) const;
};

}  // namespace wallfacer::train
