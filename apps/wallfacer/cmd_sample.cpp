// wallfacer sample: generate from a training checkpoint in one process, by its model kind: text
// from a GPT (KV cache), a video clip written as an animated GIF from a DiT (Euler steps of the
// learned flow). A GPT whose vocabulary is not byte-level (trained on `prepare --tokens` shards)
// takes and prints token ids, or text with --tokenizer tokenizer.json (hf_tokenizer.h).

#include <fmt/format.h>

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string_view>

#include "command.h"
#include "hf_tokenizer.h"
#include "wallfacer/core/error.h"
#include "wallfacer/core/file.h"
#include "wallfacer/core/npy.h"
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
  bool has_prompt = false;
  std::string tokenizer;  // a Hugging Face tokenizer.json: --prompt encoded, the sample decoded
  int tokens = 200;
  double temperature = 0.8;
  int64_t seed = 1;
  // Token ids
  std::string prompt_ids;
  bool ids = false;
  int64_t eos = -1;
  std::string logits;  // FILE.npy of the logits each token is drawn from
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

// "1,2,3" (commas or spaces) as ids inside the vocabulary.
std::vector<int32_t> parse_ids(const std::string& text, int vocab) {
  std::vector<int32_t> ids;
  std::string_view rest = text;
  while (!rest.empty()) {
    const size_t end = std::min(rest.find(','), rest.find(' '));
    const std::string_view word = rest.substr(0, end);
    rest = end == std::string_view::npos ? std::string_view() : rest.substr(end + 1);
    if (word.empty()) continue;
    int64_t id = -1;
    const auto [stop, ec] = std::from_chars(word.data(), word.data() + word.size(), id);
    WF_USAGE_CHECK(ec == std::errc() && stop == word.data() + word.size() && id >= 0 && id < vocab,
                   "--prompt-ids holds '{}', not a token id in 0..{} (the checkpoint's "
                   "vocabulary)",
                   word, vocab - 1);
    ids.push_back(int32_t(id));
  }
  WF_USAGE_CHECK(!ids.empty(), "--prompt-ids must hold at least one token id");
  return ids;
}

int run_sample(const SampleArgs& a) {
  WF_USAGE_CHECK(!a.ckpt.empty(), "--ckpt DIR is required");
  WF_USAGE_CHECK(a.tokens >= 0 && a.tokens <= kMaxTokens, "--tokens is {}; give 0..{}", a.tokens,
                 kMaxTokens);
  WF_USAGE_CHECK(std::isfinite(a.temperature) && a.temperature >= 0,
                 "--temperature is {}; give a finite number >= 0 (0: greedy)", a.temperature);
  const std::string dir = train::resolve_checkpoint(a.ckpt);
  const auto cfg = train::TrainConfig::from_record(train::checkpoint_config(dir), dir);
  if (cfg.kind == train::ModelKind::Dit) return sample_dit(a, cfg, dir);
  WF_USAGE_CHECK(a.out.empty(),
                 "--out is for a DiT checkpoint's GIF; '{}' is a GPT checkpoint, whose text is "
                 "printed (redirect it to a file instead)",
                 dir);
  const int vocab = cfg.model.vocab;
  const bool tokenizer = !a.tokenizer.empty();
  WF_USAGE_CHECK(!(a.has_prompt && !a.prompt_ids.empty()),
                 "give the prompt as --prompt TEXT or --prompt-ids 1,2,3, not both");
  // Byte-level text, unless the vocabulary is another tokenizer's or ids are asked for.
  const bool byte_level = vocab == train::kByteVocab && !tokenizer;
  WF_USAGE_CHECK(byte_level || tokenizer || !a.prompt_ids.empty(),
                 "the checkpoint's vocabulary ({}) is not byte-level text ({}): give its "
                 "tokenizer, --tokenizer tokenizer.json, or the prompt as token ids, --prompt-ids "
                 "1,2,3 (scripts/tokenize makes them)",
                 vocab, train::kByteVocab);
  const bool ids = a.ids || (!tokenizer && (!a.prompt_ids.empty() || !byte_level));
  WF_USAGE_CHECK(a.eos >= -1 && a.eos < vocab,
                 "--eos {} must be a token id in 0..{} (the checkpoint's vocabulary)", a.eos,
                 vocab - 1);
  // Generation stops at end-of-text: --eos, else byte-level text's.
  const int64_t eos = a.eos >= 0 ? a.eos : byte_level ? train::kEndOfText : -1;
  std::vector<int32_t> prompt;
  if (!a.prompt_ids.empty()) {
    prompt = parse_ids(a.prompt_ids, vocab);
  } else if (tokenizer) {
    prompt = tokenizer_encode(a.tokenizer, a.prompt, vocab);
  } else {
    for (uint16_t t : train::tokenize_bytes(a.prompt)) prompt.push_back(t);
    prompt.pop_back();  // no end-of-text after the prompt
    WF_USAGE_CHECK(!prompt.empty(), "--prompt must not be empty");
  }
  const auto n = model::gpt_num_params(cfg.model);
  const auto st = train::load_checkpoint(dir, 0, 0, n);
  model::GptDecoder dec(cfg.model, st.params.data(), int(prompt.size()) + a.tokens);
  Rng rng(uint64_t(a.seed));
  const float* logits = nullptr;
  for (int32_t t : prompt) logits = dec.step(t);
  std::vector<int32_t> out;
  std::vector<float> kept;
  for (int i = 0; i < a.tokens; ++i) {
    if (!a.logits.empty()) kept.insert(kept.end(), logits, logits + vocab);
    const int32_t t = model::sample_token(logits, vocab, a.temperature, rng.uniform());
    if (t == eos) break;
    out.push_back(t);
    if (i + 1 < a.tokens) logits = dec.step(t);
  }
  prompt.insert(prompt.end(), out.begin(), out.end());
  // Decoded before anything is written: a failing tokenizer leaves no --logits file behind.
  const std::string text = ids         ? fmt::format("{}", fmt::join(prompt, " "))
                           : tokenizer ? tokenizer_decode(a.tokenizer, prompt)
                                       : a.prompt + train::detokenize(out);
  if (!a.logits.empty())
    write_npy(a.logits, kept.data(), {int64_t(kept.size()) / vocab, int64_t(vocab)});
  fmt::print("{}\n", text);
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
  cmd->add_option("--prompt", args->prompt, "Text to continue")
      ->capture_default_str()
      ->each([args](const std::string&) { args->has_prompt = true; });
  cmd->add_option("--tokenizer", args->tokenizer,
                  "GPT: a Hugging Face tokenizer.json: --prompt is encoded and the sample printed "
                  "as text with it (runs scripts/tokenize: python3 with the package 'tokenizers')");
  cmd->add_option("--tokens", args->tokens, "Tokens to generate")->capture_default_str();
  cmd->add_option("--temperature", args->temperature, "Sampling temperature (0: greedy)")
      ->capture_default_str();
  cmd->add_option("--seed", args->seed, "Sampling seed")->capture_default_str();
  cmd->add_option("--prompt-ids", args->prompt_ids,
                  "GPT: the prompt as token ids (1,2,3), printed with the generated ids; needed "
                  "when the vocabulary is not byte-level");
  cmd->add_option("--logits", args->logits,
                  "GPT: write the logits each token is drawn from, (tokens, V) fp32, to FILE.npy");
  cmd->add_flag("--ids", args->ids, "GPT: print token ids instead of text");
  cmd->add_option("--eos", args->eos,
                  "GPT: stop at this token id (default: end-of-text 256 for byte-level text)");
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
