// wallfacer export-hf: a Llama-architecture checkpoint -> a Hugging Face folder (config.json,
// model.safetensors) that transformers' AutoModelForCausalLM.from_pretrained loads.

#include <fmt/format.h>
#include <unistd.h>

#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>

#include "command.h"
#include "wallfacer/core/error.h"
#include "wallfacer/core/file.h"
#include "wallfacer/model/gpt.h"
#include "wallfacer/train/checkpoint.h"
#include "wallfacer/train/config.h"
#include "wallfacer/train/hf_checkpoint.h"

namespace wallfacer::cli {
namespace {

namespace fs = std::filesystem;

struct ExportArgs {
  std::string ckpt, out, dtype = "fp32";
};

// The hf/ folder import-hf wrote into the run folder of checkpoint `dir` (RUN/ckpt/step-N), or
// into `given` (a run folder); "" when there is none.
std::string imported_files(const std::string& given, const std::string& dir) {
  std::error_code ec;
  for (const fs::path& p :
       {fs::path(given) / "hf", fs::path(dir).parent_path().parent_path() / "hf"})
    if (fs::is_regular_file(p / "config.json", ec)) return p.string();
  return "";
}

int run_export(const ExportArgs& a) {
  WF_USAGE_CHECK(!a.ckpt.empty(), "give the checkpoint: export-hf RUN_DIR|CKPT_DIR --out HF_DIR");
  WF_USAGE_CHECK(!a.out.empty(), "--out HF_DIR is required");
  const Dtype dtype = parse_dtype(a.dtype);
  const std::string dir = train::resolve_checkpoint(a.ckpt);
  const auto cfg = train::TrainConfig::from_record(train::checkpoint_config(dir), dir);
  WF_USAGE_CHECK(cfg.kind == train::ModelKind::Gpt && cfg.model.arch == model::Arch::Llama,
                 "'{}' is not a model.arch = 'llama' checkpoint: export-hf writes Llama-family "
                 "models",
                 dir);
  const model::GptConfig& m = cfg.model;
  // The imported config.json (its class, token ids, ...) and side files, when there are some.
  const std::string side = imported_files(a.ckpt, dir);
  nlohmann::json base = nlohmann::json::object();
  train::HfClass prefer{};
  bool has_prefer = false;
  if (!side.empty()) {
    try {
      base = nlohmann::json::parse(read_file(side + "/config.json"));
      train::gpt_config_from_hf(base, side + "/config.json", &prefer);
      has_prefer = true;
    } catch (const std::exception&) {
      // Only the class and the keys the model does not set are taken from it.
    }
    if (!base.is_object()) base = nlohmann::json::object();
  }
  const train::HfClass cls = train::hf_class_for(m, has_prefer ? &prefer : nullptr);
  const nlohmann::json j = train::hf_config_json(m, cls, base, cfg.seq, dtype);
  std::error_code ec;
  WF_USAGE_CHECK(!fs::exists(a.out, ec) || (fs::is_directory(a.out, ec) && fs::is_empty(a.out, ec)),
                 "--out '{}' exists and is not an empty folder: choose another --out", a.out);
  const fs::path out = fs::absolute(fs::path(a.out)).lexically_normal();
  WF_USAGE_CHECK(fs::is_directory(out.parent_path(), ec),
                 "--out '{}': the folder that would hold it does not exist", a.out);
  const auto st = train::load_checkpoint(dir, 0, 0, model::gpt_num_params(m));

  // Written into a temporary folder beside --out, renamed when complete.
  const fs::path tmp =
      out.parent_path() / fmt::format(".{}.tmp-{}", out.filename().string(), getpid());
  fs::remove_all(tmp, ec);
  make_directories(tmp.string(), "--out");
  try {
    if (!side.empty()) {
      for (const auto& e : fs::directory_iterator(side))
        if (e.is_regular_file() && e.path().filename() != "config.json")
          write_file_atomic((tmp / e.path().filename()).string(), read_file(e.path().string()));
    }
    write_file_atomic((tmp / "config.json").string(), j.dump(2) + "\n");
    train::write_hf_params((tmp / "model.safetensors").string(), m, st.params.data(), dtype);
    if (fs::exists(out, ec)) fs::remove(out, ec);
    fs::rename(tmp, out);
    fsync_dir(out.parent_path().string());
  } catch (...) {
    fs::remove_all(tmp, ec);
    throw;
  }
  fmt::print("exported {} (step {}) to {}: {} in {}, config.json, model.safetensors\n", dir,
             st.step, a.out, train::hf_class_name(cls), dtype_name(dtype));
  return 0;
}

Action setup(CLI::App& root) {
  auto args = std::make_shared<ExportArgs>();
  auto* cmd = root.add_subcommand(
      "export-hf",
      "A Llama-family checkpoint -> a Hugging Face folder (config.json, model.safetensors) for "
      "transformers");
  cmd->add_option("CKPT", args->ckpt,
                  "A run folder (its newest checkpoint), a ckpt/ folder or a step-N checkpoint");
  cmd->add_option("--out", args->out, "The Hugging Face folder to write (required; new or empty)");
  cmd->add_option("--dtype", args->dtype, "fp32 | bf16 (rounded to nearest even)")
      ->check(CLI::IsMember({"fp32", "bf16"}))
      ->capture_default_str();
  return [args]() { return run_export(*args); };
}

WALLFACER_COMMAND(26, "export-hf", setup);

}  // namespace
}  // namespace wallfacer::cli
