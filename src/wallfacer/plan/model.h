#pragma once
// The model as the planner sees it: shapes from a TOML file (configs/models/*.toml, or a training
// config with the same [model] keys) and closed-form FLOP and parameter counts of its dense parts.
// The attention core is not here: its FLOPs and transfers come from the seqpar schedules.

#include <cstdint>
#include <string>
#include <string_view>

namespace wallfacer::plan {

enum class ModelKind { Gpt, Dit };
// model.arch of a text model (docs/training.md): "gpt", GPT-2 style (layernorms, a GELU MLP, every
// linear layer with a bias, a tied LM head), or "llama" (RMSNorms, a SwiGLU MLP of three
// matrices, no biases but the optional q/k/v ones, a tied or untied LM head).
enum class ModelArch { Gpt, Llama };

struct ModelSpec {
  std::string name;
  ModelKind kind = ModelKind::Gpt;
  int layers = 1;
  int dim = 0;  // hidden size H = heads * head_dim
  int heads = 1;
  int kv_heads = 1;
  ModelArch arch = ModelArch::Gpt;
  int mlp_ratio = 4;
  int intermediate = 0;        // model.intermediate: the MLP's hidden width (0: mlp_ratio * dim)
  bool tie_embeddings = true;  // model.tie_embeddings: the LM head is the embedding
  bool qkv_bias = false;       // model.qkv_bias (llama; the GPT's layers always have biases)
  int vocab = 257;             // GPT: byte-level tokens plus end-of-text
  bool causal = true;
  int batch = 1;                     // sequences per step
  bool checkpoint_attention = true;  // activation checkpoint at the attention output

  int head_dim() const { return dim / heads; }
  int kv_dim() const { return kv_heads * head_dim(); }
  int64_t mlp_hidden() const { return intermediate > 0 ? intermediate : int64_t(mlp_ratio) * dim; }
};

ModelSpec parse_model(std::string_view toml_text, const std::string& source);
ModelSpec load_model(const std::string& path);

// One layer of the model, counted once for the planner's compute, memory and gradient bytes (and
// so for tune's predictions). With h = dim, k = kv_dim, f = the MLP's hidden width:
//   matrix weights  h (h + 2 k) QKV + h² output + MLP: 2 h f (GPT: fc, fcproj) or 3 h f (llama:
//                   gate, up, down)
//   parameters      the matrix weights, plus GPT: every bias (h + 2 k + h + f + h) and two
//                   layernorms (4 h), DiT also adaLN (6 h² + 6 h); llama: two RMSNorms (2 h) and
//                   the q/k/v biases with model.qkv_bias (h + 2 k)
//   activations     per token, what the layer's backward works on: x, norm 1, q, k, v, attention
//                   output, x after attention, norm 2 (6 h + 2 k), and the MLP's hidden values:
//                   2 f (GPT: fc output and GELU) or 3 f (llama: gate and up, silu(gate) · up)
struct LayerCount {
  int64_t matrix_weights = 0;  // forward FLOPs per token: 2 x this
  int64_t params = 0;
  int64_t activations = 0;
};
LayerCount layer_count(const ModelSpec& m);

// Parameters of the whole model: the layers, the final norm (GPT and DiT 2 h, llama h), the
// embedding (GPT, llama: vocab h) and an untied LM head (vocab h more).
int64_t param_count(const ModelSpec& m);

// Forward FLOPs per token of one layer's dense parts: 2 x layer_count().matrix_weights (norms and
// activations are not counted).
double layer_dense_flops_per_token(const ModelSpec& m);

// Forward FLOPs per token outside the layers (GPT, llama: the LM head 2·dim·vocab; DiT: 0).
double head_flops_per_token(const ModelSpec& m);

}  // namespace wallfacer::plan
