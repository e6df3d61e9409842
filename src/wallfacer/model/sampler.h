#pragma once
// Autoregressive decoding of a trained GPT with a KV cache: one token at a time, each attending to
// the cached keys and values of the tokens before it (same architecture as model/gpt.h). The
// decoder runs the token's layers; a DecoderCache keeps the keys and values and runs the token's
// attention over them: in this process (the default), or sharded by position over the ranks of a
// group (model/generate.h).

#include <cstdint>
#include <memory>
#include <vector>

#include "wallfacer/kernels/attention_params.h"
#include "wallfacer/model/gpt.h"

namespace wallfacer::model {

// Where a decoder keeps the keys and values of earlier positions, and the attention of a new
// token over them.
class DecoderCache {
 public:
  virtual ~DecoderCache() = default;
  // The new token at position `pos`, layer `layer` (called for pos, then layer, in increasing
  // order): keeps its rotated key k and value v (Hkv, D) and writes o (H, D), the causal
  // attention (with the layer's window) of its rotated query q (H, D) over positions 0..pos.
  virtual void attend(int layer, int64_t pos, const float* q, const float* k, const float* v,
                      float* o) = 0;
};

// The attention inputs of a new token's query q (H, D) over the first `keys` rows of cached keys
// kc and values vc (capacity rows of (Hkv, D)), without a mask: what a DecoderCache runs, in this
// process or on a rank's shard (the caller adds causal, window and q_pos0 where it needs them).
kernels::AttnInputs<float> cached_token_attention(const GptConfig& cfg, const float* q,
                                                  const float* kc, const float* vc,
                                                  int64_t capacity, int64_t keys);

class GptDecoder {
 public:
  // params: an arena laid out as gpt_param_tensors(cfg); max_tokens: capacity of the decoder's
  // own cache (in this process).
  GptDecoder(const GptConfig& cfg, const float* params, int max_tokens);
  // With `cache` (which must outlive the decoder), whose positions 0..first_pos-1 are already
  // filled (a prefill): the first step feeds position first_pos.
  GptDecoder(const GptConfig& cfg, const float* params, DecoderCache& cache, int64_t first_pos);
  ~GptDecoder();
  // Feeds `token` at the next position; returns the logits (V) for the token after it.
  const float* step(int32_t token);
  int64_t position() const { return pos_; }

 private:
  GptConfig cfg_;
  GptParams p_;
  int64_t pos_ = 0;
  std::unique_ptr<DecoderCache> own_cache_;  // the first constructor's
  DecoderCache* cache_ = nullptr;
  std::vector<float> x_, ln_, mean_, rstd_, qkv_, q_, k_, o_, tmp_, h_, logits_;
  std::vector<float> cos_, sin_;
  std::vector<double> inv_freq_;
  void allocate();  // the buffers of one token
  // ln_ = norm(x_) of the architecture (layernorm or RMSNorm).
  void norm(const float* w, const float* b);
};

// Picks a token from logits (V) at temperature T (T <= 0: the most likely token).
int32_t sample_token(const float* logits, int V, double temperature, double uniform01);

// How a token is drawn from the logits: temperature T (<= 0: greedy, the most likely token, the
// lowest id among equals); else among the top_k most likely tokens (0: all), then the fewest most
// likely of those whose probabilities (at T, renormalised) reach top_p (1: all), at T.
struct Sampling {
  double temperature = 1.0;
  int top_k = 0;
  double top_p = 1.0;
};
int32_t sample_token(const float* logits, int V, const Sampling& s, double uniform01);

}  // namespace wallfacer::model
