// train.packing = "documents" for the GPT: the documents of a window (a document ends after each
// end-of-text token), and a GPT step whose attention masks at them against each document trained
// as a sequence of its own (the same global positions for the rotary embedding), and the config
// key's errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <numeric>
#include <vector>

#include "wallfacer/core/error.h"
#include "wallfacer/core/rng.h"
#include "wallfacer/model/gpt.h"
#include "wallfacer/model/local_attention.h"
#include "wallfacer/train/config.h"
#include "wallfacer/train/data.h"

namespace wallfacer {
namespace {

using model::Checkpointing;
using model::Gpt;
using model::GptConfig;
using model::LocalAttention;

TEST(GptPacking, DocumentsEndAfterEachEndOfText) {
  const auto dir = std::filesystem::path(WALLFACER_BINARY_DIR) / "test_tmp" / "packing";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  // 'a' everywhere, end-of-text at 3, 4, 10 and 19.
  std::vector<uint16_t> toks(20, uint16_t('a'));
  for (int i : {3, 4, 10, 19}) toks[size_t(i)] = train::kEndOfText;
  const std::string path = (dir / "train.bin").string();
  train::write_shard(path, toks, train::kByteVocab);
  train::TokenShard shard(path);
  train::SequenceLoader loader(shard, 8, 1);
  EXPECT_EQ(loader.documents(0), (std::vector<int64_t>{4, 1, 3}));  // 0..7: ends at 3, 4
  EXPECT_EQ(loader.documents(3), (std::vector<int64_t>{1, 1, 6}));  // 3..10: ends at 3, 4, 10
  EXPECT_EQ(loader.documents(11), (std::vector<int64_t>{8}));       // 11..18: none
  EXPECT_EQ(loader.documents(5), (std::vector<int64_t>{6, 2}));     // 5..12: ends at 10
}

GptConfig small_config() {
  GptConfig cfg;
  cfg.vocab = train::kByteVocab;
  cfg.layers = 2;
  cfg.dim = 32;
  cfg.heads = 4;
  cfg.kv_heads = 2;
  cfg.mlp_ratio = 2;
  return cfg;
}

std::vector<int64_t> iota_positions(int64_t first, int64_t n) {
  std::vector<int64_t> p(static_cast<size_t>(n));
  std::iota(p.begin(), p.end(), first);
  return p;
}

struct StepResult {
  double loss = 0;
  std::vector<float> losses;  // (B, S)
  std::vector<float> grads;
};

// One forward and backward of a batch of B sequences of S tokens with the given documents (an
// empty list: no set_documents call).
StepResult packed_step(const GptConfig& cfg, int B, int S, Checkpointing ckpt,
                       const std::vector<int32_t>& tokens, const std::vector<int32_t>& targets,
                       const std::vector<std::vector<int64_t>>& docs) {
  LocalAttention attn(B, S, cfg.heads, cfg.kv_heads, cfg.head_dim());
  if (!docs.empty()) attn.set_documents(docs);
  Gpt gpt(cfg, B, iota_positions(0, S), ckpt, attn);
  model::gpt_init_params(cfg, gpt.params(), 11);
  StepResult r;
  r.loss = gpt.forward(tokens.data(), targets.data());
  r.losses.assign(gpt.losses(), gpt.losses() + int64_t(B) * S);
  gpt.zero_grads();
  gpt.backward(1.0f);
  r.grads.assign(gpt.grads(), gpt.grads() + gpt.num_params());
  return r;
}

// The reference: every document of every sequence run as a batch of its own (one sequence of its
// length, at its global positions), the losses and gradients summed.
StepResult separate_documents(const GptConfig& cfg, int S, const std::vector<int32_t>& tokens,
                              const std::vector<int32_t>& targets,
                              const std::vector<std::vector<int64_t>>& docs) {
  StepResult r;
  r.losses.assign(tokens.size(), 0.0f);
  std::vector<double> grads;
  for (size_t b = 0; b < docs.size(); ++b) {
    int64_t a = 0;
    for (int64_t n : docs[b]) {
      LocalAttention attn(1, int(n), cfg.heads, cfg.kv_heads, cfg.head_dim());
      Gpt gpt(cfg, 1, iota_positions(a, n), Checkpointing::None, attn);
      model::gpt_init_params(cfg, gpt.params(), 11);
      const size_t off = b * size_t(S) + size_t(a);
      r.loss += gpt.forward(tokens.data() + off, targets.data() + off);
      std::copy(gpt.losses(), gpt.losses() + n, r.losses.begin() + ptrdiff_t(off));
      gpt.zero_grads();
      gpt.backward(1.0f);
      grads.resize(size_t(gpt.num_params()), 0.0);
      for (size_t i = 0; i < grads.size(); ++i) grads[i] += gpt.grads()[i];
      a += n;
    }
  }
  r.grads.assign(grads.begin(), grads.end());
  return r;
}

// got equals want to fp32 rounding: the loss, every token's loss and every gradient.
void expect_same_step(const StepResult& got, const StepResult& want) {
  EXPECT_NEAR(got.loss, want.loss, 1e-6 * std::abs(want.loss));
  for (size_t i = 0; i < want.losses.size(); ++i)
    ASSERT_NEAR(got.losses[i], want.losses[i], 1e-5 * std::abs(want.losses[i]) + 1e-6) << i;
  float scale = 0;
  for (float g : want.grads) scale = std::max(scale, std::abs(g));
  float worst = 0;
  for (size_t i = 0; i < want.grads.size(); ++i)
    worst = std::max(worst, std::abs(got.grads[i] - want.grads[i]));
  EXPECT_LE(worst, 1e-5f * scale) << "largest gradient " << scale;
}

TEST(GptPacking, DocumentsTrainAsSeparateSequences) {
  const GptConfig cfg = small_config();
  const int B = 2, S = 48;
  // Sequence 0: end-of-text at 9 and 30; sequence 1: at 0 and 46 (one-token documents).
  const std::vector<std::vector<int64_t>> docs = {{10, 21, 17}, {1, 46, 1}};
  std::vector<int32_t> tokens(size_t(B) * S), targets(tokens.size());
  Rng rng(5);
  for (auto& t : tokens) t = int32_t(rng.next_u64() % 256);
  for (auto& t : targets) t = int32_t(rng.next_u64() % 256);
  for (size_t b = 0; b < docs.size(); ++b) {
    int64_t end = 0;
    for (int64_t n : docs[b]) {
      end += n;
      if (end < S) tokens[b * S + size_t(end - 1)] = train::kEndOfText;
    }
  }
  const StepResult want = separate_documents(cfg, S, tokens, targets, docs);
  for (auto ckpt : {Checkpointing::None, Checkpointing::Attention}) {
    expect_same_step(packed_step(cfg, B, S, ckpt, tokens, targets, docs), want);
  }
  // Without the documents the same batch is another computation (at this initialisation the
  // attention is near uniform, so the losses move little, but far more than the bound above).
  const StepResult whole = packed_step(cfg, B, S, Checkpointing::None, tokens, targets, {});
  EXPECT_GT(std::abs(whole.loss - want.loss), 1e-5 * std::abs(want.loss));
}

TEST(GptPacking, OneDocumentIsBitIdenticalToNoDocuments) {
  const GptConfig cfg = small_config();
  const int B = 2, S = 40;
  std::vector<int32_t> tokens(size_t(B) * S), targets(tokens.size());
  Rng rng(9);
  for (auto& t : tokens) t = int32_t(rng.next_u64() % 256);
  for (auto& t : targets) t = int32_t(rng.next_u64() % 256);
  const StepResult none = packed_step(cfg, B, S, Checkpointing::None, tokens, targets, {});
  const StepResult one = packed_step(cfg, B, S, Checkpointing::None, tokens, targets, {{S}, {}});
  EXPECT_EQ(none.loss, one.loss);
  EXPECT_EQ(0, std::memcmp(none.grads.data(), one.grads.data(), none.grads.size() * 4));
  // One sequence with documents and one without: the second keeps its losses.
  const StepResult mixed =
      packed_step(cfg, B, S, Checkpointing::None, tokens, targets, {{20, 20}, {S}});
  EXPECT_EQ(0, std::memcmp(none.losses.data() + S, mixed.losses.data() + S, size_t(S) * 4));
}

// model.window = 1: every token attends to itself only, so each token trains as a sequence of one
// token of its own (at its global position), with or without attention checkpointing; window 1 on
// layer 0 only (model.window_layers) is another computation, as is no window.
TEST(GptPacking, WindowOfOneTrainsEachTokenAlone) {
  GptConfig cfg = small_config();
  const int B = 2, S = 24;
  std::vector<int32_t> tokens(size_t(B) * S), targets(tokens.size());
  Rng rng(13);
  for (auto& t : tokens) t = int32_t(rng.next_u64() % 256);
  for (auto& t : targets) t = int32_t(rng.next_u64() % 256);
  const std::vector<std::vector<int64_t>> ones(size_t(B), std::vector<int64_t>(size_t(S), 1));
  const StepResult want = separate_documents(cfg, S, tokens, targets, ones);
  cfg.window = 1;
  for (auto ckpt : {Checkpointing::None, Checkpointing::Attention}) {
    expect_same_step(packed_step(cfg, B, S, ckpt, tokens, targets, {}), want);
  }
  cfg.window_layers = {0};
  const StepResult first = packed_step(cfg, B, S, Checkpointing::None, tokens, targets, {});
  cfg.window = 0, cfg.window_layers.clear();
  const StepResult none = packed_step(cfg, B, S, Checkpointing::None, tokens, targets, {});
  EXPECT_GT(std::abs(first.loss - want.loss), 1e-5 * std::abs(want.loss));
  EXPECT_GT(std::abs(first.loss - none.loss), 1e-5 * std::abs(none.loss));
}

// model.window and model.window_layers: which layers are windowed, and what they refuse.
TEST(GptPacking, WindowLayers) {
  GptConfig cfg = small_config();
  cfg.layers = 3;
  EXPECT_EQ(cfg.layer_window(0), 0);
  cfg.window = 8;
  for (int l = 0; l < 3; ++l) EXPECT_EQ(cfg.layer_window(l), 8);
  cfg.window_layers = {0, 2};
  EXPECT_EQ(cfg.layer_window(0), 8);
  EXPECT_EQ(cfg.layer_window(1), 0);
  EXPECT_EQ(cfg.layer_window(2), 8);
  EXPECT_NO_THROW(cfg.validate());
  cfg.window_layers = {3};
  EXPECT_THROW(cfg.validate(), UsageError);
  cfg.window_layers = {-1};
  EXPECT_THROW(cfg.validate(), UsageError);
  cfg.window_layers = {1};
  cfg.window = 0;
  EXPECT_THROW(cfg.validate(), UsageError);
  cfg.window = -4;
  cfg.window_layers.clear();
  EXPECT_THROW(cfg.validate(), UsageError);
}

// Gpt::set_positions gives every row its own rotary angles: a batch of two sequences whose rows
// lie at different global positions equals each sequence run alone, built with its positions;
// the same positions for both equal the model built with them, bit for bit.
TEST(GptPacking, SetPositionsRotatesEachRowByItsPosition) {
  const GptConfig cfg = small_config();
  const int T = 24;
  const std::vector<int64_t> p0 = {40, 41, 42, 43, 7,  8,  9,  10, 11, 12, 13, 14,
                                   60, 61, 62, 63, 64, 65, 66, 67, 0,  1,  2,  3};
  std::vector<int64_t> p1 = iota_positions(100, T);
  std::vector<int32_t> tokens(size_t(2) * T), targets(tokens.size());
  Rng rng(3);
  for (auto& t : tokens) t = int32_t(rng.next_u64() % 256);
  for (auto& t : targets) t = int32_t(rng.next_u64() % 256);
  auto run = [&](int B, const std::vector<int64_t>& built, const std::vector<int64_t>* rows,
                 size_t first) {
    LocalAttention attn(B, T, cfg.heads, cfg.kv_heads, cfg.head_dim());
    Gpt gpt(cfg, B, built, Checkpointing::None, attn);
    model::gpt_init_params(cfg, gpt.params(), 11);
    if (rows) gpt.set_positions(*rows);
    StepResult r;
    r.loss = gpt.forward(tokens.data() + first, targets.data() + first);
    r.losses.assign(gpt.losses(), gpt.losses() + int64_t(B) * T);
    gpt.zero_grads();
    gpt.backward(1.0f);
    r.grads.assign(gpt.grads(), gpt.grads() + gpt.num_params());
    return r;
  };
  std::vector<int64_t> both = p0;
  both.insert(both.end(), p1.begin(), p1.end());
  const StepResult got = run(2, iota_positions(0, T), &both, 0);
  const StepResult a = run(1, p0, nullptr, 0), b = run(1, p1, nullptr, size_t(T));
  for (int t = 0; t < T; ++t) {
    EXPECT_NEAR(got.losses[size_t(t)], a.losses[size_t(t)], 1e-6 * std::abs(a.losses[size_t(t)]));
    EXPECT_NEAR(got.losses[size_t(T + t)], b.losses[size_t(t)],
                1e-6 * std::abs(b.losses[size_t(t)]));
  }
  float scale = 0, worst = 0;
  for (size_t i = 0; i < got.grads.size(); ++i) {
    const float want = a.grads[i] + b.grads[i];
    scale = std::max(scale, std::abs(want));
    worst = std::max(worst, std::abs(got.grads[i] - want));
  }
  EXPECT_LE(worst, 1e-5f * scale);
  // Without set_positions the rows would rotate by 0..T-1: another result. The loss barely
  // depends on the positions at this initialisation (attention is nearly uniform: its change is
  // within a few ulps of the summed loss on some CPUs), the gradient of the q and k rows does, by
  // far more than the bound the equal results above are held to.
  const StepResult unset = run(2, iota_positions(0, T), nullptr, 0);
  const auto qk_grad_change = [&](const StepResult& x) {
    const int64_t qk = int64_t(cfg.heads + cfg.kv_heads) * cfg.head_dim() * cfg.dim;
    float change = 0, size = 0;
    for (const auto& t : model::gpt_param_tensors(cfg)) {
      if (!t.name.ends_with("qkv_w")) continue;  // rows: q heads, k heads, then v heads
      for (int64_t i = t.offset; i < t.offset + qk; ++i) {
        size = std::max(size, std::abs(got.grads[size_t(i)]));
        change = std::max(change, std::abs(x.grads[size_t(i)] - got.grads[size_t(i)]));
      }
    }
    return change / size;
  };
  EXPECT_GT(qk_grad_change(unset), 1e-2f);  // about 1.5
  // The same positions for every sequence: bit-identical to the model built with them.
  std::vector<int64_t> twice = p0;
  twice.insert(twice.end(), p0.begin(), p0.end());
  const StepResult built = run(2, p0, nullptr, 0), set = run(2, iota_positions(0, T), &twice, 0);
  EXPECT_EQ(built.loss, set.loss);
  EXPECT_EQ(0, std::memcmp(built.grads.data(), set.grads.data(), built.grads.size() * 4));
}

TEST(GptPacking, ConfigKey) {
  auto usage_error = [](auto&& f) -> std::string {
    try {
      f();
    } catch (const UsageError& e) {
      return e.what();
    }
    return "";
  };
  train::TrainConfig c;
  EXPECT_EQ(c.packing, train::Packing::None);
  c.set("train.packing=documents");
  EXPECT_NO_THROW(c.validate(1));
  EXPECT_EQ(train::TrainConfig::from_toml(c.to_toml(), "t").packing, train::Packing::Documents);
  EXPECT_FALSE(train::TrainConfig::is_shape_key("train.packing"));
  // A bad value is refused when it is set (the config keeps its value).
  EXPECT_NE(usage_error([&] {
              c.set("train.packing=docs");
            }).find("train.packing must be 'none' or 'documents' (got 'docs')"),
            std::string::npos);
  EXPECT_EQ(c.packing, train::Packing::Documents);
  // The DiT packs clips (test_dit_packing.cpp).
  auto d = train::TrainConfig::from_toml(
      "[model]\nkind = \"dit\"\n[train]\npacking = \"documents\"\n", "t");
  EXPECT_NO_THROW(d.validate(1));
}

}  // namespace
}  // namespace wallfacer
