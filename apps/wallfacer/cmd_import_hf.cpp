// wallfacer import-hf: a Hugging Face Llama-family checkpoint (config.json and model.safetensors or
// a sharded set) -> a run folder that `train --resume` continues: config.toml, ckpt/step-0 and hf/
// (the original config.json with the tokenizer and generation files, for export-hf).

#include <fmt/format.h>

#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>

#include "command.h"
#include "wallfacer/comm/communicator.h"
#include "wallfacer/core/error.h"
#include "wallfacer/core/file.h"
#include "wallfacer/core/json_error.h"
#include "wallfacer/core/safetensors.h"
#include "wallfacer/train/checkpoint.h"
#include "wallfacer/train/hf_checkpoint.h"

namespace wallfacer::cli {
namespace {

namespace fs = std::filesystem;

// The files of a Hugging Face folder besides the weights that a run keeps for export-hf.
const char* const kSideFiles[] = {"config.json",
                                  "generation_config.json",
                                  "tokenizer.json",
                                  "tokenizer_config.json",
                                  "special_tokens_map.json",
                                  "tokenizer.model",
                                  "vocab.json",
                                  "merges.txt"};

struct ImportArgs {
  std::string hf_dir, out;
};

int run_import(const ImportArgs& a) {
  WF_USAGE_CHECK(!a.hf_dir.empty(), "give the Hugging Face folder: import-hf HF_DIR --out RUN_DIR");
  WF_USAGE_CHECK(!a.out.empty(), "--out RUN_DIR is required");
  WF_USAGE_CHECK(fs::is_directory(a.hf_dir), "'{}' is not a folder (give a Hugging Face folder)",
                 a.hf_dir);
  // Everything is read and checked before anything is written.
  const std::string cfg_path = a.hf_dir + "/config.json";
  const std::string text = read_file(cfg_path);
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const std::exception& e) {
    throw UsageError(fmt::format("{}: {}", cfg_path, describe_json_error(text, e)));
  }
  train::HfClass cls{};
  const model::GptConfig m = train::gpt_config_from_hf(j, cfg_path, &cls);
  train::CheckpointState st;
  st.params = train::read_hf_params(a.hf_dir, m);
  for (size_t i = 0; i < st.params.size(); ++i)
    WF_USAGE_CHECK(std::isfinite(st.params[i]), "{}: a weight is not finite (parameter {})",
                   a.hf_dir, i);
  train::TrainConfig cfg = train::hf_train_config(m, j);
  cfg.validate(1);
  std::error_code ec;
  WF_USAGE_CHECK(!fs::exists(a.out + "/config.toml", ec) && !fs::exists(a.out + "/ckpt", ec),
                 "--out '{}' already holds a run (config.toml or ckpt/): choose another --out",
                 a.out);

  comm::MpiSession mpi(nullptr, nullptr);
  auto world = comm::Communicator::world();
  WF_USAGE_CHECK(world.size() == 1, "import-hf runs in one process (got {} ranks)", world.size());
  make_directories(a.out + "/hf", "--out");
  for (const char* f : kSideFiles) {
    const fs::path from = fs::path(a.hf_dir) / f;
    if (fs::is_regular_file(from, ec)) write_file_atomic(a.out + "/hf/" + f, read_file(from));
  }
  const std::string toml = cfg.to_toml();
  write_file_atomic(a.out + "/config.toml", toml);
  st.step = 0;
  st.rng_state = uint64_t(cfg.seed);  // a fresh run's: resuming step 0 is that run
  st.m.assign(st.params.size(), 0.0f);
  st.v.assign(st.params.size(), 0.0f);
  const std::string layout =
      nlohmann::json{
          {"world", 1}, {"sp", 1}, {"dp", 1}, {"imported", std::string(train::hf_class_name(cls))}}
          .dump();
  train::save_checkpoint(world, a.out + "/ckpt", st, toml, layout);
  fmt::print(
      "imported {} ({}, {} parameters: {} layers, dim {}, heads {}/{}) into {}: config.toml, "
      "ckpt/step-0\ncontinue it with: wallfacer train --config {}/config.toml --out {} --resume "
      "--set data.dir=TOKENS_DIR (prepare --tokens)\n",
      a.hf_dir, train::hf_class_name(cls), st.params.size(), m.layers, m.dim, m.heads, m.kv_heads,
      a.out, a.out, a.out);
  return 0;
}

Action setup(CLI::App& root) {
  auto args = std::make_shared<ImportArgs>();
  auto* cmd = root.add_subcommand(
      "import-hf",
      "A Hugging Face Llama, Qwen2 or Mistral checkpoint folder -> a run folder (config.toml and "
      "a checkpoint at step 0) that train --resume continues");
  cmd->add_option("HF_DIR", args->hf_dir,
                  "Folder with config.json and model.safetensors (or "
                  "model.safetensors.index.json and its shards)");
  cmd->add_option("--out", args->out, "The run folder to write (required)");
  return [args]() { return run_import(*args); };
}

WALLFACER_COMMAND(24, "import-hf", setup);

}  // namespace
}  // namespace wallfacer::cli
