#include "wallfacer/plan/report.h"

#include <fmt/format.h>

#include <cctype>
#include <charconv>

#include "wallfacer/core/error.h"

namespace wallfacer::plan {

int64_t parse_tokens(std::string_view text) {
  int64_t mult = 1;
  std::string_view digits = text;
  if (!text.empty()) {
    const char last = static_cast<char>(std::toupper(static_cast<unsigned char>(text.back())));
    if (last == 'K') mult = 1024;
    if (last == 'M') mult = 1024 * 1024;
    if (mult > 1) digits.remove_suffix(1);
  }
  int64_t v = 0;
  auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), v);
  WF_USAGE_CHECK(ec == std::errc() && end == digits.data() + digits.size() && v > 0 &&
                     v <= (int64_t(1) << 40) / mult,
                 "--seq '{}' is not a positive token count (e.g. 65536 or 64K)", text);
  return v * mult;
}

nlohmann::json describe_config(const seqpar::AttnConfig& cfg, int P, Placement placement) {
  return {{"strategy", seqpar::strategy_name(cfg.strategy)},
          {"placement", placement_name(placement)},
          {"P", P},
          {"C", seqpar::team_size(cfg)},
          {"inner", cfg.inner},
          {"ulysses", cfg.ulysses},
          {"seq", cfg.seq},
          {"batch", cfg.batch},
          {"heads", cfg.heads},
          {"kv_heads", cfg.kv_heads},
          {"head_dim", cfg.head_dim},
          {"causal", cfg.causal},
          {"keep_kv", cfg.keep_kv}};
}

nlohmann::json prediction_json(const Prediction& p) {
  nlohmann::json j;
  j["label"] = p.cand.label();
  j["strategy"] = p.cand.strategy_label();
  j["teams"] = p.cand.teams;
  j["inner"] = p.cand.inner;
  j["ulysses"] = p.cand.ulysses;
  j["placement"] = std::string(placement_name(p.cand.placement));
  j["keep_kv"] = p.cand.keep_kv;
  j["gpus"] = p.P;
  j["feasible"] = p.feasible;
  j["reason"] = p.reason;
  j["tokens_per_s"] = p.tokens_per_s;
  j["step_s"] = p.step_s;
  j["exposed_comm_s"] = p.exposed_comm_s;
  j["attn_fwd_s"] = p.attn_fwd_s;
  j["attn_bwd_s"] = p.attn_bwd_s;
  j["dense_s"] = p.dense_s;
  j["grad_sync_s"] = p.grad_sync_s;
  j["grad_sync_exposed_s"] = p.grad_sync_exposed_s;
  j["memory_gib"] = p.memory_bytes / double(1 << 30);
  j["memory_bytes_per_rank"] = p.memory_bytes;
  j["attention_memory_bytes_per_rank"] = p.attention_memory_bytes;
  j["p2p_bytes_per_layer"] = p.p2p_bytes;
  j["coll_bytes_per_layer"] = p.coll_bytes;
  j["inter_node_bytes_per_layer"] = p.inter_bytes;
  return j;
}

nlohmann::json plan_json(const PlanInput& in, const std::vector<Prediction>& preds) {
  nlohmann::json j;
  j["cluster"] = in.cluster.name;
  j["model"] = in.model.name;
  j["seq"] = in.seq;
  j["gpus"] = in.gpus;
  j["configs"] = nlohmann::json::array();
  for (const auto& p : preds) j["configs"].push_back(prediction_json(p));
  j["best"] = !preds.empty() && preds.front().feasible ? prediction_json(preds.front())
                                                       : nlohmann::json(nullptr);
  return j;
}

std::string plan_table(const PlanInput& in, const std::vector<Prediction>& preds) {
  std::string s = fmt::format(
      "{} on {} ({} of {} devices, {} per node), seq {}, batch {}: predicted per training step\n",
      in.model.name, in.cluster.name, in.gpus, in.cluster.devices(), in.cluster.devices_per_node,
      in.seq, in.model.batch);
  s += fmt::format("{:>3}  {:<42} {:>10} {:>8} {:>8} {:>9} {:>9} {:>8} {:>8} {:>8} {:>8}\n", "#",
                   "configuration", "tokens/s", "step s", "exp. s", "attn f ms", "attn b ms",
                   "p2p MB", "inter MB", "mem GiB", "attn GiB");
  int rank = 0;
  bool infeasible_header = false;
  for (const auto& p : preds) {
    if (!p.feasible) {
      if (!infeasible_header) s += "infeasible:\n";
      infeasible_header = true;
      s += fmt::format("     {:<42} {}\n", p.cand.label(), p.reason);
      continue;
    }
    s += fmt::format(
        "{:>3}  {:<42} {:>10.0f} {:>8.3f} {:>8.3f} {:>9.2f} {:>9.2f} {:>8.1f} {:>8.1f} "
        "{:>8.1f} {:>8.2f}\n",
        ++rank, p.cand.label() + (p.cand.keep_kv ? " +kv" : ""), p.tokens_per_s, p.step_s,
        p.exposed_comm_s, p.attn_fwd_s * 1e3, p.attn_bwd_s * 1e3, p.p2p_bytes / 1e6,
        p.inter_bytes / 1e6, p.memory_bytes / double(1 << 30),
        p.attention_memory_bytes / double(1 << 30));
  }
  s += "(exp. s: communication not hidden by compute; p2p / inter MB: per layer, forward + "
       "backward, busiest rank; inter: bytes leaving the node; mem: per device; attn: of it, "
       "the attention's q, k, v, o, kept K,V and schedule buffers; +kv: the forward's placed "
       "K,V kept for the backward)\n";
  return s;
}

}  // namespace wallfacer::plan
