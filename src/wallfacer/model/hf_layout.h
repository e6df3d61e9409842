#pragma once
// Where the tensors of a Hugging Face Llama-family checkpoint (LlamaForCausalLM,
// Qwen2ForCausalLM, MistralForCausalLM) go in a model's parameter arena (gpt_param_tensors), for
// import and export.
//
// The rotary convention differs: transformers rotates the pairs (x[i], x[i + D/2]) of a head
// (rotate_half), the GPT here rotates (x[2i], x[2i+1]), both by pos * inv_freq[i]. Permuting the
// rows of each q and k head (q_proj, k_proj weights and biases) by rope_row_permutation makes
// our rotation compute exactly transformers' attention scores: q . k is a sum over the pairs, and
// each pair is rotated by the same angle in both.
//
// config.json onto the model's keys (model.arch = "llama"; train/hf_config.h reads them):
//   vocab_size -> model.vocab, hidden_size -> model.dim, num_hidden_layers -> model.layers,
//   num_attention_heads -> model.heads, num_key_value_heads -> model.kv_heads (absent: heads),
//   intermediate_size -> model.intermediate, rms_norm_eps -> model.norm_eps,
//   tie_word_embeddings -> model.tie_embeddings, rope_theta -> model.rope_theta,
//   rope_scaling {rope_type (or type), factor, low_freq_factor, high_freq_factor,
//   original_max_position_embeddings} -> model.rope_scaling.* (null: type "none"),
//   q/k/v biases (Qwen2's; no o_proj bias) -> model.qkv_bias = true.
// Windows: transformers' sliding window W keeps the keys j with i - W < j <= i, as model.window
// does: Mistral's sliding_window -> model.window (null: 0) on every layer; Qwen2 with
// use_sliding_window -> model.window = sliding_window on the layers max_window_layers..L-1
// (model.window_layers; a config.json with layer_types: its "sliding_attention" layers).
// Not expressible, to refuse on import: head_dim other than hidden_size / num_attention_heads,
// hidden_act other than "silu", an o_proj bias (Llama's attention_bias = true adds one beside the
// q/k/v biases) or mlp_bias.

#include <cstdint>
#include <string>
#include <vector>

#include "wallfacer/model/gpt.h"

namespace wallfacer::model {

// perm (D): our row r of a head is the Hugging Face row perm[r]: perm[2i] = i,
// perm[2i + 1] = i + D/2. D must be even.
std::vector<int> rope_row_permutation(int D);

// One tensor of the Hugging Face checkpoint and the rows of our tensor it fills.
struct HfTensor {
  std::string hf_name;         // e.g. "model.layers.0.self_attn.q_proj.weight"
  std::vector<int64_t> shape;  // its shape there: (rows, cols) or (rows)
  std::string tensor;          // our ParamTensor name, e.g. "h0.qkv_w"
  int64_t row0 = 0;            // the first of our tensor's rows it fills (rows of `cols` values)
  int64_t cols = 1;            // values per row (1 for a vector)
  int rope_head_dim = 0;       // > 0: the rows of each head of this size permuted (q and k)
};

// Every tensor of the checkpoint of a cfg.arch = "llama" model, in our arena's order: with
// cfg.qkv_bias the q, k, v biases, without cfg.tie_embeddings "lm_head.weight".
//   model.embed_tokens.weight               -> wte
//   model.layers.{l}.input_layernorm.weight -> h{l}.ln1_w
//   ...self_attn.{q,k,v}_proj.weight        -> h{l}.qkv_w rows [0, H D), [H D, (H + Hkv) D),
//                                              [(H + Hkv) D, (H + 2 Hkv) D); q, k rows permuted
//   ...self_attn.{q,k,v}_proj.bias          -> h{l}.qkv_b likewise
//   ...self_attn.o_proj.weight              -> h{l}.proj_w
//   ...post_attention_layernorm.weight      -> h{l}.ln2_w
//   ...mlp.gate_proj.weight, up_proj.weight -> h{l}.gate_up_w rows [0, M), [M, 2 M)
//   ...mlp.down_proj.weight                 -> h{l}.down_w
//   model.norm.weight                       -> lnf_w
//   lm_head.weight                          -> lm_head_w
std::vector<HfTensor> hf_tensors(const GptConfig& cfg);

// Copies the values of a Hugging Face tensor (hf, laid out as t.shape, row-major) into our tensor
// `ours` (the arena at the tensor's offset), applying the row permutation; hf_export is its
// inverse (ours -> hf).
void hf_import(const HfTensor& t, const float* hf, float* ours);
void hf_export(const HfTensor& t, const float* ours, float* hf);

}  // namespace wallfacer::model
