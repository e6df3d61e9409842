#include "wallfacer/model/generate.h"

#include <algorithm>
#include <cmath>

#include "wallfacer/core/error.h"
#include "wallfacer/kernels/attention.h"
#include "wallfacer/kernels/attention_params.h"
#include "wallfacer/seqpar/attention.h"

namespace wallfacer::model {

namespace k = wallfacer::kernels;

seqpar::AttnConfig prefill_attn_config(const GptConfig& cfg, const seqpar::AttnConfig& attn,
                                       int64_t padded) {
  WF_USAGE_CHECK(cfg.window == 0,
                 "generate runs models without sliding-window layers (model.window is {})",
                 cfg.window);
  seqpar::AttnConfig a;
  a.strategy = attn.strategy;
  a.teams = attn.teams;
  a.ulysses = attn.ulysses;
  a.batch = 1;
  a.seq = padded;
  a.heads = cfg.heads;
  a.kv_heads = cfg.kv_heads;
  a.head_dim = cfg.head_dim();
  a.causal = true;
  return a;
}

PromptSplit split_prompt(const GptConfig& cfg, const seqpar::AttnConfig& attn, int P,
                         int64_t prompt) {
  WF_USAGE_CHECK(prompt >= 1, "the prompt must hold at least one token");
  seqpar::AttnConfig a = prefill_attn_config(cfg, attn, P);
  const int64_t unit = int64_t(P) * (seqpar::uses_zigzag_layout(a) ? 2 : 1);
  PromptSplit s;
  s.prompt = prompt;
  s.padded = (prompt + unit - 1) / unit * unit;
  a.seq = s.padded;
  seqpar::validate(a, P);
  for (int r = 0; r < P; ++r) {
    int64_t n = 0;
    for (const seqpar::PositionRun& run : seqpar::local_runs(a, P, r))
      n += std::clamp<int64_t>(prompt - run.pos0, 0, run.rows);
    s.held.push_back(n);
  }
  return s;
}

int next_owner(const std::vector<int64_t>& held) {
  return int(std::min_element(held.begin(), held.end()) - held.begin());
}

std::vector<int64_t> shard_sizes(std::vector<int64_t> held, int64_t new_tokens) {
  for (int64_t i = 0; i < new_tokens; ++i) ++held[size_t(next_owner(held))];
  return held;
}

int64_t cache_bytes(const GptConfig& cfg, int64_t rows) {
  return 2 * int64_t(cfg.layers) * rows * int64_t(cfg.kv_heads) * int64_t(cfg.head_dim()) *
         int64_t(sizeof(float));
}

double prefill_scratch_bytes(const GptConfig& cfg, const seqpar::AttnConfig& attn, int P,
                             int64_t padded, bool every_rank) {
  const seqpar::AttnConfig a = prefill_attn_config(cfg, attn, padded);
  double scratch = 0;
  for (int r = 0; r < (every_rank ? P : 1); ++r)
    scratch = std::max(scratch, double(seqpar::dist_attention_memory(a, P, r).scratch));
  return scratch;
}

double generate_memory_bytes(const GptConfig& cfg, int P, int64_t padded, int64_t cache_rows,
                             double scratch) {
  // The loaded parameters, the prefill model's own copy and its gradient arena.
  const double params = 12.0 * double(gpt_num_params(cfg));
  // Per row and layer the forward's kept activations (as the trainer counts them), and the
  // logits (and their gradient buffer) of every row.
  const double rows = double(padded) / double(P);
  const double per_row = double(cfg.layers) * (10.0 * double(cfg.dim) + double(cfg.fc_dim()) +
                                               double(cfg.mlp_hidden())) +
                         2.0 * double(cfg.vocab);
  return params + 4.0 * rows * per_row + scratch + double(cache_bytes(cfg, cache_rows));
}

ShardedKvCache::ShardedKvCache(const GptConfig& cfg, comm::Communicator& group,
                               const PromptSplit& split, int64_t capacity)
    : cfg_(cfg), group_(group), prompt_(split.prompt), capacity_(capacity), held_(split.held) {
  WF_CHECK(int(held_.size()) == group.size(), "ShardedKvCache: a split of {} ranks on {}",
           held_.size(), group.size());
  WF_CHECK(capacity >= held_[size_t(group.rank())], "ShardedKvCache: capacity {} below {} rows",
           capacity, held_[size_t(group.rank())]);
  const size_t layer = size_t(capacity) * size_t(cfg.kv_heads) * size_t(cfg.head_dim());
  k_.resize(layer * size_t(cfg.layers));
  v_.resize(layer * size_t(cfg.layers));
  layer_rows_.assign(size_t(cfg.layers), 0);
  const int H = cfg.heads, D = cfg.head_dim(), P = group.size();
  o_part_.resize(size_t(H) * size_t(D));
  lse_part_.resize(size_t(H));
  o_send_.resize(size_t(P) * o_part_.size());
  lse_send_.resize(size_t(P) * lse_part_.size());
  lse_.resize(size_t(H));
  rows_ = held_[size_t(group.rank())];
}

void ShardedKvCache::add_prefill(int layer, const float* k, const float* v,
                                 const std::vector<int64_t>& positions) {
  const int64_t row = int64_t(cfg_.kv_heads) * cfg_.head_dim();
  const size_t layer_off = size_t(layer) * size_t(capacity_) * size_t(row);
  int64_t& n = layer_rows_[size_t(layer)];
  for (size_t i = 0; i < positions.size(); ++i) {
    if (positions[i] >= prompt_) continue;
    WF_CHECK(n < rows_, "add_prefill: more prompt rows than the split gave rank {}", group_.rank());
    std::copy_n(k + int64_t(i) * row, row, k_.data() + layer_off + size_t(n * row));
    std::copy_n(v + int64_t(i) * row, row, v_.data() + layer_off + size_t(n * row));
    ++n;
  }
}

void ShardedKvCache::attend(int layer, int64_t pos, const float* q, const float* k, const float* v,
                            float* o) {
  const int H = cfg_.heads, Hkv = cfg_.kv_heads, D = cfg_.head_dim(), P = group_.size();
  if (pos != pos_) {  // a new token: its shard by the balance rule
    pos_ = pos;
    owner_ = next_owner(held_);
    ++held_[size_t(owner_)];
    if (owner_ == group_.rank()) ++rows_;
    merge_bytes_ = 0;
  }
  const int64_t row = int64_t(Hkv) * D;
  float* kc = k_.data() + size_t(layer) * size_t(capacity_) * size_t(row);
  float* vc = v_.data() + size_t(layer) * size_t(capacity_) * size_t(row);
  if (owner_ == group_.rank()) {
    WF_CHECK(rows_ <= capacity_, "KV cache shard full ({} positions)", capacity_);
    std::copy_n(k, row, kc + size_t((rows_ - 1) * row));
    std::copy_n(v, row, vc + size_t((rows_ - 1) * row));
  }
  // This shard's partial result: every position it holds is before the new token (or is it).
  const k::AttnDims one{1, 1, int(rows_), H, Hkv, D};
  if (rows_ > 0) {
    const k::AttnInputs<float> a = cached_token_attention(cfg_, q, kc, vc, capacity_, rows_);
    k::attn_fwd(k::fwd_params(a, o_part_.data(), lse_part_.data()));
  } else {
    k::attn_fwd_init_output(one, o_part_.data(), k::Strides3::contiguous(1, H, D), lse_part_.data(),
                            k::Strides2::contiguous(H, 1));
  }
  // Every rank's block of the reduce-scatter is the same partial: each receives the merge.
  for (int r = 0; r < P; ++r) {
    std::copy(o_part_.begin(), o_part_.end(), o_send_.begin() + ptrdiff_t(r) * H * D);
    std::copy(lse_part_.begin(), lse_part_.end(), lse_send_.begin() + ptrdiff_t(r) * H);
  }
  group_.reduce_scatter_lse(o_send_.data(), lse_send_.data(), o, lse_.data(), 1, 1, H, D,
                            k::lse_merge_rows);
  merge_bytes_ += int64_t(P - 1) * int64_t(H) * (D + 1) * int64_t(sizeof(float));
}

namespace {

// The prefill's attention: the DistAttention of the strategy, and each layer's keys and values
// of this rank's rows into the cache.
class PrefillAttention : public AttentionOp {
 public:
  PrefillAttention(const seqpar::AttnConfig& a, comm::Communicator& group, ShardedKvCache& cache,
                   int layers)
      : dist_(a, group), cache_(cache), positions_(dist_.local_positions()), layers_(layers) {}
  const std::vector<int64_t>& positions() const { return positions_; }
  void forward(const Act& q, const Act& k, const Act& v, const Act& o, float* lse) override {
    WF_CHECK(q.f32 && k.f32 && v.f32 && o.f32, "the prefill runs in fp32");
    WF_CHECK(layer_ < layers_, "prefill: more attention calls than layers");
    dist_.forward(q.f32, k.f32, v.f32, o.f32, lse);
    cache_.add_prefill(layer_++, k.f32, v.f32, positions_);
  }
  void backward(const Act&, const Act&, const Act&, const Act&, const float*, const Act&,
                const Act&, const Act&, const Act&) override {
    WF_CHECK(false, "the prefill has no backward");
  }

 private:
  seqpar::DistAttention dist_;
  ShardedKvCache& cache_;
  std::vector<int64_t> positions_;
  int layers_, layer_ = 0;
};

}  // namespace

std::vector<float> sharded_prefill(const GptConfig& cfg, const float* params,
                                   const std::vector<int32_t>& prompt,
                                   const seqpar::AttnConfig& attn, comm::Communicator& group,
                                   ShardedKvCache& cache) {
  const int P = group.size();
  const PromptSplit split = split_prompt(cfg, attn, P, int64_t(prompt.size()));
  const seqpar::AttnConfig a = prefill_attn_config(cfg, attn, split.padded);
  PrefillAttention op(a, group, cache, cfg.layers);
  const std::vector<int64_t>& pos = op.positions();
  std::vector<int32_t> tokens(pos.size()), targets(pos.size(), 0);
  for (size_t i = 0; i < pos.size(); ++i)
    tokens[i] = pos[i] < split.prompt ? prompt[size_t(pos[i])] : 0;  // pads: token 0
  Gpt gpt(cfg, 1, pos, Checkpointing::None, op, Dtype::fp32);
  std::copy_n(params, gpt.num_params(), gpt.params());
  gpt.forward(tokens.data(), targets.data());
  // The last prompt position's logits, from the rank that holds it (the others add zeros).
  const int V = cfg.vocab;
  std::vector<float> logits(size_t(V), 0.0f);
  for (size_t i = 0; i < pos.size(); ++i)
    if (pos[i] == split.prompt - 1) std::copy_n(gpt.logits() + int64_t(i) * V, V, logits.begin());
  group.all_reduce_sum(logits.data(), V);
  return logits;
}

}  // namespace wallfacer::model
