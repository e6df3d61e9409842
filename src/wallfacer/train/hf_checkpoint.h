#pragma once
// Hugging Face Llama-family checkpoints (LlamaForCausalLM, Qwen2ForCausalLM, MistralForCausalLM)
// in and out: config.json onto the model section of a TrainConfig (model.arch = "llama") and back,
// and the safetensors tensors onto the parameter arena of gpt_param_tensors and back
// (model/hf_layout.h: names, and the q/k row permutation between the two rotary layouts).
//
// config.json is read by apply_hf_config (train/hf_config.h), which names what it refuses.

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "wallfacer/core/dtype.h"
#include "wallfacer/model/gpt.h"
#include "wallfacer/train/config.h"

namespace wallfacer::train {

// The Hugging Face class that a config.json names in its architectures.
enum class HfClass { Llama, Qwen2, Mistral };
std::string_view hf_class_name(HfClass c);  // "LlamaForCausalLM", ...

// config.json (parsed; `name` for messages) -> the model it describes (apply_hf_config);
// UsageError when it names anything else. `cls`, when given, receives its class.
model::GptConfig gpt_config_from_hf(const nlohmann::json& j, const std::string& name,
                                    HfClass* cls = nullptr);

// A run's config for an imported model: the model, and training settings for fine-tuning it
// (train.seq min(max_position_embeddings, 4096), lr 1e-4 to 1e-5, a checkpoint every 100 steps,
// data.dir "data/hf").
TrainConfig hf_train_config(const model::GptConfig& m, const nlohmann::json& j);

// The class that holds the model: `prefer` when it can (Llama: no biases, no window; Mistral: no
// biases, a window on every layer or none; Qwen2: q/k/v biases), else the first that can of
// Llama, Mistral, Qwen2; UsageError when none can (a window on some layers without biases).
HfClass hf_class_for(const model::GptConfig& m, const HfClass* prefer);

// max_position_embeddings of an exported model: the longest of `seq` (the train.seq it was
// trained at), the imported config.json `base`'s max_position_embeddings, and the context its rope
// scaling is made for: llama3, original_max_position_embeddings x factor; linear, the imported
// model's context before scaling (base's max_position_embeddings, over base's linear factor, or
// base's llama3 original_max_position_embeddings) x factor. A context extension (a longer
// train.seq, a new or larger rope scaling) raises it; an unchanged model keeps base's.
int64_t hf_max_positions(const model::GptConfig& m, const nlohmann::json& base, int64_t seq);

// config.json of the model: `base` (the imported config.json, or an empty object) with every key
// the model sets replaced, for class `cls`; max_position_embeddings from hf_max_positions.
nlohmann::json hf_config_json(const model::GptConfig& m, HfClass cls, const nlohmann::json& base,
                              int64_t seq, Dtype dtype);

// The parameter arena (gpt_param_tensors order) from a Hugging Face folder (model.safetensors or
// a sharded set). UsageError naming the tensor for a missing or unexpected tensor (the rotary
// buffers "*.rotary_emb.inv_freq" some checkpoints hold are skipped), a wrong shape or dtype.
std::vector<float> read_hf_params(const std::string& dir, const model::GptConfig& m);

// model.safetensors of the arena at `path` (atomic), in dtype (fp32 or bf16), with metadata
// {"format": "pt"}.
void write_hf_params(const std::string& path, const model::GptConfig& m, const float* arena,
                     Dtype dtype);

}  // namespace wallfacer::train
