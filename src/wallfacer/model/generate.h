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
#include <string>
#include <vector>

#include "wallfacer/comm/communicator.h"
#include "wallfacer/core/memory.h"
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
  // Per rank: those positions as runs of consecutive positions, in increasing order (row0: the
  // run's first row in the rank's shard).
  std::vector<std::vector<seqpar::PositionRun>> runs;
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
// parameters twice, the activations of its rows in a Gpt built for inference, the attention's
// `scratch`) and
// hold a cache shard of `cache_rows` positions: an estimate, for refusing before allocating.
double generate_memory_bytes(const GptConfig& cfg, int P, int64_t padded, int64_t cache_rows,
                             double scratch);
// The largest scratch of the prefill's DistAttention over the P ranks (seqpar).
double prefill_scratch_bytes(const GptConfig& cfg, const seqpar::AttnConfig& attn, int P,
                             int64_t padded, bool every_rank = true);

// This rank's shard of the KV cache: per layer, keys and values (capacity, Hkv, D) of the
// positions it holds, in increasing order of position (the prefill's rows sorted, then the new
// tokens and turns as they come, each after every cached position). Every rank knows every
// shard's positions (runs), from the layout and the balance rule, without a message. A layer
// with a sliding window W attends, for a query at position t, only to the keys at positions
// > t - W: on each shard a suffix of its rows in decode, runs of consecutive positions masked by
// the kernel's window in a continuation; the cache keeps every position (no eviction).
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
  int64_t rows() const { return rows_; }  // positions this rank holds
  int64_t kv_row() const { return int64_t(cfg_.kv_heads) * cfg_.head_dim(); }  // floats a row
  int64_t bytes() const { return cache_bytes(cfg_, capacity_); }               // allocated
  int64_t capacity() const { return capacity_; }
  const std::vector<int64_t>& held() const { return held_; }  // every rank's positions
  // Rank r's positions as runs (row0: first row in its shard), in increasing order.
  const std::vector<seqpar::PositionRun>& runs(int r) const { return runs_[size_t(r)]; }
  // Bytes this rank sent in the merges of the latest token (all layers).
  int64_t merge_bytes_last() const { return merge_bytes_; }
  // Milliseconds this rank has spent in the merges since it was built (every token, every layer):
  // the reduce-scatter's messages and the wait for the slowest rank's partial.
  double merge_ms() const { return merge_ms_; }
  // Positions every rank holds together (the next position to fill).
  int64_t positions() const;
  // Continuation (continue_prefill): layer `layer`'s cached keys and values (capacity, Hkv, D),
  // rows() of them filled; append_rows writes n rows after those, for every layer, and grow then
  // counts every rank's added rows (the same `added` on every rank).
  const float* keys(int layer) const;
  const float* values(int layer) const;
  void append_rows(int layer, const float* k, const float* v, int64_t n);
  void grow(const std::vector<int64_t>& added);

 private:
  GptConfig cfg_;
  comm::Communicator& group_;
  int64_t prompt_, capacity_, rows_ = 0;
  std::vector<int64_t> held_;
  std::vector<std::vector<seqpar::PositionRun>> runs_;  // every rank's positions
  LargeVector<float> k_, v_;
  std::vector<float> o_part_, lse_part_, o_send_, lse_send_, lse_;
  int64_t pos_ = -1;  // the position of the token being decoded
  int owner_ = 0;
  int64_t merge_bytes_ = 0;
  double merge_ms_ = 0;
};

// Runs the prefill of `prompt` (collective over `group`; the same prompt on every rank) with the
// strategy of `attn` and fills `cache` (built with split_prompt's split). Returns the logits (V)
// after the last prompt token, the same on every rank. attn.dtype is the prefill's: bf16 runs the
// model's products and attention in bf16 (as a bf16 training forward does) and the cache keeps
// the keys and values as rounded (widened to fp32); the decode is fp32 either way.
std::vector<float> sharded_prefill(const GptConfig& cfg, const float* params,
                                   const std::vector<int32_t>& prompt,
                                   const seqpar::AttnConfig& attn, comm::Communicator& group,
                                   ShardedKvCache& cache);

// Continuing a conversation (docs/generate.md, "Continuing a conversation"): M new tokens
// appended to a cache of N positions, spread over the P ranks by the balance rule (each rank a
// contiguous run of the new positions, in rank order), prefilled against the cached shards.
// pass-KV: every rank's keys and values (its cached shard and its new rows) circulate on the
// ring past every rank's new queries. pass-Q: the new queries circulate, each rank attends them
// to its shard and its new rows, and the partial outputs with their LSE go back to the queries'
// rank, which merges them in rank order.
enum class ContinueWay { Auto, PassKv, PassQ };
const char* continue_way_name(ContinueWay way);           // "auto", "pass-kv", "pass-q"
ContinueWay parse_continue_way(const std::string& name);  // UsageError when unknown
struct ContinuePlan {
  int64_t cached = 0, added = 0;          // N, M
  int64_t pass_kv_bytes = 0;              // bytes every rank sends together, all layers: (P - 1)
                                          // (N + M) 2 Hkv D 4 per layer
  int64_t pass_q_bytes = 0;               // (P - 1) M (H D + H (D + 1)) 4 per layer
  ContinueWay way = ContinueWay::PassKv;  // the one chosen (forced, or the fewer bytes)
  std::vector<int64_t> rows;              // per rank: its new positions
  std::vector<int64_t> first;             // per rank: the first of them
};
ContinuePlan plan_continue(const GptConfig& cfg, const std::vector<int64_t>& held, int64_t added,
                           ContinueWay want);
// Runs the continuation (collective; the same tokens on every rank) the way `plan.way` (from
// plan_continue with cache.held()) and appends the new keys and values to the shards. Returns the
// logits (V) after the last new token, the same on every rank; *sent: the bytes this rank sent.
std::vector<float> continue_prefill(const GptConfig& cfg, const float* params,
                                    const std::vector<int32_t>& tokens, const ContinuePlan& plan,
                                    comm::Communicator& group, ShardedKvCache& cache,
                                    int64_t* sent);

// Chunked prefill (docs/generate.md, "Memory"): a prompt whose prefill does not fit a rank's
// memory runs in chunks of `chunk` tokens, in order: the first one by sharded_prefill (its split,
// split_prompt(..., chunk), is the cache's), each later one by continue_prefill against the cache
// of the chunks before it (pass-KV or pass-Q, the fewer bytes; pass-Q on one rank), so that a
// rank holds the activations of a chunk's rows, never the prompt's, and only the cache grows.
// The multiple a chunk's length keeps: P, or 2P for the zigzag layout (no chunk is padded).
int64_t prefill_chunk_unit(const GptConfig& cfg, const seqpar::AttnConfig& attn, int P);
// The memory one rank needs to prefill a prompt in chunks of `chunk` tokens (a multiple of the
// unit), whose other turns run at most `turn_rows` tokens together (0: none), and hold a cache
// shard of `cache_rows` positions: generate_memory_bytes of the larger of the chunk and the turn,
// with the larger of the first chunk's DistAttention scratch and a later chunk's continuation
// scratch (continue_scratch_bytes).
double chunked_memory_bytes(const GptConfig& cfg, const seqpar::AttnConfig& attn, int P,
                            int64_t chunk, int64_t turn_rows, int64_t cache_rows,
                            bool every_rank = true);
// The largest buffers of a continuation of `added` tokens over P ranks whose way is chosen by
// the bytes (pass-KV only while it sends no more than pass-Q, which bounds its blocks by
// `added`).
double continue_scratch_bytes(const GptConfig& cfg, int P, int64_t added);
// The chunk length for a prompt of `prompt` tokens under `limit` bytes: the largest multiple of
// the unit below the prompt whose chunked_memory_bytes fits, then shortened (still a multiple
// of the unit) to spread the prompt evenly over as many chunks; 0 when not even one unit fits.
int64_t choose_prefill_chunk(const GptConfig& cfg, const seqpar::AttnConfig& attn, int P,
                             int64_t prompt, int64_t turn_rows, int64_t cache_rows, double limit);
// What a chunked prefill did: its chunks, the length of each but the last, how many ran pass-KV
// and pass-Q, and the bytes this rank sent in them.
struct PrefillChunks {
  int64_t chunks = 1, chunk_tokens = 0, pass_kv = 0, pass_q = 0, sent_bytes = 0;
};
// Runs the prefill of `prompt` in chunks of `chunk` tokens (collective; one chunk when `chunk` is
// 0 or at least the prompt), filling `cache`, built with split_prompt(cfg, attn, P,
// min(chunk, prompt)) and the capacity of the whole prompt. Returns the logits (V) after the
// last prompt token, the same on every rank. More than one chunk needs attn.dtype fp32.
std::vector<float> chunked_prefill(const GptConfig& cfg, const float* params,
                                   const std::vector<int32_t>& prompt, int64_t chunk,
                                   const seqpar::AttnConfig& attn, comm::Communicator& group,
                                   ShardedKvCache& cache, PrefillChunks* done = nullptr);

}  // namespace wallfacer::model
