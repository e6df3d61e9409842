// Gpt built for inference (GptUse::Infer): forward_logits gives, for the rows asked for, the
// logits of the training forward on the same weights and tokens, for GPT and Llama blocks, fp32
// and bf16, with a batch of two sequences; and it refuses what it is not built for.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <vector>

#include "wallfacer/core/error.h"
#include "wallfacer/core/rng.h"
#include "wallfacer/model/gpt.h"
#include "wallfacer/model/local_attention.h"

namespace wallfacer {
namespace {

using model::Checkpointing;
using model::Gpt;
using model::GptConfig;
using model::GptUse;
using model::LocalAttention;

GptConfig config(model::Arch arch) {
  GptConfig cfg;
  cfg.arch = arch;
  cfg.vocab = 97;
  cfg.layers = 2;
  cfg.dim = 32;
  cfg.heads = 4;
  cfg.kv_heads = arch == model::Arch::Llama ? 2 : 4;
  cfg.mlp_ratio = 2;
  if (arch == model::Arch::Llama) cfg.intermediate = 48;
  return cfg;
}

void check(model::Arch arch, Dtype dtype) {
  const GptConfig cfg = config(arch);
  const int B = 2, T = 24;
  std::vector<int64_t> pos(T);
  std::iota(pos.begin(), pos.end(), int64_t(0));
  std::vector<int32_t> tokens(size_t(B * T)), targets(size_t(B * T), 0);
  Rng rng(5);
  for (auto& t : tokens) t = int32_t(rng.uniform() * cfg.vocab) % cfg.vocab;
  std::vector<float> params(size_t(model::gpt_num_params(cfg)));
  model::gpt_init_params(cfg, params.data(), 3);

  LocalAttention attn_train(B, T, cfg.heads, cfg.kv_heads, cfg.head_dim());
  Gpt train(cfg, B, pos, Checkpointing::None, attn_train, dtype);
  std::copy(params.begin(), params.end(), train.params());
  train.forward(tokens.data(), targets.data());

  LocalAttention attn_infer(B, T, cfg.heads, cfg.kv_heads, cfg.head_dim());
  Gpt infer(cfg, B, pos, Checkpointing::None, attn_infer, dtype, GptUse::Infer);
  std::copy(params.begin(), params.end(), infer.params());
  EXPECT_LT(infer.activation_bytes(), train.activation_bytes());
  const std::vector<int64_t> rows{T - 1, 0, B * T - 1, T + 5};
  std::vector<float> logits(rows.size() * size_t(cfg.vocab));
  infer.forward_logits(tokens.data(), rows, logits.data());
  double worst = 0, scale = 0;
  for (size_t i = 0; i < rows.size(); ++i)
    for (int v = 0; v < cfg.vocab; ++v) {
      const double want = train.logits()[rows[i] * cfg.vocab + v];
      worst = std::max(worst, std::abs(double(logits[i * size_t(cfg.vocab) + size_t(v)]) - want));
      scale = std::max(scale, std::abs(want));
    }
  ASSERT_GT(scale, 0.0);
  // The same products on the same values: equal but for the order of a few sums.
  EXPECT_LE(worst, 1e-5 * std::max(1.0, scale))
      << model::arch_name(arch) << " " << dtype_name(dtype);
}

TEST(GptInfer, LogitsOfAskedRowsAreTheTrainingForwards) {
  for (model::Arch arch : {model::Arch::Gpt, model::Arch::Llama})
    for (Dtype dtype : {Dtype::fp32, Dtype::bf16}) check(arch, dtype);
}

TEST(GptInfer, RefusesTrainingCalls) {
  const GptConfig cfg = config(model::Arch::Llama);
  std::vector<int64_t> pos{0, 1, 2, 3};
  LocalAttention attn(1, 4, cfg.heads, cfg.kv_heads, cfg.head_dim());
  Gpt infer(cfg, 1, pos, Checkpointing::None, attn, Dtype::fp32, GptUse::Infer);
  std::vector<int32_t> tokens{1, 2, 3, 4}, targets{2, 3, 4, 5};
  EXPECT_THROW(infer.forward(tokens.data(), targets.data()), Error);
  EXPECT_THROW(infer.backward(1.0f), Error);
  Gpt train(cfg, 1, pos, Checkpointing::None, attn, Dtype::fp32);
  std::vector<float> logits(size_t(cfg.vocab));
  EXPECT_THROW(train.forward_logits(tokens.data(), {0}, logits.data()), Error);
}

}  // namespace
}  // namespace wallfacer
