#include "wallfacer/model/hf_layout.h"

#include <algorithm>

#include "wallfacer/core/error.h"

namespace wallfacer::model {

std::vector<int> rope_row_permutation(int D) {
  WF_CHECK(D >= 2 && D % 2 == 0, "rope_row_permutation: head dim {} must be even", D);
  std::vector<int> perm(static_cast<size_t>(D));
  for (int i = 0; i < D / 2; ++i) {
    perm[size_t(2 * i)] = i;
    perm[size_t(2 * i + 1)] = i + D / 2;
  }
  return perm;
}

std::vector<HfTensor> hf_tensors(const GptConfig& cfg) {
  WF_CHECK(cfg.arch == Arch::Llama, "hf_tensors: model.arch is '{}', not 'llama'",
           arch_name(cfg.arch));
  const int64_t C = cfg.dim, D = cfg.head_dim(), H = cfg.heads, Hkv = cfg.kv_heads;
  const int64_t M = cfg.mlp_hidden(), V = cfg.vocab;
  std::vector<HfTensor> t;
  t.push_back({"model.embed_tokens.weight", {V, C}, "wte", 0, C, 0});
  for (int l = 0; l < cfg.layers; ++l) {
    const std::string hf = fmt::format("model.layers.{}.", l), p = fmt::format("h{}.", l);
    t.push_back({hf + "input_layernorm.weight", {C}, p + "ln1_w", 0, 1, 0});
    const int64_t rows[3] = {H * D, Hkv * D, Hkv * D}, row0[3] = {0, H * D, (H + Hkv) * D};
    const char* names[3] = {"q_proj", "k_proj", "v_proj"};
    for (int j = 0; j < 3; ++j) {
      t.push_back({hf + "self_attn." + names[j] + ".weight",
                   {rows[j], C},
                   p + "qkv_w",
                   row0[j],
                   C,
                   j < 2 ? int(D) : 0});
    }
    if (cfg.qkv_bias) {
      for (int j = 0; j < 3; ++j) {
        t.push_back({hf + "self_attn." + names[j] + ".bias",
                     {rows[j]},
                     p + "qkv_b",
                     row0[j],
                     1,
                     j < 2 ? int(D) : 0});
      }
    }
    t.push_back({hf + "self_attn.o_proj.weight", {C, H * D}, p + "proj_w", 0, H * D, 0});
    t.push_back({hf + "post_attention_layernorm.weight", {C}, p + "ln2_w", 0, 1, 0});
    t.push_back({hf + "mlp.gate_proj.weight", {M, C}, p + "gate_up_w", 0, C, 0});
    t.push_back({hf + "mlp.up_proj.weight", {M, C}, p + "gate_up_w", M, C, 0});
    t.push_back({hf + "mlp.down_proj.weight", {C, M}, p + "down_w", 0, M, 0});
  }
  t.push_back({"model.norm.weight", {C}, "lnf_w", 0, 1, 0});
  if (!cfg.tie_embeddings) t.push_back({"lm_head.weight", {V, C}, "lm_head_w", 0, C, 0});
  return t;
}

namespace {
// Our row r of the tensor's rows comes from its Hugging Face row src(r).
int64_t source_row(const HfTensor& t, const std::vector<int>& perm, int64_t r) {
  if (t.rope_head_dim == 0) return r;
  const int64_t D = t.rope_head_dim;
  return r / D * D + perm[size_t(r % D)];
}

void copy_rows(const HfTensor& t, const float* from, float* to, bool import) {
  const int64_t rows = t.shape[0];
  const std::vector<int> perm =
      t.rope_head_dim > 0 ? rope_row_permutation(t.rope_head_dim) : std::vector<int>{};
  WF_CHECK(t.rope_head_dim == 0 || rows % t.rope_head_dim == 0,
           "{}: {} rows are not whole heads of {}", t.hf_name, rows, t.rope_head_dim);
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t h = source_row(t, perm, r);
    float* ours = (import ? to : const_cast<float*>(from)) + (t.row0 + r) * t.cols;
    if (import) {
      std::copy_n(from + h * t.cols, t.cols, ours);
    } else {
      std::copy_n(ours, t.cols, to + h * t.cols);
    }
  }
}
}  // namespace

void hf_import(const HfTensor& t, const float* hf, float* ours) { copy_rows(t, hf, ours, true); }

void hf_export(const HfTensor& t, const float* ours, float* hf) { copy_rows(t, ours, hf, false); }

}  // namespace wallfacer::model
