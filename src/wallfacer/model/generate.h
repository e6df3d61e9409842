#pragma once
// Generation from long prompts over the P ranks of a group (docs/generate.md): the prompt's
// prefill runs the training forward (Gpt) with a sequence-parallel DistAttention, and every rank
// keeps the keys and values of the prompt positions it held as its shard of the KV cache (never
// gathered). Each new token then runs its layers on every rank (replicated: the token is one row,
// its projections and MLP cost less than its attention over a long cache and moving them would
// cost a collective per product), attends on every rank to that rank's shard (a partial output
// and its LSE), and one reduce-scatter with the LSE combine (the one of WallFacer's attention)
// merges the P partials exactly, in rank order, on every rank.
//
// Padding rule: a prompt whose length the strategy's layout cannot split (ring and Ulysses need a
// multiple of P, the zigzag layout of 2P) is padded at its end with token 0 to the next multiple;
// the causal mask keeps every prompt position from seeing a pad, and the pads' keys and values are
// dropped, so that the shards hold the prompt positions only (unevenly, by up to a pad's worth).
// Balance rule: each new token's key and value join the shard of the rank that holds the fewest
// positions, the lowest such rank on ties; every rank knows every shard's size, so the rule needs
// no message, and the shards never differ by more than the padding's imbalance.

#include <cstdint>
#include <vector>

#include "wallfacer/comm/communicator.h"
#include "wallfacer/model/gpt.h"
#include "wallfacer/model/sampler.h"
#include "wallfacer/seqpar/config.h"

namespace wallfacer::model {

// Where the prompt's positions go: its length padded for the layout of `attn` on P ranks, and
// how many prompt positions (not pads) each rank holds.
struct PromptSplit {
  int64_t prompt = 0;         // L, the prompt's tokens
  int64_t padded = 0;         // the sequence the prefill runs (L rounded up for the layout)
  std::vector<int64_t> held;  // per rank: its prompt positions (< L)
};
// attn: strategy, teams, ulysses (the rest is set from the model); UsageError when the model's
// heads or the layout do not fit P.
seqpar::AttnConfig prefill_attn_config(const GptConfig& cfg, const seqpar::AttnConfig& attn,
                                       int64_t padded);
PromptSplit split_prompt(const GptConfig& cfg, const seqpar::AttnConfig& attn, int P,
                         int64_t prompt);
// The positions each rank holds after `new_tokens` more tokens join by the balance rule.
std::vector<int64_t> shard_sizes(std::vector<int64_t> held, int64_t new_tokens);
// The rank whose shard the next position joins (the balance rule).
int next_owner(const std::vector<int64_t>& held);
// Bytes of a shard of `rows` positions: keys and values of every layer, fp32.
int64_t cache_bytes(const GptConfig& cfg, int64_t rows);
// The memory one rank needs to prefill `rows` = padded / P rows of a padded prompt (the model's
// parameters three times, the activations and logits of its rows, the attention's `scratch`) and
// hold a cache shard of `cache_rows` positions: an estimate, for refusing before allocating.
double generate_memory_bytes(const GptConfig& cfg, int P, int64_t padded, int64_t cache_rows,
                             double scratch);
// The largest scratch of the prefill's DistAttention over the P ranks (seqpar).
double prefill_scratch_bytes(const GptConfig& cfg, const seqpar::AttnConfig& attn, int P,
                             int64_t padded, bool every_rank = true);

// This rank's shard of the KV cache: per layer, keys and values (capacity, Hkv, D) of the
// positions it holds, in the order they came (prefill rows by their layout, then new tokens).
class ShardedKvCache : public DecoderCache {
 public:
  // Collective use: every rank of `group` builds one with the same split, and `capacity` at least
  // its final shard size (shard_sizes).
  ShardedKvCache(const GptConfig& cfg, comm::Communicator& group, const PromptSplit& split,
                 int64_t capacity);
  // Prefill: appends the rows of `k`, `v` (rows, Hkv, D) of layer `layer` whose global positions
  // (`positions`, one per row) are prompt positions; the pads are dropped.
  void add_prefill(int layer, const float* k, const float* v,
                   const std::vector<int64_t>& positions);
  // Decode (collective): see DecoderCache. The new token's k, v join the shard of next_owner().
  void attend(int layer, int64_t pos, const float* q, const float* k, const float* v,
              float* o) override;
  int64_t rows() const { return rows_; }                          // positions this rank holds
  int64_t bytes() const { return cache_bytes(cfg_, capacity_); }  // allocated
  const std::vector<int64_t>& held() const { return held_; }      // every rank's positions
  // Bytes this rank sent in the merges of the latest token (all layers).
  int64_t merge_bytes_last() const { return merge_bytes_; }

 private:
  GptConfig cfg_;
  comm::Communicator& group_;
  int64_t prompt_, capacity_, rows_ = 0;
  std::vector<int64_t> held_;
  std::vector<int64_t> layer_rows_;  // prefill rows stored per layer
  std::vector<float> k_, v_;
  std::vector<float> o_part_, lse_part_, o_send_, lse_send_, lse_;
  int64_t pos_ = -1;  // the position of the token being decoded
  int owner_ = 0;
  int64_t merge_bytes_ = 0;
};

// Runs the prefill of `prompt` (collective over `group`; the same prompt on every rank) with the
// strategy of `attn` and fills `cache` (built with split_prompt's split). Returns the logits (V)
// after the last prompt token, the same on every rank.
std::vector<float> sharded_prefill(const GptConfig& cfg, const float* params,
                                   const std::vector<int32_t>& prompt,
                                   const seqpar::AttnConfig& attn, comm::Communicator& group,
                                   ShardedKvCache& cache);

}  // namespace wallfacer::model
