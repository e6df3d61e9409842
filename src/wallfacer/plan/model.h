#pragma once
// The model as the planner sees it: shapes from a TOML file (configs/models/*.toml, or a training
// config with the same [model] keys) and closed-form FLOP and parameter counts of its dense parts.
// The attention core is not here: its FLOPs and transfers come from the seqpar schedules.

#include <cstdint>
#include <string>
#include <string_view>

namespace wallfacer::plan {

enum class ModelKind { Gpt, Dit };

struct ModelSpec {
  std::string name;
  ModelKind kind = ModelKind::Gpt;
  int layers = 1;
  int dim = 0;  // hidden size H = heads * head_dim
  int heads = 1;
  int kv_heads = 1;
  int mlp_ratio = 4;
  int vocab = 257;  // GPT: byte-level tokens plus end-of-text
  bool causal = true;
  int batch = 1;                     // sequences per step
  bool checkpoint_attention = true;  // activation checkpoint at the attention output

  int head_dim() const { return dim / heads; }
  int kv_dim() const { return kv_heads * head_dim(); }
};

ModelSpec parse_model(std::string_view toml_text, const std::string& source);
ModelSpec load_model(const std::string& path);

// Parameters of the whole model (weights and biases of every layer, norms, embedding / head).
int64_t param_count(const ModelSpec& m);

// Forward FLOPs per token of one layer's dense parts: QKV projection 2·dim·(dim + 2·kv_dim),
// output projection 2·dim², MLP 4·mlp_ratio·dim² (norms and activations are not counted).
double layer_dense_flops_per_token(const ModelSpec& m);

// Forward FLOPs per token outside the layers (GPT: the tied LM head 2·dim·vocab; DiT: 0).
double head_flops_per_token(const ModelSpec& m);

}  // namespace wallfacer::plan
