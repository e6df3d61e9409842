#include "wallfacer/model/generate.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>
#include <utility>

#include "wallfacer/core/error.h"
#include "wallfacer/kernels/attention.h"
#include "wallfacer/kernels/attention_params.h"
#include "wallfacer/seqpar/attention.h"

namespace wallfacer::model {

namespace k = wallfacer::kernels;

namespace {

// Appends the positions pos0..pos0+rows-1 to a shard's runs (joining the last run when they
// follow it); a shard's positions only increase along its rows.
void add_run(std::vector<seqpar::PositionRun>& runs, int64_t pos0, int64_t rows) {
  if (rows <= 0) return;
  int64_t row0 = 0;
  if (!runs.empty()) {
    seqpar::PositionRun& last = runs.back();
    WF_CHECK(pos0 >= last.pos0 + last.rows,
             "a KV cache shard's positions must increase ({} after {})", pos0,
             last.pos0 + last.rows - 1);
    row0 = last.row0 + last.rows;
    if (pos0 == last.pos0 + last.rows) {
      last.rows += rows;
      return;
    }
  }
  runs.push_back({row0, rows, pos0});
}

// The rows of a shard at positions <= limit: a prefix of its rows.
int64_t rows_up_to(const std::vector<seqpar::PositionRun>& runs, int64_t limit) {
  int64_t n = 0;
  for (const seqpar::PositionRun& run : runs) {
    if (run.pos0 > limit) break;
    n = run.row0 + std::min(run.rows, limit - run.pos0 + 1);
  }
  return n;
}

// The distinct sliding windows of the model's layers (0: a layer without one), in layer order.
std::vector<int64_t> layer_window_set(const GptConfig& cfg) {
  std::vector<int64_t> w;
  for (int l = 0; l < cfg.layers; ++l)
    if (std::find(w.begin(), w.end(), cfg.layer_window(l)) == w.end())
      w.push_back(cfg.layer_window(l));
  return w;
}

}  // namespace

seqpar::AttnConfig prefill_attn_config(const GptConfig& cfg, const seqpar::AttnConfig& attn,
                                       int64_t padded) {
  seqpar::AttnConfig a;
  a.strategy = attn.strategy;
  a.teams = attn.teams;
  a.inner = attn.inner;
  a.ulysses = attn.ulysses;
  a.batch = 1;
  a.seq = padded;
  a.heads = cfg.heads;
  a.kv_heads = cfg.kv_heads;
  a.head_dim = cfg.head_dim();
  a.causal = true;
  a.dtype = attn.dtype;
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
    std::vector<seqpar::PositionRun> layout = seqpar::local_runs(a, P, r);
    std::sort(
        layout.begin(), layout.end(),
        [](const seqpar::PositionRun& x, const seqpar::PositionRun& y) { return x.pos0 < y.pos0; });
    s.runs.emplace_back();
    for (const seqpar::PositionRun& run : layout)
      add_run(s.runs.back(), run.pos0, std::clamp<int64_t>(prompt - run.pos0, 0, run.rows));
    s.held.push_back(s.runs.back().empty() ? 0
                                           : s.runs.back().back().row0 + s.runs.back().back().rows);
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
  seqpar::AttnConfig a = prefill_attn_config(cfg, attn, padded);
  double scratch = 0;
  for (const int64_t window : layer_window_set(cfg)) {
    a.window = window;
    for (int r = 0; r < (every_rank ? P : 1); ++r)
      scratch = std::max(scratch, double(seqpar::dist_attention_memory(a, P, r).scratch));
  }
  return scratch;
}

double generate_memory_bytes(const GptConfig& cfg, int P, int64_t padded, int64_t cache_rows,
                             double scratch) {
  // The loaded parameters and the prefill model's own copy (built for inference: no gradients).
  const double params = 8.0 * double(gpt_num_params(cfg));
  // Per row: kInferBlockSets of a layer's input, attention output and LSE (the layers take them in
  // turn), one layer's other activations (norms, q, k, v, the MLP's), the fp32 scratch and the
  // final norm's (Gpt with GptUse::Infer).
  const double rows = double(padded) / double(P);
  const double C = double(cfg.dim);
  const double per_row =
      double(std::min(cfg.layers, kInferBlockSets)) * (2.0 * C + double(cfg.heads)) + 8.0 * C +
      double(cfg.qkv_dim()) + double(cfg.fc_dim()) + double(cfg.mlp_hidden());
  return params + 4.0 * rows * per_row + scratch + double(cache_bytes(cfg, cache_rows));
}

ShardedKvCache::ShardedKvCache(const GptConfig& cfg, comm::Communicator& group,
                               const PromptSplit& split, int64_t capacity)
    : cfg_(cfg),
      group_(group),
      prompt_(split.prompt),
      capacity_(capacity),
      held_(split.held),
      runs_(split.runs) {
  WF_CHECK(int(held_.size()) == group.size() && runs_.size() == held_.size(),
           "ShardedKvCache: a split of {} ranks on {}", held_.size(), group.size());
  WF_CHECK(capacity >= held_[size_t(group.rank())], "ShardedKvCache: capacity {} below {} rows",
           capacity, held_[size_t(group.rank())]);
  const size_t layer = size_t(capacity) * size_t(cfg.kv_heads) * size_t(cfg.head_dim());
  k_.resize(layer * size_t(cfg.layers));
  v_.resize(layer * size_t(cfg.layers));
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
  const int64_t row = kv_row();
  const size_t layer_off = size_t(layer) * size_t(capacity_) * size_t(row);
  const std::vector<seqpar::PositionRun>& mine = runs_[size_t(group_.rank())];
  for (size_t i = 0; i < positions.size(); ++i) {
    const int64_t p = positions[i];
    if (p >= prompt_) continue;
    // The row of position p in the shard (the positions sorted).
    const auto run = std::find_if(mine.begin(), mine.end(), [&](const seqpar::PositionRun& x) {
      return x.pos0 <= p && p < x.pos0 + x.rows;
    });
    WF_CHECK(run != mine.end(), "add_prefill: position {} is not in the split of rank {}", p,
             group_.rank());
    const int64_t n = run->row0 + p - run->pos0;
    std::copy_n(k + int64_t(i) * row, row, k_.data() + layer_off + size_t(n * row));
    std::copy_n(v + int64_t(i) * row, row, v_.data() + layer_off + size_t(n * row));
  }
}

void ShardedKvCache::attend(int layer, int64_t pos, const float* q, const float* k, const float* v,
                            float* o) {
  const int H = cfg_.heads, Hkv = cfg_.kv_heads, D = cfg_.head_dim(), P = group_.size();
  if (pos != pos_) {  // a new token: its shard by the balance rule
    pos_ = pos;
    owner_ = next_owner(held_);
    ++held_[size_t(owner_)];
    add_run(runs_[size_t(owner_)], pos, 1);
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
  // This shard's partial result: every position it holds is before the new token (or is it);
  // with the layer's window W, those after pos - W, the last rows of the shard (its positions
  // increase). A shard with none in the window gives O = 0, LSE = -inf, which the merge ignores.
  const int64_t window = cfg_.layer_window(layer);
  const int64_t first = window > 0 ? rows_up_to(runs_[size_t(group_.rank())], pos - window) : 0;
  const int64_t keys = rows_ - first;
  const k::AttnDims one{1, 1, int(keys), H, Hkv, D};
  if (keys > 0) {
    const k::AttnInputs<float> a = cached_token_attention(
        cfg_, q, kc + size_t(first * row), vc + size_t(first * row), capacity_, keys);
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
  const auto t0 = std::chrono::steady_clock::now();
  group_.reduce_scatter_lse(o_send_.data(), lse_send_.data(), o, lse_.data(), 1, 1, H, D,
                            k::lse_merge_rows);
  merge_ms_ +=
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  merge_bytes_ += int64_t(P - 1) * int64_t(H) * (D + 1) * int64_t(sizeof(float));
}

int64_t ShardedKvCache::positions() const {
  int64_t n = 0;
  for (int64_t h : held_) n += h;
  return n;
}

const float* ShardedKvCache::keys(int layer) const {
  return k_.data() + size_t(layer) * size_t(capacity_) * size_t(cfg_.kv_heads * cfg_.head_dim());
}

const float* ShardedKvCache::values(int layer) const {
  return v_.data() + size_t(layer) * size_t(capacity_) * size_t(cfg_.kv_heads * cfg_.head_dim());
}

void ShardedKvCache::append_rows(int layer, const float* k, const float* v, int64_t n) {
  WF_CHECK(rows_ + n <= capacity_, "KV cache shard full ({} positions, {} more)", capacity_, n);
  const int64_t row = kv_row();
  const size_t off = (size_t(layer) * size_t(capacity_) + size_t(rows_)) * size_t(row);
  std::copy_n(k, n * row, k_.data() + off);
  std::copy_n(v, n * row, v_.data() + off);
}

void ShardedKvCache::grow(const std::vector<int64_t>& added) {
  WF_CHECK(added.size() == held_.size(), "grow: {} ranks for {}", added.size(), held_.size());
  int64_t next = positions();  // the new positions go to the ranks in rank order
  for (size_t r = 0; r < added.size(); ++r) {
    add_run(runs_[r], next, added[r]);
    next += added[r];
    held_[r] += added[r];
  }
  rows_ = held_[size_t(group_.rank())];
}

namespace {

// The prefill's attention: the DistAttention of the strategy (one per sliding window of the
// model's layers, chosen by set_window), and each layer's keys and values of this rank's rows
// into the cache.
class PrefillAttention : public AttentionOp {
 public:
  // Collective: the same windows on every rank.
  PrefillAttention(const seqpar::AttnConfig& a, const std::vector<int64_t>& windows,
                   comm::Communicator& group, ShardedKvCache& cache, int layers)
      : windows_(windows), cache_(cache), layers_(layers) {
    for (const int64_t w : windows) {
      seqpar::AttnConfig one = a;
      one.window = w;
      dists_.push_back(std::make_unique<seqpar::DistAttention>(one, group));
      WF_CHECK(dists_.size() == 1 || dists_.back()->local_positions() == positions_,
               "prefill: the window {} changes the layout", w);
      positions_ = dists_.back()->local_positions();
    }
  }
  const std::vector<int64_t>& positions() const { return positions_; }
  void set_window(int64_t window) override {
    const auto at = std::find(windows_.begin(), windows_.end(), window);
    WF_CHECK(at != windows_.end(), "prefill: no attention built for window {}", window);
    cur_ = size_t(at - windows_.begin());
  }
  void forward(const Act& q, const Act& k, const Act& v, const Act& o, float* lse) override {
    WF_CHECK(layer_ < layers_, "prefill: more attention calls than layers");
    if (q.f32) {
      dists_[cur_]->forward(q.f32, k.f32, v.f32, o.f32, lse);
      cache_.add_prefill(layer_++, k.f32, v.f32, positions_);
      return;
    }
    // bf16: the cache keeps the rounded keys and values, widened (exactly) to fp32.
    dists_[cur_]->forward(q.b16, k.b16, v.b16, o.b16, lse);
    const int64_t n = int64_t(positions_.size()) * cache_.kv_row();
    k32_.resize(size_t(n));
    v32_.resize(size_t(n));
    widen_to_fp32(k.b16, k32_.data(), n);
    widen_to_fp32(v.b16, v32_.data(), n);
    cache_.add_prefill(layer_++, k32_.data(), v32_.data(), positions_);
  }
  void backward(const Act&, const Act&, const Act&, const Act&, const float*, const Act&,
                const Act&, const Act&, const Act&) override {
    WF_CHECK(false, "the prefill has no backward");
  }

 private:
  std::vector<int64_t> windows_;
  std::vector<std::unique_ptr<seqpar::DistAttention>> dists_;
  size_t cur_ = 0;
  ShardedKvCache& cache_;
  std::vector<int64_t> positions_;
  std::vector<float> k32_, v32_;
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
  PrefillAttention op(a, layer_window_set(cfg), group, cache, cfg.layers);
  const std::vector<int64_t>& pos = op.positions();
  std::vector<int32_t> tokens(pos.size());
  std::vector<int64_t> last;  // the row of the last prompt position, on the rank that holds it
  for (size_t i = 0; i < pos.size(); ++i) {
    tokens[i] = pos[i] < split.prompt ? prompt[size_t(pos[i])] : 0;  // pads: token 0
    if (pos[i] == split.prompt - 1) last.push_back(int64_t(i));
  }
  Gpt gpt(cfg, 1, pos, Checkpointing::None, op, a.dtype, GptUse::Infer);
  std::copy_n(params, gpt.num_params(), gpt.params());
  // Its logits, from the rank that holds it (the others add zeros).
  const int V = cfg.vocab;
  std::vector<float> logits(size_t(V), 0.0f);
  gpt.forward_logits(tokens.data(), last, logits.data());
  group.all_reduce_sum(logits.data(), V);
  return logits;
}

const char* continue_way_name(ContinueWay way) {
  switch (way) {
    case ContinueWay::Auto:
      return "auto";
    case ContinueWay::PassKv:
      return "pass-kv";
    case ContinueWay::PassQ:
      return "pass-q";
  }
  return "?";
}

ContinueWay parse_continue_way(const std::string& name) {
  for (ContinueWay w : {ContinueWay::Auto, ContinueWay::PassKv, ContinueWay::PassQ})
    if (name == continue_way_name(w)) return w;
  throw UsageError(
      fmt::format("unknown continuation way '{}': give auto, pass-kv or pass-q", name));
}

ContinuePlan plan_continue(const GptConfig& cfg, const std::vector<int64_t>& held, int64_t added,
                           ContinueWay want) {
  WF_USAGE_CHECK(added >= 1, "a continuation needs at least one new token");
  ContinuePlan p;
  p.added = added;
  for (int64_t h : held) p.cached += h;
  const int64_t P = int64_t(held.size()), H = cfg.heads, Hkv = cfg.kv_heads, D = cfg.head_dim();
  const int64_t f = int64_t(sizeof(float)) * cfg.layers * (P - 1);
  p.pass_kv_bytes = f * (p.cached + added) * 2 * Hkv * D;
  p.pass_q_bytes = f * added * (H * D + H * (D + 1));
  p.way = want != ContinueWay::Auto           ? want
          : p.pass_kv_bytes <= p.pass_q_bytes ? ContinueWay::PassKv
                                              : ContinueWay::PassQ;
  const std::vector<int64_t> after = shard_sizes(held, added);
  int64_t next = p.cached;
  for (size_t r = 0; r < held.size(); ++r) {
    p.rows.push_back(after[r] - held[r]);
    p.first.push_back(next);
    next += p.rows.back();
  }
  return p;
}

namespace {

constexpr int kTagKv = 7101, kTagQ = 7102, kTagPartial = 7103;

// The continuation's attention: each layer's new rows of this rank (plan.rows[rank] of them, at
// positions plan.first[rank]...) against every cached position and the new rows before them, by
// pass-KV or pass-Q; then the new keys and values join this rank's shard.
class ContinueAttention : public AttentionOp {
 public:
  ContinueAttention(const GptConfig& cfg, const ContinuePlan& plan, comm::Communicator& group,
                    ShardedKvCache& cache)
      : cfg_(cfg), plan_(plan), group_(group), cache_(cache), cached_(cache.held()) {}
  int64_t sent() const { return sent_; }
  // The window of the coming layer (its own, which layer() takes from the model).
  void set_window(int64_t window) override {
    WF_CHECK(window == this->window(), "continuation: window {} for layer {} of window {}", window,
             layer_, this->window());
  }
  void forward(const Act& q, const Act& k, const Act& v, const Act& o, float* lse) override {
    WF_CHECK(q.f32 && k.f32 && v.f32 && o.f32, "the continuation runs in fp32");
    layer(q.f32, k.f32, v.f32, o.f32, lse);
  }
  void backward(const Act&, const Act&, const Act&, const Act&, const float*, const Act&,
                const Act&, const Act&, const Act&) override {
    WF_CHECK(false, "the continuation has no backward");
  }
  // One layer: q (m, H, D), k, v (m, Hkv, D) of this rank's m new rows; o (m, H, D), lse (H, m).
  void layer(const float* q, const float* k, const float* v, float* o, float* lse) {
    WF_CHECK(layer_ < cfg_.layers, "continuation: more attention calls than layers");
    const int64_t m = plan_.rows[size_t(group_.rank())];
    if (m > 0) k::attn_fwd_init_output(dims(m, 0), o, q_stride(m), lse, stat_stride(m));
    if (plan_.way == ContinueWay::PassQ)
      pass_q(q, k, v, o, lse);
    else
      pass_kv(q, k, v, o, lse);
    cache_.append_rows(layer_++, k, v, m);
  }

 private:
  GptConfig cfg_;
  const ContinuePlan& plan_;
  comm::Communicator& group_;
  ShardedKvCache& cache_;
  std::vector<int64_t> cached_;  // every rank's cached positions (before the continuation)
  int layer_ = 0;
  int64_t sent_ = 0;
  std::vector<float> a_, b_;

  int64_t kv_row() const { return cache_.kv_row(); }
  int64_t window() const { return cfg_.layer_window(layer_); }  // the current layer's (0: none)
  int64_t q_row() const { return int64_t(cfg_.heads) * cfg_.head_dim(); }
  k::AttnDims dims(int64_t rows, int64_t keys) const {
    return {1, int(rows), int(keys), cfg_.heads, cfg_.kv_heads, cfg_.head_dim()};
  }
  k::Strides3 q_stride(int64_t rows) const {
    return k::Strides3::contiguous(int(rows), cfg_.heads, cfg_.head_dim());
  }
  k::Strides2 stat_stride(int64_t rows) const {
    return k::Strides2::contiguous(cfg_.heads, int(rows));
  }
  // Merges into (o, lse) the attention of `rows` queries q at positions q_pos0.. over `keys`
  // keys and values (row stride kv_rows) at positions k_pos0..: masked by position when `causal`
  // (new rows against new rows, and any keys under a sliding window `window` > 0); cached keys
  // precede every new query and need no mask without a window.
  void attend(const float* q, int64_t rows, int64_t q_pos0, const float* kk, const float* vv,
              int64_t keys, int64_t kv_rows, bool causal, int64_t k_pos0, int64_t window, float* o,
              float* lse) {
    if (rows == 0 || keys == 0 || (causal && k_pos0 > q_pos0 + rows - 1) ||
        (window > 0 && k_pos0 + keys - 1 <= q_pos0 - window))
      return;
    k::AttnInputs<float> a;
    a.dims = dims(rows, keys);
    a.q = q;
    a.q_stride = q_stride(rows);
    a.k = kk;
    a.v = vv;
    a.kv_stride = k::Strides3::contiguous(int(kv_rows), cfg_.kv_heads, cfg_.head_dim());
    a.stat_stride = stat_stride(rows);
    a.scale = 1.0f / std::sqrt(float(cfg_.head_dim()));
    a.causal = causal;
    a.window = window;
    a.q_pos0 = q_pos0;
    a.k_pos0 = k_pos0;
    a.accumulate = true;
    k::attn_fwd(k::fwd_params(a, o, lse));
  }
  // Merges the attention of `rows` queries q at positions q_pos0.. over a shard's cached keys and
  // values kk, vv (`cached` rows, row stride kv_rows) at the positions of `runs`, all before every
  // query: one unmasked call without a window; with the layer's window, one call per run of
  // consecutive positions that some query sees, masked by the kernel's window.
  void attend_cached(const float* q, int64_t rows, int64_t q_pos0, const float* kk, const float* vv,
                     int64_t cached, const std::vector<seqpar::PositionRun>& runs, int64_t kv_rows,
                     float* o, float* lse) {
    const int64_t w = window();
    if (w == 0) return attend(q, rows, q_pos0, kk, vv, cached, kv_rows, false, 0, 0, o, lse);
    const int64_t row = kv_row(), seen = q_pos0 - w + 1;  // the first position any query sees
    for (const seqpar::PositionRun& run : runs) {
      const int64_t skip = std::clamp<int64_t>(seen - run.pos0, 0, run.rows);
      attend(q, rows, q_pos0, kk + (run.row0 + skip) * row, vv + (run.row0 + skip) * row,
             run.rows - skip, kv_rows, true, run.pos0 + skip, w, o, lse);
    }
  }
  // A ring step: sends `count` floats of `send` to the next rank and receives `recv_count` into
  // `recv` from the previous one (zero-sized transfers are skipped on both sides).
  std::pair<comm::Request, comm::Request> ring_step(const float* send, int64_t count, float* recv,
                                                    int64_t recv_count, int tag) {
    const int P = group_.size(), r = group_.rank();
    std::pair<comm::Request, comm::Request> req;
    if (count > 0) {
      req.first = group_.isend(send, count, (r + 1) % P, tag);
      sent_ += count * int64_t(sizeof(float));
    }
    if (recv_count > 0) req.second = group_.irecv(recv, recv_count, (r + P - 1) % P, tag);
    return req;
  }

  // pass-KV: the block of rank j, its cached keys then its new keys, then the same of values,
  // circulates on the ring; every rank merges its queries' attention over each block.
  void pass_kv(const float* q, const float* k, const float* v, float* o, float* lse) {
    const int P = group_.size(), r = group_.rank();
    const int64_t m = plan_.rows[size_t(r)], row = kv_row();
    auto block = [&](int j) { return cached_[size_t(j)] + plan_.rows[size_t(j)]; };
    int64_t most = 0;
    for (int j = 0; j < P; ++j) most = std::max(most, block(j));
    a_.resize(size_t(2 * most * row));
    b_.resize(a_.size());
    const int64_t c = cached_[size_t(r)], n = block(r);
    std::copy_n(cache_.keys(layer_), c * row, a_.data());
    std::copy_n(k, m * row, a_.data() + c * row);
    std::copy_n(cache_.values(layer_), c * row, a_.data() + n * row);
    std::copy_n(v, m * row, a_.data() + (n + c) * row);
    float* cur = a_.data();
    float* next = b_.data();
    for (int s = 0; s < P; ++s) {
      const int src = (r - s + P) % P, from = (r - s - 1 + P) % P;
      std::pair<comm::Request, comm::Request> req;
      if (s + 1 < P)
        req = ring_step(cur, 2 * block(src) * row, next, 2 * block(from) * row, kTagKv);
      const int64_t cs = cached_[size_t(src)], bs = block(src);
      attend_cached(q, m, plan_.first[size_t(r)], cur, cur + bs * row, cs, cache_.runs(src), bs, o,
                    lse);
      attend(q, m, plan_.first[size_t(r)], cur + cs * row, cur + (bs + cs) * row,
             plan_.rows[size_t(src)], bs, true, plan_.first[size_t(src)], window(), o, lse);
      req.first.wait();
      req.second.wait();
      std::swap(cur, next);
    }
  }

  // pass-Q: the new queries of rank j circulate; every rank computes their partial attention over
  // its cached shard and its new rows and sends it (output and LSE) back to j, which merges the P
  // partials in rank order.
  void pass_q(const float* q, const float* k, const float* v, float* o, float* lse) {
    const int P = group_.size(), r = group_.rank();
    const int64_t m = plan_.rows[size_t(r)], qr = q_row(), H = cfg_.heads;
    int64_t most = 0;
    for (int j = 0; j < P; ++j) most = std::max(most, plan_.rows[size_t(j)]);
    a_.resize(size_t(most * qr));
    b_.resize(a_.size());
    std::copy_n(q, m * qr, a_.data());
    // parts[j]: the partial result of rank j's queries, (rows_j, H, D) then (H, rows_j); sent to
    // j, or this rank's own. got[j]: the partial of this rank's queries from rank j.
    auto part_size = [&](int j) { return plan_.rows[size_t(j)] * (qr + H); };
    std::vector<std::vector<float>> parts(static_cast<size_t>(P)), got(static_cast<size_t>(P));
    std::vector<comm::Request> sends, recvs;
    for (int j = 0; j < P; ++j) {
      parts[size_t(j)].resize(size_t(part_size(j)));
      if (j == r || m == 0) continue;
      got[size_t(j)].resize(size_t(part_size(r)));
      recvs.push_back(group_.irecv(got[size_t(j)].data(), part_size(r), j, kTagPartial));
    }
    float* cur = a_.data();
    float* next = b_.data();
    const int64_t c = cached_[size_t(r)];
    for (int s = 0; s < P; ++s) {
      const int src = (r - s + P) % P, from = (r - s - 1 + P) % P;
      const int64_t n = plan_.rows[size_t(src)];
      std::pair<comm::Request, comm::Request> req;
      if (s + 1 < P) req = ring_step(cur, n * qr, next, plan_.rows[size_t(from)] * qr, kTagQ);
      if (n > 0) {
        float* po = parts[size_t(src)].data();
        float* pl = po + n * qr;
        k::attn_fwd_init_output(dims(n, 0), po, q_stride(n), pl, stat_stride(n));
        attend_cached(cur, n, plan_.first[size_t(src)], cache_.keys(layer_), cache_.values(layer_),
                      c, cache_.runs(r), cache_capacity(), po, pl);
        attend(cur, n, plan_.first[size_t(src)], k, v, m, m, true, plan_.first[size_t(r)], window(),
               po, pl);
        if (src != r) {
          sends.push_back(group_.isend(po, part_size(src), src, kTagPartial));
          sent_ += part_size(src) * int64_t(sizeof(float));
        }
      }
      req.first.wait();
      req.second.wait();
      std::swap(cur, next);
    }
    for (comm::Request& q_req : recvs) q_req.wait();
    for (comm::Request& q_req : sends) q_req.wait();
    for (int j = 0; j < P && m > 0; ++j) {
      const float* po = j == r ? parts[size_t(r)].data() : got[size_t(j)].data();
      k::lse_merge(dims(m, 0), o, q_stride(m), lse, stat_stride(m), po, q_stride(m), po + m * qr,
                   stat_stride(m));
    }
  }
  int64_t cache_capacity() const { return cache_.capacity(); }
};

}  // namespace

std::vector<float> continue_prefill(const GptConfig& cfg, const float* params,
                                    const std::vector<int32_t>& tokens, const ContinuePlan& plan,
                                    comm::Communicator& group, ShardedKvCache& cache,
                                    int64_t* sent) {
  const int P = group.size(), r = group.rank();
  WF_CHECK(int64_t(tokens.size()) == plan.added && int64_t(plan.rows.size()) == P &&
               plan.cached == cache.positions(),
           "continue_prefill: a plan of {} tokens after {} positions for {} tokens after {}",
           plan.added, plan.cached, tokens.size(), cache.positions());
  ContinueAttention op(cfg, plan, group, cache);
  const int64_t m = plan.rows[size_t(r)], first = plan.first[size_t(r)];
  const int V = cfg.vocab;
  std::vector<float> logits(size_t(V), 0.0f);
  if (m > 0) {
    std::vector<int64_t> pos(static_cast<size_t>(m));
    std::vector<int32_t> mine(static_cast<size_t>(m));
    for (int64_t i = 0; i < m; ++i) {
      pos[size_t(i)] = first + i;
      mine[size_t(i)] = tokens[size_t(first + i - plan.cached)];
    }
    Gpt gpt(cfg, 1, pos, Checkpointing::None, op, Dtype::fp32, GptUse::Infer);
    std::copy_n(params, gpt.num_params(), gpt.params());
    // The logits of the last new position, on the rank that holds it.
    std::vector<int64_t> last;
    if (first + m == plan.cached + plan.added) last.push_back(m - 1);
    gpt.forward_logits(mine.data(), last, logits.data());
  } else {
    // No new rows here: the ring still passes through this rank, layer by layer.
    for (int l = 0; l < cfg.layers; ++l) op.layer(nullptr, nullptr, nullptr, nullptr, nullptr);
  }
  cache.grow(plan.rows);
  group.all_reduce_sum(logits.data(), V);
  if (sent) *sent = op.sent();
  return logits;
}

int64_t prefill_chunk_unit(const GptConfig& cfg, const seqpar::AttnConfig& attn, int P) {
  return int64_t(P) * (seqpar::uses_zigzag_layout(prefill_attn_config(cfg, attn, P)) ? 2 : 1);
}

double continue_scratch_bytes(const GptConfig& cfg, int P, int64_t added) {
  const double H = cfg.heads, Hkv = cfg.kv_heads, D = cfg.head_dim(), qr = H * D;
  const double m = double((added + P - 1) / P);
  // pass-Q: the circulating queries (two buffers), every rank's partials (output and LSE) and
  // the P - 1 received for this rank's queries.
  const double pass_q = 4.0 * (2.0 * m * qr + (double(added) + double(P - 1) * m) * (qr + H));
  if (P == 1) return pass_q;  // one rank: pass-Q (see chunked_prefill)
  // pass-KV runs while (N + M) 2 Hkv D <= M (2 H D + H): its blocks (two buffers of a rank's
  // cached and new keys and values) hold at most that many positions over P, and a rounding.
  const double positions = double(added) * (2.0 * qr + H) / (2.0 * Hkv * D);
  const double pass_kv = 4.0 * 2.0 * 2.0 * (std::ceil(positions / P) + 2.0) * Hkv * D;
  return std::max(pass_q, pass_kv);
}

double chunked_memory_bytes(const GptConfig& cfg, const seqpar::AttnConfig& attn, int P,
                            int64_t chunk, int64_t turn_rows, int64_t cache_rows, bool every_rank) {
  const int64_t rows = std::max(chunk, (turn_rows + P - 1) / P * P);
  const double scratch = std::max(prefill_scratch_bytes(cfg, attn, P, chunk, every_rank),
                                  continue_scratch_bytes(cfg, P, chunk));
  return generate_memory_bytes(cfg, P, rows, cache_rows, scratch);
}

int64_t choose_prefill_chunk(const GptConfig& cfg, const seqpar::AttnConfig& attn, int P,
                             int64_t prompt, int64_t turn_rows, int64_t cache_rows, double limit) {
  const int64_t unit = prefill_chunk_unit(cfg, attn, P);
  auto fits = [&](int64_t units) {
    return chunked_memory_bytes(cfg, attn, P, units * unit, turn_rows, cache_rows) <= limit;
  };
  // The chunks are shorter than the prompt: 1..(prompt - 1) / unit units.
  int64_t lo = 1, hi = (prompt - 1) / unit + 1;  // fits(lo); the answer is in [lo, hi)
  if (hi <= lo || !fits(lo)) return 0;
  while (hi - lo > 1) {
    const int64_t mid = lo + (hi - lo) / 2;
    (fits(mid) ? lo : hi) = mid;
  }
  // As many chunks, of nearly equal length.
  const int64_t chunks = (prompt + lo * unit - 1) / (lo * unit);
  const int64_t even = ((prompt + chunks - 1) / chunks + unit - 1) / unit;
  return (fits(even) ? even : lo) * unit;
}

std::vector<float> chunked_prefill(const GptConfig& cfg, const float* params,
                                   const std::vector<int32_t>& prompt, int64_t chunk,
                                   const seqpar::AttnConfig& attn, comm::Communicator& group,
                                   ShardedKvCache& cache, PrefillChunks* done) {
  const int64_t L = int64_t(prompt.size());
  PrefillChunks stats;
  if (chunk <= 0 || chunk >= L) {
    stats.chunk_tokens = L;
    if (done) *done = stats;
    return sharded_prefill(cfg, params, prompt, attn, group, cache);
  }
  WF_CHECK(attn.dtype == Dtype::fp32, "a prefill in chunks runs in fp32");
  stats.chunk_tokens = chunk;
  std::vector<float> logits =
      sharded_prefill(cfg, params, std::vector<int32_t>(prompt.begin(), prompt.begin() + chunk),
                      attn, group, cache);
  // The later chunks against the cache of the earlier ones; on one rank both ways send nothing
  // and pass-Q, which keeps no copy of the cache, runs.
  const ContinueWay way = group.size() == 1 ? ContinueWay::PassQ : ContinueWay::Auto;
  for (int64_t at = chunk; at < L; at += chunk) {
    const int64_t n = std::min(chunk, L - at);
    const std::vector<int32_t> tokens(prompt.begin() + at, prompt.begin() + at + n);
    const ContinuePlan plan = plan_continue(cfg, cache.held(), n, way);
    int64_t sent = 0;
    logits = continue_prefill(cfg, params, tokens, plan, group, cache, &sent);
    ++stats.chunks;
    ++(plan.way == ContinueWay::PassKv ? stats.pass_kv : stats.pass_q);
    stats.sent_bytes += sent;
  }
  if (done) *done = stats;
  return logits;
}

}  // namespace wallfacer::model
