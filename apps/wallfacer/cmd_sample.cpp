// wallfacer sample: generate from a training checkpoint in one process, by its model kind: text
// from a GPT (KV cache), a video clip written as an animated GIF from a DiT (Euler steps of the
// learned flow).

#include <fmt/format.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>

#include "command.h"
#include "wallfacer/core/error.h"
#include "wallfacer/core/file.h"
#include "wallfacer/core/rng.h"
#include "wallfacer/model/dit_sampler.h"
#include "wallfacer/model/sampler.h"
#include "wallfacer/train/checkpoint.h"
#include "wallfacer/train/config.h"
#include "wallfacer/train/data.h"

namespace wallfacer::cli {
namespace {

constexpr int kMaxTokens = 1 << 20;  // the decoder's KV cache holds prompt + tokens positions

struct SampleArgs {
  std::string ckpt;
  std::string prompt = "In the beginning";
  int tokens = 200;
  double temperature = 0.8;
  int64_t seed = 1;
  // DiT
  std::string out;
  int steps = 50;
  int label = 0;
  int scale = 2;
};

int sample_dit(const SampleArgs& a, const train::TrainConfig& cfg, const std::string& dir) {
  WF_USAGE_CHECK(!a.out.empty(), "--out FILE.gif is required for a DiT checkpoint");
  check_output_folder(a.out, "--out");
  WF_USAGE_CHECK(a.steps >= 1 && a.steps <= 100000, "--steps is {}; give 1..100000 Euler steps",
                 a.steps);
  WF_USAGE_CHECK(a.scale >= 1 && a.scale <= 64, "--scale is {}; give 1..64", a.scale);
  const model::DitConfig dcfg = cfg.dit_model();
  const auto st = train::load_checkpoint(dir, 0, 0, model::dit_num_params(dcfg));
  const auto clip =
      model::dit_sample_clip(dcfg, st.params.data(), a.steps, a.label, uint64_t(a.seed));
  model::write_clip_gif(a.out, dcfg, clip.data(), a.scale, 10);
  fmt::print("wrote {}: {} frames of {}x{} pixels (shown x{}), class {}, {} Euler steps\n", a.out,
             dcfg.frames, dcfg.size, dcfg.size, a.scale, dcfg.classes > 0 ? a.label : -1, a.steps);
  return 0;
}

int run_sample(const SampleArgs& a) {
  WF_USAGE_CHECK(!a.ckpt.empty(), "--ckpt DIR is required");
  WF_USAGE_CHECK(a.tokens >= 0 && a.tokens <= kMaxTokens, "--tokens is {}; give 0..{}", a.tokens,
                 kMaxTokens);
  WF_USAGE_CHECK(std::isfinite(a.temperature) && a.temperature >= 0,
                 "--temperature is {}; give a finite number >= 0 (0: greedy)", a.temperature);
  const std::string dir = train::resolve_checkpoint(a.ckpt);
  const auto cfg = train::TrainConfig::from_toml(train::checkpoint_config(dir), dir);
  if (cfg.kind == train::ModelKind::Dit) return sample_dit(a, cfg, dir);
  WF_USAGE_CHECK(a.out.empty(),
                 "--out is for a DiT checkpoint's GIF; '{}' is a GPT checkpoint, whose text is "
                 "printed (redirect it to a file instead)",
                 dir);
  const auto n = model::gpt_num_params(cfg.model);
  const auto st = train::load_checkpoint(dir, 0, 0, n);
  std::vector<uint16_t> prompt = train::tokenize_bytes(a.prompt);
  prompt.pop_back();  // no end-of-text after the prompt
  WF_USAGE_CHECK(!prompt.empty(), "--prompt must not be empty");
  for (uint16_t t : prompt) {
    WF_USAGE_CHECK(t < cfg.model.vocab,
                   "the prompt's byte {} is outside the checkpoint's vocabulary of {}", t,
                   cfg.model.vocab);
  }
  model::GptDecoder dec(cfg.model, st.params.data(), int(prompt.size()) + a.tokens);
  Rng rng(uint64_t(a.seed));
  const float* logits = nullptr;
  for (uint16_t t : prompt) logits = dec.step(t);
  std::vector<int32_t> out;
  for (int i = 0; i < a.tokens; ++i) {
    const int32_t t = model::sample_token(logits, cfg.model.vocab, a.temperature, rng.uniform());
    if (t == train::kEndOfText) break;
    out.push_back(t);
    if (i + 1 < a.tokens) logits = dec.step(t);
  }
  fmt::print("{}{}\n", a.prompt, train::detokenize(out));
  WF_CHECK(std::fflush(stdout) == 0 && !std::ferror(stdout),
           "cannot write the sample to standard output: {}", std::strerror(errno));
  return 0;
}

Action setup(CLI::App& root) {
  auto args = std::make_shared<SampleArgs>();
  auto* cmd = root.add_subcommand(
      "sample", "Generate text (GPT checkpoint) or a video clip as a GIF (DiT checkpoint)");
  cmd->add_option("--ckpt", args->ckpt,
                  "Checkpoint dir: step-N, ckpt/ or a training --out dir (required)");
  cmd->add_option("--prompt", args->prompt, "Text to continue")->capture_default_str();
  cmd->add_option("--tokens", args->tokens, "Tokens to generate")->capture_default_str();
  cmd->add_option("--temperature", args->temperature, "Sampling temperature (0: greedy)")
      ->capture_default_str();
  cmd->add_option("--seed", args->seed, "Sampling seed")->capture_default_str();
  cmd->add_option("--out", args->out, "DiT: output animated GIF (required for a DiT)");
  cmd->add_option("--steps", args->steps, "DiT: Euler steps from noise")->capture_default_str();
  cmd->add_option("--class", args->label,
                  "DiT: class label (shape kind: 0 square, 1 disc, "
                  "2 triangle, 3 diamond)")
      ->capture_default_str();
  cmd->add_option("--scale", args->scale, "DiT: pixel scale of the GIF")->capture_default_str();
  return [args]() { return run_sample(*args); };
}

WALLFACER_COMMAND(40, "sample", setup);

}  // namespace
}  // namespace wallfacer::cli
