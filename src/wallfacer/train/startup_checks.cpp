#include "wallfacer/train/startup_checks.h"

#include <fmt/ranges.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "wallfacer/comm/topology.h"
#include "wallfacer/core/error.h"
#include "wallfacer/core/memory.h"
#include "wallfacer/seqpar/attention.h"
#include "wallfacer/train/data.h"
#include "wallfacer/train/dist_model.h"
#include "wallfacer/train/task.h"

namespace wallfacer::train {

namespace {

// The settings of a config as "section.key" -> value (as TOML writes it), without data.dir: each
// node may hold its own copy of the data under another path.
std::map<std::string, std::string> config_settings(const std::string& toml_text) {
  std::map<std::string, std::string> out;
  std::istringstream in(toml_text);
  std::string line, section;
  while (std::getline(in, line)) {
    if (line.size() >= 2 && line.front() == '[' && line.back() == ']') {
      section = line.substr(1, line.size() - 2);
      continue;
    }
    const auto eq = line.find(" = ");
    if (eq == std::string::npos) continue;
    const std::string key = section + "." + line.substr(0, eq);
    if (key != "data.dir") out[key] = line.substr(eq + 3);
  }
  return out;
}

// `text` of rank 0 on every rank (collective): the bytes travel in an all-reduce of the maximum,
// to which only rank 0 contributes.
std::string text_of_rank0(comm::Communicator& world, const std::string& text) {
  uint64_t len = world.rank() == 0 ? text.size() : 0;
  world.all_reduce_max(&len, 1);
  std::vector<uint64_t> words((len + 7) / 8, 0);
  if (world.rank() == 0) std::memcpy(words.data(), text.data(), text.size());
  world.all_reduce_max(words.data(), int64_t(words.size()));
  std::string out(len, '\0');
  std::memcpy(out.data(), words.data(), len);
  return out;
}

// Every rank must train the same config: a rank with another model.dim or train.seq would wait
// forever in a collective of another size. An all-reduce of the smallest and largest hash of the
// settings finds a difference; then every rank that differs from rank 0 names the keys, and every
// rank stops with the message of the lowest one (collective).
void check_same_config(comm::Communicator& world, const TrainConfig& cfg) {
  const std::string toml_text = cfg.to_toml();
  const auto mine = config_settings(toml_text);
  std::string text;
  for (const auto& [key, value] : mine) text += key + " = " + value + "\n";
  const uint64_t h = fnv1a64(text.data(), text.size());
  uint64_t extremes[2] = {h, ~h};
  world.all_reduce_max(extremes, 2);
  if (extremes[0] == ~extremes[1]) return;
  const auto first = config_settings(text_of_rank0(world, toml_text));
  world.agree([&] {
    std::vector<std::string> differ;
    for (const auto& [key, value] : mine) {
      const auto it = first.find(key);
      if (it == first.end() || it->second != value)
        differ.push_back(fmt::format("{} ({} here, {} on rank 0)", key, value,
                                     it == first.end() ? "absent" : it->second));
    }
    for (const auto& [key, value] : first)
      if (!mine.count(key))
        differ.push_back(fmt::format("{} (absent here, {} on rank 0)", key, value));
    if (differ.empty()) return;
    if (differ.size() > 4) {
      differ.resize(4);
      differ.back() = "...";
    }
    throw UsageError(fmt::format(
        "ranks were started with different configs: this rank differs from rank 0 in {}; give "
        "every rank the same --config and --set options",
        fmt::join(differ, ", ")));
  });
}

// Stops before allocating when the model, its optimizer state, the activations of this rank's
// rows and its attentions do not fit (an estimate: parameters, gradients and AdamW moments, 16
// bytes per parameter; the values each token row keeps (ModelFacts), 4 bytes each; the scratch of
// every DistAttention the trainer builds, one per window of the layers and per local sequence
// with packing, on the rank that needs most, and what keep_kv holds per layer).
void check_training_memory(const TrainConfig& cfg, int P) {
  const ModelFacts model = model_facts(cfg);
  const double n = double(model.num_params);
  const double rows = double(cfg.batch / cfg.dp(P)) * double(cfg.seq / cfg.sp);
  // As DistAttentionOp builds them: with packing one attention of batch 1 per local sequence.
  seqpar::AttnConfig one = cfg.attn_config(P);
  double sequences = 1;
  if (cfg.packs() && one.batch > 1) {
    sequences = one.batch;
    one.batch = 1;
  }
  double attention = 0;
  for (const auto& [window, layers] : layer_windows(cfg)) {
    one.window = window;
    seqpar::DistAttentionMemory most;
    for (int r = 0; r < cfg.sp; ++r) {
      const seqpar::DistAttentionMemory m = seqpar::dist_attention_memory(one, cfg.sp, r);
      most.scratch = std::max(most.scratch, m.scratch);
      most.kept_per_forward = std::max(most.kept_per_forward, m.kept_per_forward);
    }
    attention += sequences * (double(most.scratch) + layers * double(most.kept_per_forward));
  }
  check_memory(
      16.0 * n + 4.0 * rows * model.values_per_row + attention,
      fmt::format("training this model ({:.3g} parameters, {:.3g} token rows per rank)", n, rows));
}

}  // namespace

TrainConfig config_as_run(comm::Communicator& world, const TrainConfig& given) {
  TrainConfig cfg = given;
  cfg.parallel.inner =
      seqpar::resolved_inner_in_world(cfg.parallel.strategy, cfg.parallel.inner, cfg.sp);
  cfg.validate(world.size());
  cfg.dtype = cfg.run_dtype();
  check_same_config(world, cfg);
  check_training_memory(cfg, world.size());
  return cfg;
}

}  // namespace wallfacer::train
