// Training configs (train/config.h): TOML text, then `--set key=value` overrides, one per line
// after a line "--set". Any input gives a config or a UsageError; a config validates or raises
// UsageError on each world size, a valid one has a positive parameter count, and its TOML (what
// a checkpoint records) reads back to the same values.

#include <algorithm>
#include <string>
#include <vector>

#include "fuzz.h"
#include "wallfacer/train/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace wallfacer;
  const std::string input = fuzz::as_text(data, size);
  size_t mark = input.compare(0, 6, "--set\n") == 0 ? 0 : input.find("\n--set\n");
  const bool has_sets = mark != std::string::npos;
  if (has_sets && mark > 0) mark += 1;  // the line itself
  const std::string toml = has_sets ? input.substr(0, mark) : input;
  std::vector<std::string> sets;
  for (size_t at = mark + 6; has_sets && at < input.size();) {
    const size_t end = std::min(input.find('\n', at), input.size());
    if (end > at) sets.push_back(input.substr(at, end - at));
    at = end + 1;
  }
  const auto read =
      fuzz::accepted([&] { return train::TrainConfig::from_toml(toml, "input.toml", sets); });
  if (!read) return 0;
  const train::TrainConfig& c = *read;
  // A valid config's parameters are counted before anything is allocated (check_training_memory).
  for (int P : {1, 2, 3, 4, 8}) {
    if (!fuzz::accepted([&] { return (c.validate(P), true); })) continue;
    const int64_t n = c.kind == train::ModelKind::Dit ? model::dit_num_params(c.dit_model())
                                                      : model::gpt_num_params(c.model);
    FUZZ_EXPECT(n > 0, fmt::format("{} parameters", n));
  }
  const std::string text = c.to_toml();
  train::TrainConfig back;
  try {
    back = train::TrainConfig::from_toml(text, "written.toml");
  } catch (const UsageError& e) {
    fuzz::property_failed("the written config reads back", fmt::format("{}\n{}", e.what(), text));
  }
  std::string changed;
  for (const auto& ch : back.changes_from(c))
    changed += fmt::format("{}: {} -> {}\n", ch.key, ch.before, ch.after);
  FUZZ_EXPECT(changed.empty(), changed + text);
  return 0;
}
