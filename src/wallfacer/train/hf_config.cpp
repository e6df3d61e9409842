#include "wallfacer/train/hf_config.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <optional>

#include "wallfacer/core/error.h"
#include "wallfacer/core/json_error.h"

namespace wallfacer::train {

namespace {

using nlohmann::json;

// Reads the fields of one config.json, naming the file and the field in every error.
class Fields {
 public:
  Fields(const json& j, const std::string& name) : j_(j), name_(name) {}

  bool has(const char* key) const { return j_.contains(key) && !j_[key].is_null(); }
  int64_t integer(const char* key, std::optional<int64_t> fallback = std::nullopt) const {
    if (!has(key)) {
      WF_USAGE_CHECK(fallback, "{}: '{}' is missing: a Llama-family config.json has it", name_,
                     key);
      return *fallback;
    }
    WF_USAGE_CHECK(j_[key].is_number_integer(), "{}: '{}' must be an integer (got {})", name_, key,
                   j_[key].dump());
    return j_[key].get<int64_t>();
  }
  int small(const char* key, std::optional<int64_t> fallback = std::nullopt) const {
    const int64_t v = integer(key, fallback);
    WF_USAGE_CHECK(v >= 1 && v <= INT32_MAX, "{}: '{}' = {} is out of range", name_, key, v);
    return int(v);
  }
  double number(const json& j, const char* key, std::optional<double> fallback) const {
    if (!j.contains(key) || j[key].is_null()) {
      WF_USAGE_CHECK(fallback, "{}: '{}' is missing", name_, key);
      return *fallback;
    }
    WF_USAGE_CHECK(j[key].is_number(), "{}: '{}' must be a number (got {})", name_, key,
                   j[key].dump());
    return j[key].get<double>();
  }
  double number(const char* key, std::optional<double> fallback) const {
    return number(j_, key, fallback);
  }
  bool boolean(const char* key, bool fallback) const {
    if (!has(key)) return fallback;
    WF_USAGE_CHECK(j_[key].is_boolean(), "{}: '{}' must be true or false (got {})", name_, key,
                   j_[key].dump());
    return j_[key].get<bool>();
  }
  std::string text(const char* key, const std::string& fallback) const {
    if (!has(key)) return fallback;
    WF_USAGE_CHECK(j_[key].is_string(), "{}: '{}' must be a string (got {})", name_, key,
                   j_[key].dump());
    return j_[key].get<std::string>();
  }
  const json& at(const char* key) const { return j_[key]; }

 private:
  const json& j_;
  const std::string& name_;
};

enum class Family { Llama, Qwen2, Mistral };

Family read_family(const Fields& f, const std::string& name) {
  WF_USAGE_CHECK(f.has("architectures") && f.at("architectures").is_array() &&
                     f.at("architectures").size() == 1 && f.at("architectures")[0].is_string(),
                 "{}: 'architectures' must list one of LlamaForCausalLM, Qwen2ForCausalLM, "
                 "MistralForCausalLM",
                 name);
  const std::string a = f.at("architectures")[0].get<std::string>();
  if (a == "LlamaForCausalLM") return Family::Llama;
  if (a == "Qwen2ForCausalLM") return Family::Qwen2;
  if (a == "MistralForCausalLM") return Family::Mistral;
  throw UsageError(
      fmt::format("{}: architecture '{}' is not supported: LlamaForCausalLM, Qwen2ForCausalLM or "
                  "MistralForCausalLM",
                  name, a));
}

void read_rope_scaling(const Fields& f, const std::string& name, kernels::RopeScaling& rs) {
  rs = kernels::RopeScaling{};
  if (!f.has("rope_scaling")) return;
  const json& r = f.at("rope_scaling");
  WF_USAGE_CHECK(r.is_object(), "{}: 'rope_scaling' must be an object or null", name);
  std::string type;
  for (const char* key : {"rope_type", "type"}) {
    if (r.contains(key) && r[key].is_string()) {
      type = r[key].get<std::string>();
      break;
    }
  }
  if (type == "default") return;
  WF_USAGE_CHECK(type == "llama3" || type == "linear",
                 "{}: rope_scaling type '{}' is not supported: 'llama3', 'linear' or none", name,
                 type);
  rs.type = kernels::parse_rope_scaling_type(type);
  rs.factor = f.number(r, "factor", std::nullopt);
  if (rs.type == kernels::RopeScalingType::Llama3) {
    rs.low_freq_factor = f.number(r, "low_freq_factor", std::nullopt);
    rs.high_freq_factor = f.number(r, "high_freq_factor", std::nullopt);
    const double orig = f.number(r, "original_max_position_embeddings", std::nullopt);
    WF_USAGE_CHECK(orig >= 1 && orig <= 1e15 && orig == double(int64_t(orig)),
                   "{}: rope_scaling.original_max_position_embeddings must be a positive integer",
                   name);
    rs.original_max_position_embeddings = int64_t(orig);
  }
}

}  // namespace

void apply_hf_config(const std::string& json_text, const std::string& name, TrainConfig& cfg) {
  json j;
  try {
    j = json::parse(json_text);
  } catch (const json::exception& e) {
    throw UsageError(fmt::format("{}: {}", name, describe_json_error(json_text, e)));
  }
  WF_USAGE_CHECK(j.is_object(), "{}: a config.json is a JSON object", name);
  const Fields f(j, name);
  const Family family = read_family(f, name);
  model::GptConfig& m = cfg.model;
  cfg.kind = ModelKind::Gpt;
  m.arch = model::Arch::Llama;
  m.vocab = f.small("vocab_size");
  m.dim = f.small("hidden_size");
  m.layers = f.small("num_hidden_layers");
  m.heads = f.small("num_attention_heads");
  m.kv_heads = f.small("num_key_value_heads", m.heads);
  m.intermediate = f.small("intermediate_size");
  WF_USAGE_CHECK(m.dim % m.heads == 0 && f.integer("head_dim", m.dim / m.heads) == m.dim / m.heads,
                 "{}: head_dim {} is not hidden_size / num_attention_heads ({} / {}): not "
                 "supported",
                 name, f.integer("head_dim", 0), m.dim, m.heads);
  const std::string act = f.text("hidden_act", "silu");
  WF_USAGE_CHECK(act == "silu", "{}: hidden_act '{}' is not supported: the MLP is SwiGLU (silu)",
                 name, act);
  WF_USAGE_CHECK(!f.boolean("mlp_bias", false), "{}: mlp_bias = true is not supported", name);
  m.norm_eps = f.number("rms_norm_eps", 1e-6);
  m.tie_embeddings = f.boolean("tie_word_embeddings", false);
  m.rope_theta = f.number("rope_theta", 10000.0);
  read_rope_scaling(f, name, m.rope_scaling);
  m.qkv_bias = family == Family::Qwen2;
  if (family == Family::Llama) {
    WF_USAGE_CHECK(!f.boolean("attention_bias", false),
                   "{}: attention_bias = true (biases on q, k, v and o_proj) is not supported: "
                   "only q/k/v biases (Qwen2)",
                   name);
  }
  m.window = 0;
  m.window_layers.clear();
  if (family == Family::Mistral && f.has("sliding_window")) {
    m.window = f.integer("sliding_window");
  } else if (family == Family::Qwen2 && f.boolean("use_sliding_window", false)) {
    const int64_t w = f.integer("sliding_window");
    if (f.has("layer_types")) {
      const json& types = f.at("layer_types");
      WF_USAGE_CHECK(types.is_array() && int64_t(types.size()) == m.layers,
                     "{}: 'layer_types' must list the {} layers", name, m.layers);
      for (int l = 0; l < m.layers; ++l)
        if (types[size_t(l)] == "sliding_attention") m.window_layers.push_back(l);
    } else {
      const int64_t first = std::max<int64_t>(f.integer("max_window_layers", m.layers), 0);
      for (int64_t l = first; l < m.layers; ++l) m.window_layers.push_back(l);
    }
    if (!m.window_layers.empty()) m.window = w;
  }
  WF_USAGE_CHECK(m.window >= 0, "{}: sliding_window must be >= 0 (got {})", name, m.window);
  try {
    m.validate();
  } catch (const UsageError& e) {
    throw UsageError(fmt::format("{}: {}", name, e.what()));
  }
}

}  // namespace wallfacer::train
