// wallfacer prepare: text files -> byte-level token shards (train.bin, val.bin), or token-id
// arrays of any tokenizer (.npy) -> int32 token shards.

#include <fmt/format.h>

#include <memory>

#include "command.h"
#include "wallfacer/core/error.h"
#include "wallfacer/train/data.h"

namespace wallfacer::cli {
namespace {

struct PrepareArgs {
  std::vector<std::string> inputs, tokens;
  std::string out;
  double val_fraction = 0.01;
  int64_t eos = -1, vocab = 0;
};

Action setup(CLI::App& root) {
  auto args = std::make_shared<PrepareArgs>();
  auto* cmd = root.add_subcommand(
      "prepare",
      "Tokenize text files (bytes + end-of-text), or take token-id arrays (.npy) of any "
      "tokenizer, into train/val token shards");
  auto* input = cmd->add_option("--input", args->inputs, "Text files, in order");
  auto* tokens = cmd->add_option(
      "--tokens", args->tokens,
      "Token-id files (1-D .npy of int32/int64/uint32, e.g. from scripts/tokenize), in order; "
      "each file ends a document");
  input->excludes(tokens);
  cmd->add_option("--eos", args->eos,
                  "With --tokens: the end-of-text id that ends documents (default: the "
                  "vocabulary's last id)");
  cmd->add_option("--vocab", args->vocab,
                  "With --tokens: the vocabulary size (default: the largest id + 1, end-of-text "
                  "included)");
  cmd->add_option("--out", args->out, "Output directory (required)");
  cmd->add_option("--val-fraction", args->val_fraction, "Last fraction of tokens held out")
      ->capture_default_str();
  return [args]() {
    WF_USAGE_CHECK(!args->out.empty(), "--out DIR is required");
    WF_USAGE_CHECK(!args->inputs.empty() || !args->tokens.empty(),
                   "give text files with --input FILE..., or token-id arrays with --tokens "
                   "FILE.npy...");
    WF_USAGE_CHECK(args->tokens.empty() ? args->eos == -1 && args->vocab == 0 : true,
                   "--eos and --vocab go with --tokens (byte-level text uses end-of-text {} and "
                   "vocabulary {})",
                   train::kEndOfText, train::kByteVocab);
    const auto st = args->tokens.empty()
                        ? train::prepare(args->inputs, args->out, args->val_fraction)
                        : train::prepare_tokens(args->tokens, args->out, args->val_fraction,
                                                args->eos, args->vocab);
    fmt::print("prepared {}: {} train tokens, {} validation tokens (vocab {}, end-of-text {})\n",
               args->out, st.train_tokens, st.val_tokens, st.vocab, st.eos);
    return 0;
  };
}

WALLFACER_COMMAND(20, "prepare", setup);

}  // namespace
}  // namespace wallfacer::cli
