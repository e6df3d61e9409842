// train/hf_config.h: transformers' config.json of Llama, Qwen2 and Mistral models onto the model
// keys, and the fields it refuses with one line naming them.
#include <gtest/gtest.h>

#include <string>

#include "wallfacer/core/error.h"
#include "wallfacer/train/hf_config.h"

namespace wallfacer::train {
namespace {

const char* kLlama3 = R"({
  "architectures": ["LlamaForCausalLM"], "hidden_act": "silu", "hidden_size": 64,
  "intermediate_size": 172, "num_attention_heads": 4, "num_hidden_layers": 2,
  "num_key_value_heads": 2, "rms_norm_eps": 1e-05, "rope_theta": 500000.0, "vocab_size": 300,
  "tie_word_embeddings": false, "attention_bias": false, "mlp_bias": false, "head_dim": 16,
  "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                   "original_max_position_embeddings": 8192, "rope_type": "llama3"}})";

const char* kQwen2 = R"({
  "architectures": ["Qwen2ForCausalLM"], "hidden_act": "silu", "hidden_size": 64,
  "intermediate_size": 96, "num_attention_heads": 4, "num_hidden_layers": 4,
  "num_key_value_heads": 2, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0, "vocab_size": 300,
  "tie_word_embeddings": true, "use_sliding_window": true, "sliding_window": 32,
  "max_window_layers": 2, "rope_scaling": null})";

const char* kMistral = R"({
  "architectures": ["MistralForCausalLM"], "hidden_act": "silu", "hidden_size": 64,
  "intermediate_size": 96, "num_attention_heads": 4, "num_hidden_layers": 2,
  "num_key_value_heads": 1, "rms_norm_eps": 1e-05, "rope_theta": 10000.0, "vocab_size": 300,
  "sliding_window": 24})";

std::string usage_error(const std::string& text) {
  TrainConfig c;
  try {
    apply_hf_config(text, "config.json", c);
  } catch (const UsageError& e) {
    return e.what();
  }
  return "";
}

// text with `from` replaced by `to` (once).
std::string with(std::string text, const std::string& from, const std::string& to) {
  const size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  return text.replace(at, from.size(), to);
}

TEST(HfConfig, Llama3) {
  TrainConfig c;
  apply_hf_config(kLlama3, "config.json", c);
  const model::GptConfig& m = c.model;
  EXPECT_EQ(c.arch_name(), "llama");
  EXPECT_EQ(m.vocab, 300);
  EXPECT_EQ(m.dim, 64);
  EXPECT_EQ(m.layers, 2);
  EXPECT_EQ(m.heads, 4);
  EXPECT_EQ(m.kv_heads, 2);
  EXPECT_EQ(m.intermediate, 172);
  EXPECT_EQ(m.norm_eps, 1e-5);
  EXPECT_FALSE(m.tie_embeddings);
  EXPECT_FALSE(m.qkv_bias);
  EXPECT_EQ(m.rope_theta, 500000.0);
  EXPECT_EQ(m.rope_scaling.type, kernels::RopeScalingType::Llama3);
  EXPECT_EQ(m.rope_scaling.factor, 8.0);
  EXPECT_EQ(m.rope_scaling.high_freq_factor, 4.0);
  EXPECT_EQ(m.rope_scaling.original_max_position_embeddings, 8192);
  EXPECT_EQ(m.window, 0);
  // The TOML a run folder holds reads back to the same model.
  EXPECT_TRUE(TrainConfig::from_toml(c.to_toml(), "c.toml").changes_from(c).empty());
}

TEST(HfConfig, Qwen2AndMistralWindows) {
  TrainConfig q;
  apply_hf_config(kQwen2, "config.json", q);
  EXPECT_TRUE(q.model.qkv_bias);
  EXPECT_TRUE(q.model.tie_embeddings);
  EXPECT_EQ(q.model.rope_scaling.type, kernels::RopeScalingType::None);
  EXPECT_EQ(q.model.window, 32);
  EXPECT_EQ(q.model.window_layers, (std::vector<int64_t>{2, 3}));
  TrainConfig t;
  apply_hf_config(with(kQwen2, R"("max_window_layers": 2)",
                       R"("layer_types": ["full_attention", "sliding_attention",
                          "full_attention", "sliding_attention"])"),
                  "config.json", t);
  EXPECT_EQ(t.model.window_layers, (std::vector<int64_t>{1, 3}));
  TrainConfig off;
  apply_hf_config(with(kQwen2, R"("use_sliding_window": true)", R"("use_sliding_window": false)"),
                  "config.json", off);
  EXPECT_EQ(off.model.window, 0);
  EXPECT_TRUE(off.model.window_layers.empty());
  TrainConfig m;
  apply_hf_config(kMistral, "config.json", m);
  EXPECT_EQ(m.model.window, 24);  // every layer, i - 24 < j <= i as in transformers
  EXPECT_TRUE(m.model.window_layers.empty());
  EXPECT_EQ(m.model.kv_heads, 1);
  EXPECT_FALSE(m.model.qkv_bias);
  TrainConfig none;
  apply_hf_config(with(kMistral, R"("sliding_window": 24)", R"("sliding_window": null)"),
                  "config.json", none);
  EXPECT_EQ(none.model.window, 0);
}

TEST(HfConfig, RefusesWhatTheDecoderCannotCompute) {
  const std::string l = kLlama3;
  for (const auto& [text, want] : std::vector<std::pair<std::string, std::string>>{
           {with(l, R"("rope_type": "llama3")", R"("rope_type": "yarn")"),
            "rope_scaling type 'yarn' is not supported"},
           {with(l, "LlamaForCausalLM", "GPTNeoXForCausalLM"),
            "architecture 'GPTNeoXForCausalLM' is not supported"},
           {with(l, R"("hidden_act": "silu")", R"("hidden_act": "gelu")"),
            "hidden_act 'gelu' is not supported"},
           {with(l, R"("head_dim": 16)", R"("head_dim": 32)"), "head_dim 32"},
           {with(l, R"("attention_bias": false)", R"("attention_bias": true)"), "attention_bias"},
           {with(l, R"("mlp_bias": false)", R"("mlp_bias": true)"), "mlp_bias"},
           {with(l, R"("vocab_size": 300)", R"("vocab_size": "300")"), "'vocab_size' must be"},
           {with(l, R"("hidden_size": 64,)", ""), "'hidden_size' is missing"},
           {with(l, R"("num_key_value_heads": 2)", R"("num_key_value_heads": 3)"),
            "model.kv_heads (3) must divide"},
           {with(l, R"("factor": 8.0, )", ""), "'factor' is missing"},
           {"{\"architectures\": [", "config.json: "},
       }) {
    const std::string got = usage_error(text);
    EXPECT_NE(got.find(want), std::string::npos) << "want '" << want << "', got '" << got << "'";
    EXPECT_EQ(got.find('\n'), std::string::npos) << got;
  }
}

}  // namespace
}  // namespace wallfacer::train
