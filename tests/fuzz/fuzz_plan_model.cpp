// Model files for the planner (plan/model.h): any TOML text gives a model or a UsageError; a model
// has a positive parameter count and finite positive FLOPs.

#include <cmath>

#include "fuzz.h"
#include "wallfacer/plan/model.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace wallfacer;
  const auto read =
      fuzz::accepted([&] { return plan::parse_model(fuzz::as_text(data, size), "input.toml"); });
  if (!read) return 0;
  const plan::ModelSpec& m = *read;
  FUZZ_EXPECT(m.head_dim() >= 1 && m.kv_dim() >= 1, fmt::format("head dim {}", m.head_dim()));
  FUZZ_EXPECT(plan::param_count(m) > 0, fmt::format("{} parameters", plan::param_count(m)));
  const double dense = plan::layer_dense_flops_per_token(m), head = plan::head_flops_per_token(m);
  FUZZ_EXPECT(std::isfinite(dense) && dense > 0 && std::isfinite(head) && head >= 0,
              fmt::format("{} and {} FLOPs per token", dense, head));
  return 0;
}
