#pragma once
// Autoregressive decoding of a trained GPT with a KV cache: one token at a time, each attending to
// the cached keys and values of the tokens before it (same architecture as model/gpt.h).

#include <cstdint>
#include <vector>

#include "wallfacer/model/gpt.h"

namespace wallfacer::model {

class GptDecoder {
 public:
  // params: an arena laid out as gpt_param_tensors(cfg); max_tokens: cache capacity.
  GptDecoder(const GptConfig& cfg, const float* params, int max_tokens);
  // Feeds `token` at the next position; returns the logits (V) for the token after it.
  const float* step(int32_t token);
  int position() const { return pos_; }

 private:
  GptConfig cfg_;
  GptParams p_;
  int max_tokens_, pos_ = 0;
  std::vector<float> k_cache_, v_cache_;  // per layer (max_tokens, Hkv, D)
  std::vector<float> x_, ln_, mean_, rstd_, qkv_, q_, o_, lse_, tmp_, h_, logits_;
  std::vector<float> cos_, sin_;
  std::vector<double> inv_freq_;
  // ln_ = norm(x_) of the architecture (layernorm or RMSNorm).
  void norm(const float* w, const float* b);
};

// Picks a token from logits (V) at temperature T (T <= 0: the most likely token).
int32_t sample_token(const float* logits, int V, double temperature, double uniform01);

}  // namespace wallfacer::model
