#include "wallfacer/train/hf_checkpoint.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>

#include "wallfacer/core/error.h"
#include "wallfacer/core/safetensors.h"
#include "wallfacer/model/hf_layout.h"
#include "wallfacer/train/hf_config.h"

namespace wallfacer::train {

namespace {

using nlohmann::json;

// The class of a config.json that apply_hf_config accepted.
HfClass class_of(const json& j) {
  const std::string a = j.at("architectures")[0].get<std::string>();
  return a == "Qwen2ForCausalLM"     ? HfClass::Qwen2
         : a == "MistralForCausalLM" ? HfClass::Mistral
                                     : HfClass::Llama;
}

// A number of a JSON object, or `fallback` when absent or not a number.
double number_or(const json& j, const char* key, double fallback) {
  const auto it = j.find(key);
  return it != j.end() && it->is_number() ? it->get<double>() : fallback;
}

// The context the model was pretrained for before any rope scaling, from the imported
// config.json `base`: its max_position_embeddings over its linear factor, or its llama3
// original_max_position_embeddings; 0 when base has no max_position_embeddings.
double unscaled_context(const json& base) {
  const double max_pos = number_or(base, "max_position_embeddings", 0);
  const auto it = base.find("rope_scaling");
  if (max_pos <= 0 || it == base.end() || !it->is_object()) return max_pos;
  const json& r = *it;
  const std::string type =
      r.contains("rope_type") && r["rope_type"].is_string() ? r["rope_type"].get<std::string>()
      : r.contains("type") && r["type"].is_string()         ? r["type"].get<std::string>()
                                                            : "default";
  if (type == "linear") return max_pos / std::max(1.0, number_or(r, "factor", 1));
  if (type == "llama3") return number_or(r, "original_max_position_embeddings", max_pos);
  return max_pos;
}

}  // namespace

int64_t hf_max_positions(const model::GptConfig& m, const json& base, int64_t seq) {
  int64_t longest = std::max<int64_t>(seq, int64_t(number_or(base, "max_position_embeddings", 0)));
  const auto& rs = m.rope_scaling;
  double scaled = 0;
  if (rs.type == kernels::RopeScalingType::Llama3)
    scaled = double(rs.original_max_position_embeddings) * rs.factor;
  else if (rs.type == kernels::RopeScalingType::Linear)
    scaled = unscaled_context(base) * rs.factor;
  return std::max(longest, int64_t(std::llround(scaled)));
}

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
  TrainConfig c;
  apply_hf_config(j.dump(), name, c);
  if (cls_out) *cls_out = class_of(j);
  return c.model;
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
  j["max_position_embeddings"] = hf_max_positions(m, base.is_object() ? base : json::object(), seq);
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
