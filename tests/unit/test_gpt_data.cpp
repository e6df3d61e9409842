// Token shards and the sequence loader: every rank gets exactly the corpus tokens its layout gives
// it (a synthetic shard whose tokens encode their own position), and damaged shards are refused.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>

#include "wallfacer/core/error.h"
#include "wallfacer/seqpar/attention.h"
#include "wallfacer/train/data.h"

namespace wallfacer::train {
namespace {

std::string temp_dir(const std::string& name) {
  const auto d = std::filesystem::path(WALLFACER_BINARY_DIR) / "test_tmp" / name;
  std::filesystem::remove_all(d);
  std::filesystem::create_directories(d);
  return d.string();
}

TEST(GptData, LoaderFollowsTheLayout) {
  const std::string dir = temp_dir("loader");
  const int64_t corpus = 60000;  // token i has value i % 65536: its own position
  std::vector<uint16_t> toks(static_cast<size_t>(corpus));
  for (int64_t i = 0; i < corpus; ++i) toks[size_t(i)] = uint16_t(i);
  write_shard(dir + "/train.bin", toks, 65536);
  TokenShard shard(dir + "/train.bin");
  ASSERT_EQ(shard.size(), corpus);
  const int64_t S = 64;
  SequenceLoader loader(shard, S, 3);
  for (auto strategy : {seqpar::Strategy::Ring, seqpar::Strategy::Zigzag, seqpar::Strategy::Ulysses,
                        seqpar::Strategy::WallFacer}) {
    seqpar::AttnConfig a;
    a.strategy = strategy;
    a.teams = strategy == seqpar::Strategy::WallFacer ? 2 : 1;
    a.seq = S;
    a.heads = a.kv_heads = 4;
    a.head_dim = 8;
    a.causal = true;
    const int P = 4, nb = 2;
    for (int64_t step : {0, 5}) {
      std::set<int64_t> seen[nb];
      for (int r = 0; r < P; ++r) {
        const auto pos = seqpar::local_positions(a, P, r);
        ASSERT_EQ(int64_t(pos.size()), S / P);
        std::vector<int32_t> tk(pos.size() * nb), tg(pos.size() * nb);
        loader.load(step, 1, nb, pos, tk.data(), tg.data());
        for (int b = 0; b < nb; ++b) {
          const int64_t start = loader.start(step, 1 + b);
          ASSERT_GE(start, 0);
          ASSERT_LE(start + S, corpus - 1);
          for (size_t i = 0; i < pos.size(); ++i) {
            // the token at global position pos[i] of the sequence, and the next one as target
            EXPECT_EQ(tk[size_t(b) * pos.size() + i], start + pos[i]);
            EXPECT_EQ(tg[size_t(b) * pos.size() + i], start + pos[i] + 1);
            seen[b].insert(pos[i]);
          }
        }
      }
      for (auto& s : seen) EXPECT_EQ(int64_t(s.size()), S) << "positions not covered exactly once";
    }
  }
  EXPECT_NE(loader.start(0, 0), loader.start(1, 0));
}

TEST(GptData, ShardRoundTripAndDamage) {
  const std::string dir = temp_dir("shard");
  const std::string text = "In the beginning\n";
  std::ofstream(dir + "/a.txt") << text;
  std::ofstream(dir + "/b.txt") << std::string(300, 'x');
  const auto st = prepare({dir + "/a.txt", dir + "/b.txt"}, dir + "/out", 0.1);
  EXPECT_EQ(st.train_tokens + st.val_tokens, int64_t(text.size() + 1 + 300 + 1));
  TokenShard tr(dir + "/out/train.bin");
  EXPECT_EQ(tr.size(), st.train_tokens);
  EXPECT_EQ(tr.vocab(), kByteVocab);
  EXPECT_EQ(tr[0], 'I');
  EXPECT_EQ(tr[int64_t(text.size())], kEndOfText);  // after the first file
  EXPECT_EQ(std::filesystem::file_size(dir + "/out/train.bin"), 64 + 2 * uint64_t(tr.size()));
  EXPECT_FALSE(std::filesystem::exists(dir + "/out/train.bin.tmp"));

  std::filesystem::copy_file(dir + "/out/train.bin", dir + "/bad.bin");
  std::filesystem::resize_file(dir + "/bad.bin", 64 + 10);
  EXPECT_THROW(TokenShard(dir + "/bad.bin"), UsageError);
  std::filesystem::copy_file(dir + "/out/train.bin", dir + "/flip.bin",
                             std::filesystem::copy_options::overwrite_existing);
  {
    std::fstream f(dir + "/flip.bin", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(64 + 4);
    f.put('Z');
  }
  try {
    TokenShard s(dir + "/flip.bin");
    FAIL() << "corrupt shard accepted";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("checksum"), std::string::npos) << e.what();
  }
}

// A shard's bytes by hand (the layout in data.h), in 2-byte aligned memory.
std::vector<uint16_t> shard_words(const std::vector<uint16_t>& tokens, uint32_t vocab) {
  uint64_t h = 0xcbf29ce484222325ULL;  // FNV-1a 64 of the token bytes
  for (uint16_t t : tokens)
    for (int b = 0; b < 2; ++b) h = (h ^ ((t >> (8 * b)) & 0xff)) * 0x100000001b3ULL;
  std::string bytes = "WFTOKENS";
  auto put = [&](uint64_t v, int n) {
    for (int i = 0; i < n; ++i) bytes += char((v >> (8 * i)) & 0xff);
  };
  put(1, 4), put(64, 4), put(2, 4), put(vocab, 4), put(tokens.size(), 8), put(h, 8);
  bytes.resize(64, '\0');
  for (uint16_t t : tokens) put(t, 2);
  std::vector<uint16_t> words(bytes.size() / 2);
  std::memcpy(words.data(), bytes.data(), bytes.size());
  return words;
}

TEST(GptData, CheckShardFromBytes) {
  const auto words = shard_words({5, 0, 6, 5}, 7);
  const ShardView v = check_shard(words.data(), words.size() * 2, "w.bin");
  EXPECT_EQ(v.size, 4);
  EXPECT_EQ(v.vocab, 7);
  EXPECT_EQ(v.tokens[2], 6);
  EXPECT_THROW(check_shard(words.data(), words.size() * 2 - 2, "w.bin"), UsageError);
  EXPECT_THROW(check_shard(words.data(), 10, "w.bin"), UsageError);
  const auto outside = shard_words({5, 7}, 7);
  EXPECT_THROW(check_shard(outside.data(), outside.size() * 2, "w.bin"), UsageError);
  // Not 2-byte aligned: refused before any token is read.
  std::vector<char> odd(words.size() * 2 + 1);
  std::memcpy(odd.data() + 1, words.data(), words.size() * 2);
  EXPECT_THROW(check_shard(odd.data() + 1, words.size() * 2, "w.bin"), Error);
}

}  // namespace
}  // namespace wallfacer::train
