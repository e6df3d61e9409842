#include "wallfacer/plan/model.h"

#include "wallfacer/core/error.h"
#include "wallfacer/core/toml_reader.h"

namespace wallfacer::plan {

ModelSpec parse_model(std::string_view toml_text, const std::string& source) {
  toml::table doc = parse_toml(toml_text, source);
  TomlTable root(&doc, "", source);
  ModelSpec m;
  TomlTable t = root.sub("model");
  m.name = t.string_or("name", source);
  std::string kind = t.string_or("kind", "gpt");
  WF_USAGE_CHECK(kind == "gpt" || kind == "dit", "{}: model.kind '{}' is not one of gpt, dit",
                 source, kind);
  m.kind = kind == "gpt" ? ModelKind::Gpt : ModelKind::Dit;
  // The bounds of training configs (TrainConfig::validate): the parameter count fits in 64 bits.
  m.layers = t.integer("layers", 1, 10000);
  m.dim = t.integer("dim", 1, 1 << 20);
  m.heads = t.integer("heads", 1, 1 << 16);
  m.kv_heads = t.integer_or("kv_heads", m.heads, 1, m.heads);
  const std::string arch = t.string_or("arch", "gpt");
  WF_USAGE_CHECK(arch == "gpt" || arch == "llama", "{}: model.arch '{}' is not one of gpt, llama",
                 source, arch);
  WF_USAGE_CHECK(arch == "gpt" || m.kind == ModelKind::Gpt,
                 "{}: model.arch = 'llama' is a text model: it needs model.kind = 'gpt'", source);
  m.arch = arch == "llama" ? ModelArch::Llama : ModelArch::Gpt;
  m.mlp_ratio = t.integer_or("mlp_ratio", 4, 1, 64);
  m.intermediate = t.integer_or("intermediate", 0, 0, 1 << 26);
  m.tie_embeddings = t.boolean_or("tie_embeddings", true);
  m.qkv_bias = t.boolean_or("qkv_bias", false);
  WF_USAGE_CHECK(m.kind == ModelKind::Gpt || m.intermediate == 0,
                 "{}: model.intermediate is for a text model (kind 'gpt'); a DiT's MLP is "
                 "model.mlp_ratio wide",
                 source);
  m.vocab = t.integer_or("vocab", 257, 1, 1 << 24);
  m.causal = t.boolean_or("causal", m.kind == ModelKind::Gpt);
  for (const char* key : {"window", "window_layers"})
    WF_USAGE_CHECK(!t.has(key),
                   "{}: model.{}: the planner does not model sliding windows; plan the model "
                   "without them (every layer attending to all earlier positions)",
                   source, key);
  // Keys of a training config's model that change no count.
  t.reject_unknown({"norm_eps", "rope_theta", "rope_scaling"});
  WF_USAGE_CHECK(m.dim % m.heads == 0, "{}: model.dim = {} must be divisible by model.heads = {}",
                 source, m.dim, m.heads);
  WF_USAGE_CHECK(m.heads % m.kv_heads == 0,
                 "{}: model.heads = {} must be divisible by model.kv_heads = {}", source, m.heads,
                 m.kv_heads);
  // The batch and checkpointing keys of a training config, when present.
  TomlTable train = root.sub("train", false);
  m.batch = train.integer_or("batch", 1, 1, 1 << 20);
  TomlTable par = root.sub("parallel", false);
  std::string ckpt = par.string_or("checkpointing", "attention");
  WF_USAGE_CHECK(ckpt == "attention" || ckpt == "none",
                 "{}: parallel.checkpointing '{}' is not one of none, attention", source, ckpt);
  m.checkpoint_attention = ckpt == "attention";
  return m;
}

ModelSpec load_model(const std::string& path) {
  return parse_model(read_toml_file(path, "model"), path);
}

LayerCount layer_count(const ModelSpec& m) {
  const int64_t h = m.dim, hk = m.kv_dim(), f = m.mlp_hidden();
  const bool llama = m.arch == ModelArch::Llama;
  LayerCount c;
  c.matrix_weights = h * (h + 2 * hk) + h * h + (llama ? 3 : 2) * h * f;
  if (llama) {
    c.params = c.matrix_weights + 2 * h + (m.qkv_bias ? h + 2 * hk : 0);
  } else {
    c.params = c.matrix_weights + (h + 2 * hk) + h + f + h  // biases: QKV, output, fc, fcproj
               + 4 * h;                                     // two layernorms (scale and shift)
    if (m.kind == ModelKind::Dit) c.params += h * 6 * h + 6 * h;  // adaLN modulation
  }
  c.activations = 6 * h + 2 * hk + (llama ? 3 : 2) * f;
  return c;
}

int64_t param_count(const ModelSpec& m) {
  const int64_t h = m.dim;
  int64_t outside = m.arch == ModelArch::Llama ? h : 2 * h;  // final norm
  if (m.kind == ModelKind::Gpt)                              // embedding, untied LM head
    outside += int64_t(m.vocab) * h * (m.tie_embeddings ? 1 : 2);
  return m.layers * layer_count(m).params + outside;
}

double layer_dense_flops_per_token(const ModelSpec& m) {
  return 2.0 * double(layer_count(m).matrix_weights);
}

double head_flops_per_token(const ModelSpec& m) {
  return m.kind == ModelKind::Gpt ? 2.0 * m.dim * m.vocab : 0.0;
}

}  // namespace wallfacer::plan
