// wallfacer prepare: text files -> byte-level token shards (train.bin, val.bin).

#include <fmt/format.h>

#include <memory>

#include "command.h"
#include "wallfacer/core/error.h"
#include "wallfacer/train/data.h"

namespace wallfacer::cli {
namespace {

struct PrepareArgs {
  std::vector<std::string> inputs;
  std::string out;
  double val_fraction = 0.01;
};

Action setup(CLI::App& root) {
  auto args = std::make_shared<PrepareArgs>();
  auto* cmd = root.add_subcommand(
      "prepare", "Tokenize text files (bytes + end-of-text) into train/val token shards");
  cmd->add_option("--input", args->inputs, "Text files, in order (required)");
  cmd->add_option("--out", args->out, "Output directory (required)");
  cmd->add_option("--val-fraction", args->val_fraction, "Last fraction of tokens held out")
      ->capture_default_str();
  return [args]() {
    WF_USAGE_CHECK(!args->out.empty(), "--out DIR is required");
    const auto st = train::prepare(args->inputs, args->out, args->val_fraction);
    fmt::print("prepared {}: {} train tokens, {} validation tokens (vocab {})\n", args->out,
               st.train_tokens, st.val_tokens, train::kByteVocab);
    return 0;
  };
}

WALLFACER_COMMAND(20, "prepare", setup);

}  // namespace
}  // namespace wallfacer::cli
