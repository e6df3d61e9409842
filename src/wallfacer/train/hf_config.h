#pragma once
// The model section of a training config from a transformers config.json of a Llama-family model
// (LlamaForCausalLM, Qwen2ForCausalLM, MistralForCausalLM): model.arch = "llama" and the keys
// model/hf_layout.h lists. What the decoder cannot compute (another architecture, activation or
// rope scaling type, a head_dim other than hidden_size / num_attention_heads, an o_proj or MLP
// bias) is a UsageError naming the field.

#include <string>

#include "wallfacer/train/config.h"

namespace wallfacer::train {

// Sets cfg's model keys from the text of a config.json (name: its path, for messages); leaves the
// training, data and parallel keys as they are.
void apply_hf_config(const std::string& json_text, const std::string& name, TrainConfig& cfg);

}  // namespace wallfacer::train
