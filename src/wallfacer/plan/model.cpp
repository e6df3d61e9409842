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
  m.mlp_ratio = t.integer_or("mlp_ratio", 4, 1, 64);
  m.vocab = t.integer_or("vocab", 257, 1, 1 << 24);
  m.causal = t.boolean_or("causal", m.kind == ModelKind::Gpt);
  t.reject_unknown();
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

int64_t param_count(const ModelSpec& m) {
  const int64_t h = m.dim, hk = m.kv_dim(), f = int64_t(m.mlp_ratio) * m.dim;
  int64_t layer = h * (h + 2 * hk) + (h + 2 * hk)                 // QKV weight and bias
                  + h * h + h                                     // output projection
                  + h * f + f + f * h + h                         // MLP
                  + 4 * h;                                        // two norms (scale and shift)
  if (m.kind == ModelKind::Dit) layer += h * 6 * h + 6 * h;       // adaLN modulation
  int64_t outside = 2 * h;                                        // final norm
  if (m.kind == ModelKind::Gpt) outside += int64_t(m.vocab) * h;  // tied embedding / LM head
  return m.layers * layer + outside;
}

double layer_dense_flops_per_token(const ModelSpec& m) {
  const double h = m.dim, hk = m.kv_dim();
  return 2 * h * (h + 2 * hk) + 2 * h * h + 4.0 * m.mlp_ratio * h * h;
}

double head_flops_per_token(const ModelSpec& m) {
  return m.kind == ModelKind::Gpt ? 2.0 * m.dim * m.vocab : 0.0;
}

}  // namespace wallfacer::plan
