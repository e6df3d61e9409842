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
  for (const seqpar::StrategyTraits& t : seqpar::strategies()) {
    seqpar::AttnConfig a;
    a.strategy = t.id;
    a.teams = t.has_teams ? 2 : 1;
    a.inner = t.has_inner ? 2 : 0;
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

// A shard's bytes by hand (the layout in data.h): version 1 (u16 ids) or 2 (i32 ids, with its
// end-of-text id), in 4-byte aligned memory.
struct ShardBytes {
  std::vector<int32_t> words;
  size_t size = 0;
  const void* data() const { return words.data(); }
};
ShardBytes shard_bytes(const std::vector<int64_t>& tokens, uint32_t vocab, uint32_t version = 1,
                       uint32_t eos = 0) {
  const int width = version == 1 ? 2 : 4;
  std::string data;
  auto put = [](std::string& out, uint64_t v, int n) {
    for (int i = 0; i < n; ++i) out += char((v >> (8 * i)) & 0xff);
  };
  for (int64_t t : tokens) put(data, uint64_t(t), width);
  uint64_t h = 0xcbf29ce484222325ULL;  // FNV-1a 64 of the token bytes
  for (char c : data) h = (h ^ uint8_t(c)) * 0x100000001b3ULL;
  std::string bytes = "WFTOKENS";
  put(bytes, version, 4), put(bytes, 64, 4), put(bytes, uint64_t(width), 4), put(bytes, vocab, 4);
  put(bytes, tokens.size(), 8), put(bytes, h, 8), put(bytes, eos, 4);
  bytes.resize(64, '\0');
  bytes += data;
  ShardBytes out;
  out.size = bytes.size();
  out.words.resize((bytes.size() + 3) / 4);
  std::memcpy(out.words.data(), bytes.data(), bytes.size());
  return out;
}

TEST(GptData, CheckShardFromBytes) {
  const auto words = shard_bytes({5, 0, 6, 5}, 7);
  const ShardView v = check_shard(words.data(), words.size, "w.bin");
  EXPECT_EQ(v.size, 4);
  EXPECT_EQ(v.vocab, 7);
  EXPECT_EQ(v[2], 6);
  EXPECT_EQ(v.eos, kEndOfText);
  EXPECT_THROW(check_shard(words.data(), words.size - 2, "w.bin"), UsageError);
  EXPECT_THROW(check_shard(words.data(), 10, "w.bin"), UsageError);
  const auto outside = shard_bytes({5, 7}, 7);
  EXPECT_THROW(check_shard(outside.data(), outside.size, "w.bin"), UsageError);
  // Not 4-byte aligned: refused before any token is read.
  std::vector<int32_t> odd(words.words.size() + 1);
  char* at = reinterpret_cast<char*>(odd.data()) + 2;
  std::memcpy(at, words.data(), words.size);
  EXPECT_THROW(check_shard(at, words.size, "w.bin"), Error);
}

// The message of the UsageError check_shard throws on `b`, or "" (a failure) when it accepts it.
std::string refusal(const ShardBytes& b) {
  try {
    check_shard(b.data(), b.size, "w.bin");
  } catch (const UsageError& e) {
    return e.what();
  }
  ADD_FAILURE() << "accepted";
  return "";
}

TEST(GptData, Version2ShardsHoldThirtyOneBitIds) {
  const int64_t big = (int64_t(1) << 31) - 1;
  const auto b = shard_bytes({0, 70000, big, 3}, uint32_t(big + 1), 2, 3);
  const ShardView v = check_shard(b.data(), b.size, "w.bin");
  EXPECT_EQ(v.size, 4);
  EXPECT_EQ(v.vocab, big + 1);
  EXPECT_EQ(v.eos, 3);
  EXPECT_EQ(v[1], 70000);
  EXPECT_EQ(v[2], big);
  EXPECT_NE(refusal(shard_bytes({0, 5}, 5, 2, 1)).find("token 5 at position 1 is outside"),
            std::string::npos);
  EXPECT_NE(refusal(shard_bytes({0, -1}, 5, 2, 1)).find("token -1 at position 1"),
            std::string::npos);
  EXPECT_NE(refusal(shard_bytes({0, 1}, 5, 2, 5)).find("end-of-text id 5 is outside"),
            std::string::npos);
  EXPECT_NE(refusal(shard_bytes({0}, uint32_t(big) + 2, 2, 0)).find("vocabulary 2147483649"),
            std::string::npos);
  EXPECT_NE(refusal(shard_bytes({0}, 5, 3, 0)).find("version 3 (expected 1 or 2)"),
            std::string::npos);
  ShardBytes cut = b;
  cut.size -= 4;
  EXPECT_NE(refusal(cut).find("truncated"), std::string::npos);
  ShardBytes flipped = b;
  reinterpret_cast<char*>(flipped.words.data())[64 + 5] ^= 1;
  EXPECT_NE(refusal(flipped).find("checksum"), std::string::npos);
}

TEST(GptData, WritesVersion2ShardsAndFindsTheirDocuments) {
  const std::string dir = temp_dir("shard32");
  // Ids beyond 16 bits; end-of-text 100000 ends documents of lengths 3, 2, 4, ...
  std::vector<int32_t> toks;
  for (int i = 0; i < 40; ++i) toks.push_back(i % 3 == 2 ? 100000 : 70000 + i);
  write_shard(dir + "/train.bin", toks, 100001, 100000);
  EXPECT_EQ(std::filesystem::file_size(dir + "/train.bin"), 64 + 4 * toks.size());
  const TokenShard shard(dir + "/train.bin");
  EXPECT_EQ(shard.size(), 40);
  EXPECT_EQ(shard.vocab(), 100001);
  EXPECT_EQ(shard.eos(), 100000);
  for (int64_t i = 0; i < shard.size(); ++i) ASSERT_EQ(shard[i], toks[size_t(i)]);
  const SequenceLoader loader(shard, 8, 1);
  // The window [1, 9): ids 70001, eos | 70003 70004 eos | 70006 70007 eos.
  EXPECT_EQ(loader.documents(1), (std::vector<int64_t>{2, 3, 3}));
  std::vector<int64_t> positions = {0, 1, 2, 7};
  std::vector<int32_t> tokens(4), targets(4);
  loader.load_window(1, positions.data(), 4, tokens.data(), targets.data());
  EXPECT_EQ(tokens, (std::vector<int32_t>{70001, 100000, 70003, 100000}));
  EXPECT_EQ(targets, (std::vector<int32_t>{100000, 70003, 70004, 70009}));
}

// A 1-D .npy file of `ids` by hand: NumPy's version 1.0 layout with `descr` ('<i4', '<u4', '<i8').
void write_ids(const std::string& path, const std::vector<int64_t>& ids, const std::string& descr,
               const std::string& shape = "") {
  const int width = descr.back() - '0';
  std::string dict = "{'descr': '" + descr + "', 'fortran_order': False, 'shape': (" +
                     (shape.empty() ? std::to_string(ids.size()) + "," : shape) + "), }";
  dict.append(63 - (10 + dict.size()) % 64, ' ');
  dict += '\n';
  std::string bytes = std::string("\x93NUMPY\x01\x00", 8) + char(dict.size() & 0xff) +
                      char(dict.size() >> 8) + dict;
  for (int64_t v : ids)
    for (int b = 0; b < width; ++b) bytes += char((uint64_t(v) >> (8 * b)) & 0xff);
  std::ofstream(path, std::ios::binary) << bytes;
}

std::vector<int32_t> shard_tokens(const std::string& path) {
  const TokenShard s(path);
  std::vector<int32_t> out;
  for (int64_t i = 0; i < s.size(); ++i) out.push_back(s[i]);
  return out;
}

TEST(GptData, PreparesTokenIdFiles) {
  const std::string dir = temp_dir("prepare_tokens");
  // Three documents of one file each (int32, uint32, int64), then a file of two documents ended
  // by the end-of-text id 9 (the second one not).
  write_ids(dir + "/a.npy", {5, 6, 7}, "<i4");
  write_ids(dir + "/b.npy", {8, 0}, "<u4");
  write_ids(dir + "/c.npy", {1, 2, 3, 4}, "<i8");
  write_ids(dir + "/d.npy", {2, 9, 3, 3}, "<i4");
  write_ids(dir + "/empty.npy", {}, "<i4");
  const std::vector<std::string> files = {dir + "/a.npy", dir + "/b.npy", dir + "/empty.npy",
                                          dir + "/c.npy", dir + "/d.npy"};
  auto st = prepare_tokens(files, dir + "/out", 0.25, 9);
  // 3+1, 2+1, 4+1, 2+2+1 = 17 tokens: 13 train, the last 4 (int(17 * 0.25)) validation.
  EXPECT_EQ(st.eos, 9);
  EXPECT_EQ(st.vocab, 10);
  EXPECT_EQ(st.train_tokens, 13);
  EXPECT_EQ(st.val_tokens, 4);
  EXPECT_EQ(shard_tokens(dir + "/out/train.bin"),
            (std::vector<int32_t>{5, 6, 7, 9, 8, 0, 9, 1, 2, 3, 4, 9, 2}));
  EXPECT_EQ(shard_tokens(dir + "/out/val.bin"), (std::vector<int32_t>{9, 3, 3, 9}));
  EXPECT_EQ(TokenShard(dir + "/out/val.bin").eos(), 9);
  EXPECT_EQ(TokenShard(dir + "/out/val.bin").vocab(), 10);
  // A file that already ends with end-of-text gets none appended.
  write_ids(dir + "/e.npy", {1, 9, 2, 9}, "<i4");
  st = prepare_tokens({dir + "/e.npy", dir + "/e.npy"}, dir + "/out", 0.25, 9, 100);
  EXPECT_EQ(st.vocab, 100);
  EXPECT_EQ(shard_tokens(dir + "/out/train.bin"), (std::vector<int32_t>{1, 9, 2, 9, 1, 9}));
  // Without --eos, end-of-text is the vocabulary's last id: a new one after the largest id, or
  // --vocab - 1.
  st = prepare_tokens({dir + "/a.npy", dir + "/b.npy"}, dir + "/out", 0.45);
  EXPECT_EQ(st.eos, 9);
  EXPECT_EQ(st.vocab, 10);
  EXPECT_EQ(shard_tokens(dir + "/out/train.bin"), (std::vector<int32_t>{5, 6, 7, 9}));
  st = prepare_tokens({dir + "/a.npy", dir + "/b.npy"}, dir + "/out", 0.45, -1, 128256);
  EXPECT_EQ(st.eos, 128255);
  EXPECT_EQ(shard_tokens(dir + "/out/val.bin"), (std::vector<int32_t>{8, 0, 128255}));
  // Ids up to 2^31 - 1.
  write_ids(dir + "/big.npy", {2147483647, 0, 7, 2147483646}, "<i8");
  st = prepare_tokens({dir + "/big.npy"}, dir + "/out", 0.4, 7);
  EXPECT_EQ(st.vocab, int64_t(1) << 31);
  EXPECT_EQ(shard_tokens(dir + "/out/train.bin"), (std::vector<int32_t>{2147483647, 0, 7}));
}

TEST(GptData, PrepareRefusesBadTokenFilesAndWritesNothing) {
  const std::string dir = temp_dir("prepare_tokens_bad");
  write_ids(dir + "/ok.npy", {1, 2, 3, 4, 5, 6}, "<i4");
  write_ids(dir + "/neg.npy", {1, 2, -3, 4}, "<i8");
  write_ids(dir + "/huge.npy", {1, 2147483648}, "<u4");
  write_ids(dir + "/big.npy", {1, 2, 300}, "<i4");
  write_ids(dir + "/two.npy", {1, 2, 3, 4}, "<i4", "2, 2");
  write_ids(dir + "/last.npy", {1, 2147483647}, "<i4");
  write_ids(dir + "/float.npy", {}, "<f4");
  const auto refused = [&](const std::vector<std::string>& names, int64_t eos, int64_t vocab,
                           const std::string& part) {
    std::vector<std::string> files;
    for (const auto& n : names) files.push_back(dir + "/" + n);
    try {
      prepare_tokens(files, dir + "/out", 0.25, eos, vocab);
      ADD_FAILURE() << "accepted: " << part;
    } catch (const UsageError& e) {
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
    }
    EXPECT_FALSE(std::filesystem::exists(dir + "/out"));
  };
  refused({"ok.npy", "neg.npy"}, -1, 0, "neg.npy: the id -3 at index 2 is outside 0..2147483647");
  refused({"huge.npy"}, -1, 0, "huge.npy: the id 2147483648 at index 1 is outside");
  refused({"big.npy"}, 0, 256, "big.npy: the id 300 at index 2 is outside the vocabulary 0..255");
  refused({"two.npy"}, 0, 0, "two.npy: the array has shape (2, 2); a token file holds a 1-D");
  refused({"float.npy"}, 0, 0, "float.npy: the array is '<f4'");
  refused({"missing.npy"}, 0, 0, "missing.npy");
  refused({"last.npy"}, -1, 0, "no id is left for end-of-text; give --eos");
  refused({"ok.npy"}, 7, 7, "--eos 7 must lie below --vocab 7");
  refused({"ok.npy"}, -2, 0, "--eos -2 must lie in");
  refused({"ok.npy"}, 0, (int64_t(1) << 31) + 1, "--vocab 2147483649 must lie in");
  refused({}, 0, 0, "at least one --tokens file");
  refused({"ok.npy"}, 0, 0, "leaves 1 validation and 6 training tokens");
}

}  // namespace
}  // namespace wallfacer::train
