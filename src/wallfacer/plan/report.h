#pragma once
// Printing the planner's predictions: a ranked table for people, JSON for programs.

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "wallfacer/plan/planner.h"

namespace wallfacer::plan {

// "131072", "128K" (x1024), "1M" (x1048576); UsageError otherwise.
int64_t parse_tokens(std::string_view text);

// The configuration as `attn --json` and trace files report it: strategy, placement, P, C,
// ulysses, seq, batch, heads, kv_heads, head_dim, causal, keep_kv.
nlohmann::json describe_config(const seqpar::AttnConfig& cfg, int P, Placement placement);

nlohmann::json prediction_json(const Prediction& p);
// {"cluster", "model", "seq", "gpus", "configs": [...], "best": {...} or null}
nlohmann::json plan_json(const PlanInput& in, const std::vector<Prediction>& preds);
std::string plan_table(const PlanInput& in, const std::vector<Prediction>& preds);

}  // namespace wallfacer::plan
