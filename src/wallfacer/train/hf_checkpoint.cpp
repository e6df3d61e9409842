#include "wallfacer/train/hf_checkpoint.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>

#include "wallfacer/core/error.h"
#include "wallfacer/core/safetensors.h"
#include "wallfacer/model/hf_layout.h"

namespace wallfacer::train {

namespace {

using nlohmann::json;

// An integer key in [lo, hi]; `fallback` when absent or null (nullopt: required).
int64_t int_key(const json& j, const std::string& name, const char* key,
                std::optional<int64_t> fallback, int64_t lo, int64_t hi) {
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) {
    WF_USAGE_CHECK(fallback.has_value(), "{}: the key '{}' is missing", name, key);
    return *fallback;
  }
  WF_USAGE_CHECK(it->is_number_integer(), "{}: '{}' is {}, not an integer", name, key, it->dump());
  const int64_t v = it->get<int64_t>();
  WF_USAGE_CHECK(v >= lo && v <= hi, "{}: '{}' is {}; it must be in [{}, {}]", name, key, v, lo,
                 hi);
  return v;
}

double num_key(const json& j, const std::string& name, const char* key,
               std::optional<double> fallback) {
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) {
    WF_USAGE_CHECK(fallback.has_value(), "{}: the key '{}' is missing", name, key);
    return *fallback;
  }
  WF_USAGE_CHECK(it->is_number(), "{}: '{}' is {}, not a number", name, key, it->dump());
  const double v = it->get<double>();
  WF_USAGE_CHECK(std::isfinite(v), "{}: '{}' is not finite", name, key);
  return v;
}

bool bool_key(const json& j, const std::string& name, const char* key, bool fallback) {
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  WF_USAGE_CHECK(it->is_boolean(), "{}: '{}' is {}, not true or false", name, key, it->dump());
  return it->get<bool>();
}

HfClass class_of(const json& j, const std::string& name) {
  static const std::map<std::string, HfClass> classes = {{"LlamaForCausalLM", HfClass::Llama},
                                                         {"Qwen2ForCausalLM", HfClass::Qwen2},
                                                         {"MistralForCausalLM", HfClass::Mistral}};
  static const std::map<std::string, HfClass> types = {
      {"llama", HfClass::Llama}, {"qwen2", HfClass::Qwen2}, {"mistral", HfClass::Mistral}};
  const auto a = j.find("architectures");
  if (a != j.end() && !a->is_null()) {
    WF_USAGE_CHECK(a->is_array() && a->size() == 1 && (*a)[0].is_string(),
                   "{}: 'architectures' is {}; give one class name", name, a->dump());
    const std::string c = (*a)[0].get<std::string>();
    const auto it = classes.find(c);
    WF_USAGE_CHECK(it != classes.end(),
                   "{}: the architecture '{}' is not supported (LlamaForCausalLM, "
                   "Qwen2ForCausalLM and MistralForCausalLM are)",
                   name, c);
    return it->second;
  }
  const auto t = j.find("model_type");
  WF_USAGE_CHECK(t != j.end() && t->is_string(),
                 "{}: neither 'architectures' nor 'model_type' names the model", name);
  const auto it = types.find(t->get<std::string>());
  WF_USAGE_CHECK(it != types.end(),
                 "{}: the model_type '{}' is not supported (llama, qwen2 and mistral are)", name,
                 t->get<std::string>());
  return it->second;
}

kernels::RopeScaling rope_scaling_of(const json& j, const std::string& name) {
  kernels::RopeScaling rs;
  const auto it = j.find("rope_scaling");
  if (it == j.end() || it->is_null()) return rs;
  WF_USAGE_CHECK(it->is_object(), "{}: 'rope_scaling' is {}, not an object or null", name,
                 it->dump());
  const json& r = *it;
  std::string type;
  for (const char* k : {"rope_type", "type"}) {
    const auto t = r.find(k);
    if (t != r.end() && t->is_string()) {
      type = t->get<std::string>();
      break;
    }
  }
  WF_USAGE_CHECK(!type.empty(), "{}: 'rope_scaling' has no 'rope_type'", name);
  if (type == "default") return rs;
  const std::string where = name + " rope_scaling";
  if (type == "linear") {
    rs.type = kernels::RopeScalingType::Linear;
    rs.factor = num_key(r, where, "factor", std::nullopt);
  } else if (type == "llama3") {
    rs.type = kernels::RopeScalingType::Llama3;
    rs.factor = num_key(r, where, "factor", std::nullopt);
    rs.low_freq_factor = num_key(r, where, "low_freq_factor", std::nullopt);
    rs.high_freq_factor = num_key(r, where, "high_freq_factor", std::nullopt);
    rs.original_max_position_embeddings =
        int_key(r, where, "original_max_position_embeddings", std::nullopt, 1, int64_t(1) << 40);
  } else {
    throw UsageError(fmt::format(
        "{}: the rope_scaling type '{}' is not supported (linear and llama3 are)", name, type));
  }
  return rs;
}

}  // namespace

std::string_view hf_class_name(HfClass c) {
  switch (c) {
    case HfClass::Llama:
      return "LlamaForCausalLM";
    case HfClass::Qwen2:
      return "Qwen2ForCausalLM";
    case HfClass::Mistral:
      return "MistralForCausalLM";
  }
  return "?";
}

model::GptConfig gpt_config_from_hf(const json& j, const std::string& name, HfClass* cls_out) {
  WF_USAGE_CHECK(j.is_object(), "{}: not a JSON object", name);
  const HfClass cls = class_of(j, name);
  if (cls_out) *cls_out = cls;
  constexpr int64_t kBig = int64_t(1) << 30;
  model::GptConfig m;
  m.arch = model::Arch::Llama;
  m.vocab = int(int_key(j, name, "vocab_size", std::nullopt, 2, int64_t(1) << 31));
  m.dim = int(int_key(j, name, "hidden_size", std::nullopt, 2, kBig));
  m.layers = int(int_key(j, name, "num_hidden_layers", std::nullopt, 1, 100000));
  m.heads = int(int_key(j, name, "num_attention_heads", std::nullopt, 1, kBig));
  m.kv_heads = int(int_key(j, name, "num_key_value_heads", m.heads, 1, kBig));
  m.intermediate = int(int_key(j, name, "intermediate_size", std::nullopt, 1, kBig));
  const int64_t head_dim = int_key(j, name, "head_dim", m.dim / m.heads, 1, kBig);
  WF_USAGE_CHECK(m.dim % m.heads == 0 && head_dim == m.dim / m.heads,
                 "{}: head_dim {} differs from hidden_size / num_attention_heads = {} / {}: not "
                 "supported",
                 name, head_dim, m.dim, m.heads);
  const auto act = j.find("hidden_act");
  WF_USAGE_CHECK(act == j.end() || (act->is_string() && act->get<std::string>() == "silu"),
                 "{}: hidden_act {} is not supported (\"silu\" is)", name,
                 act == j.end() ? "" : act->dump());
  m.norm_eps = num_key(j, name, "rms_norm_eps", 1e-6);
  m.rope_theta = num_key(j, name, "rope_theta", 10000.0);
  m.rope_scaling = rope_scaling_of(j, name);
  m.tie_embeddings = bool_key(j, name, "tie_word_embeddings", false);
  m.qkv_bias = cls == HfClass::Qwen2;
  if (cls == HfClass::Llama) {
    WF_USAGE_CHECK(!bool_key(j, name, "attention_bias", false),
                   "{}: attention_bias = true (a bias on o_proj too) is not supported", name);
    WF_USAGE_CHECK(!bool_key(j, name, "mlp_bias", false), "{}: mlp_bias = true is not supported",
                   name);
  }
  const auto sw = j.find("sliding_window");
  const bool has_window = sw != j.end() && !sw->is_null();
  if (cls == HfClass::Mistral && has_window) {
    m.window = int_key(j, name, "sliding_window", std::nullopt, 1, int64_t(1) << 40);
  } else if (cls == HfClass::Qwen2 && has_window &&
             bool_key(j, name, "use_sliding_window", false)) {
    const int64_t W = int_key(j, name, "sliding_window", std::nullopt, 1, int64_t(1) << 40);
    std::vector<int64_t> windowed;
    const auto lt = j.find("layer_types");
    if (lt != j.end() && !lt->is_null()) {
      WF_USAGE_CHECK(lt->is_array() && int64_t(lt->size()) == m.layers,
                     "{}: 'layer_types' must list the {} layers", name, m.layers);
      for (int l = 0; l < m.layers; ++l) {
        const json& t = (*lt)[size_t(l)];
        WF_USAGE_CHECK(t.is_string() && (t == "full_attention" || t == "sliding_attention"),
                       "{}: layer_types[{}] is {} (full_attention or sliding_attention)", name, l,
                       t.dump());
        if (t == "sliding_attention") windowed.push_back(l);
      }
    } else {
      const int64_t first = int_key(j, name, "max_window_layers", m.layers, 0, m.layers);
      for (int64_t l = first; l < m.layers; ++l) windowed.push_back(l);
    }
    if (!windowed.empty()) {
      m.window = W;
      if (int64_t(windowed.size()) < m.layers) m.window_layers = windowed;
    }
  }
  try {
    m.validate();
  } catch (const UsageError& e) {
    throw UsageError(fmt::format("{}: a model wallfacer cannot hold: {}", name, e.what()));
  }
  return m;
}

TrainConfig hf_train_config(const model::GptConfig& m, const json& j) {
  TrainConfig c;
  c.kind = ModelKind::Gpt;
  c.model = m;
  int64_t max_pos = 2048;
  const auto it = j.find("max_position_embeddings");
  if (it != j.end() && it->is_number_integer()) max_pos = std::max<int64_t>(2, it->get<int64_t>());
  c.seq = std::min<int64_t>(max_pos, 4096);
  c.seq_given = true;
  c.lr = 1e-4;
  c.min_lr = 1e-5;
  c.ckpt_every = 100;
  c.data_dir = "data/hf";
  return c;
}

HfClass hf_class_for(const model::GptConfig& m, const HfClass* prefer) {
  const bool all_windowed = m.window > 0 && m.window_layers.empty();
  auto fits = [&](HfClass c) {
    switch (c) {
      case HfClass::Llama:
        return !m.qkv_bias && m.window == 0;
      case HfClass::Mistral:
        return !m.qkv_bias && (m.window == 0 || all_windowed);
      case HfClass::Qwen2:
        return m.qkv_bias;
    }
    return false;
  };
  if (prefer && fits(*prefer)) return *prefer;
  for (HfClass c : {HfClass::Llama, HfClass::Mistral, HfClass::Qwen2})
    if (fits(c)) return c;
  throw UsageError(
      "model.window_layers puts a window on some layers of a model without q/k/v biases: no "
      "transformers class holds that (Qwen2 has biases, Mistral windows every layer)");
}

json hf_config_json(const model::GptConfig& m, HfClass cls, const json& base, int64_t seq,
                    Dtype dtype) {
  json j = base.is_object() ? base : json::object();
  // Keys of the other classes that would change what the model computes.
  for (const char* k : {"sliding_window", "use_sliding_window", "max_window_layers", "layer_types",
                        "attention_bias", "mlp_bias", "rope_scaling", "torch_dtype"})
    j.erase(k);
  j["architectures"] = json::array({std::string(hf_class_name(cls))});
  j["model_type"] = cls == HfClass::Llama ? "llama" : cls == HfClass::Qwen2 ? "qwen2" : "mistral";
  j["vocab_size"] = m.vocab;
  j["hidden_size"] = m.dim;
  j["intermediate_size"] = m.mlp_hidden();
  j["num_hidden_layers"] = m.layers;
  j["num_attention_heads"] = m.heads;
  j["num_key_value_heads"] = m.kv_heads;
  j["head_dim"] = m.head_dim();
  j["hidden_act"] = "silu";
  j["rms_norm_eps"] = m.norm_eps;
  j["rope_theta"] = m.rope_theta;
  j["tie_word_embeddings"] = m.tie_embeddings;
  if (!j.contains("max_position_embeddings") || !j["max_position_embeddings"].is_number_integer())
    j["max_position_embeddings"] = seq;
  j["dtype"] = dtype == Dtype::bf16 ? "bfloat16" : "float32";
  j["torch_dtype"] = j["dtype"];
  const auto& rs = m.rope_scaling;
  if (rs.type == kernels::RopeScalingType::None) {
    j["rope_scaling"] = nullptr;
  } else if (rs.type == kernels::RopeScalingType::Linear) {
    j["rope_scaling"] = {{"rope_type", "linear"}, {"factor", rs.factor}};
  } else {
    j["rope_scaling"] = {{"rope_type", "llama3"},
                         {"factor", rs.factor},
                         {"low_freq_factor", rs.low_freq_factor},
                         {"high_freq_factor", rs.high_freq_factor},
                         {"original_max_position_embeddings", rs.original_max_position_embeddings}};
  }
  if (cls == HfClass::Llama) {
    j["attention_bias"] = false;
    j["mlp_bias"] = false;
  } else if (cls == HfClass::Mistral) {
    j["sliding_window"] = m.window > 0 ? json(m.window) : json(nullptr);
  } else {
    std::vector<bool> windowed(size_t(m.layers), m.window > 0 && m.window_layers.empty());
    for (const int64_t l : m.window_layers) windowed[size_t(l)] = true;
    json types = json::array();
    int64_t first = m.layers;  // the first layer of a windowed suffix
    for (int l = m.layers - 1; l >= 0 && windowed[size_t(l)]; --l) first = l;
    for (int l = 0; l < m.layers; ++l)
      types.push_back(windowed[size_t(l)] ? "sliding_attention" : "full_attention");
    j["use_sliding_window"] = m.window > 0;
    j["sliding_window"] = m.window > 0 ? json(m.window) : json(nullptr);
    j["max_window_layers"] = first;
    j["layer_types"] = types;
  }
  return j;
}

std::vector<float> read_hf_params(const std::string& dir, const model::GptConfig& m) {
  const safetensors::Reader r = safetensors::Reader::open_dir(dir);
  const auto want = model::hf_tensors(m);
  std::map<std::string, const model::HfTensor*> by_name;
  for (const auto& t : want) by_name[t.hf_name] = &t;
  // Everything is checked before anything is read: missing, unexpected, shapes.
  for (const auto& t : want) {
    WF_USAGE_CHECK(r.has(t.hf_name),
                   "{}: the tensor '{}' is missing (the model of its config.json has it)", dir,
                   t.hf_name);
    const auto& info = r.info(t.hf_name);
    WF_USAGE_CHECK(info.shape == t.shape, "{}: the tensor '{}' has shape [{}], expected [{}]",
                   info.file, t.hf_name, fmt::join(info.shape, ", "), fmt::join(t.shape, ", "));
    WF_USAGE_CHECK(info.dtype == "F32" || info.dtype == "BF16" || info.dtype == "F16",
                   "{}: the tensor '{}' is of dtype {} (F32, BF16 and F16 are read)", info.file,
                   t.hf_name, info.dtype);
  }
  auto ends_with = [](const std::string& s, const std::string& tail) {
    return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
  };
  for (const auto& info : r.tensors()) {
    if (by_name.count(info.name) || ends_with(info.name, ".rotary_emb.inv_freq")) continue;
    WF_USAGE_CHECK(false,
                   "{}: the tensor '{}' is unexpected: the model of its config.json has no such "
                   "parameter{}",
                   info.file, info.name,
                   info.name == "lm_head.weight" ? " (tie_word_embeddings is true)" : "");
  }
  std::vector<float> arena(size_t(model::gpt_num_params(m)), 0.0f);
  std::map<std::string, int64_t> offset;
  for (const auto& p : model::gpt_param_tensors(m)) offset[p.name] = p.offset;
  for (const auto& t : want) {
    const std::vector<float> v = r.read_f32(t.hf_name);
    model::hf_import(t, v.data(), arena.data() + offset.at(t.tensor));
  }
  return arena;
}

void write_hf_params(const std::string& path, const model::GptConfig& m, const float* arena,
                     Dtype dtype) {
  const auto tensors = model::hf_tensors(m);
  std::map<std::string, int64_t> offset;
  for (const auto& p : model::gpt_param_tensors(m)) offset[p.name] = p.offset;
  std::vector<std::vector<float>> values;
  std::vector<safetensors::WriteTensor> out;
  values.reserve(tensors.size());
  for (const auto& t : tensors) {
    const int64_t n =
        std::accumulate(t.shape.begin(), t.shape.end(), int64_t(1), std::multiplies<>());
    values.emplace_back(size_t(n));
    model::hf_export(t, arena + offset.at(t.tensor), values.back().data());
    out.push_back({t.hf_name, t.shape, values.back().data()});
  }
  safetensors::write_file(path, out, dtype, {{"format", "pt"}});
}

}  // namespace wallfacer::train
