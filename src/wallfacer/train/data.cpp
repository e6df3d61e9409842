#include "wallfacer/train/data.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>

#include "wallfacer/core/error.h"
#include "wallfacer/core/file.h"
#include "wallfacer/core/rng.h"

namespace wallfacer::train {

namespace {
constexpr char kMagic[8] = {'W', 'F', 'T', 'O', 'K', 'E', 'N', 'S'};
constexpr uint32_t kVersion = 1, kHeaderBytes = 64;

struct ShardHeader {
  char magic[8];
  uint32_t version;
  uint32_t header_bytes;
  uint32_t token_bytes;
  uint32_t vocab;
  uint64_t num_tokens;
  uint64_t checksum;
  uint8_t reserved[24];
};
static_assert(sizeof(ShardHeader) == kHeaderBytes);
}  // namespace

uint64_t fnv1a64(const void* data, size_t bytes, uint64_t h) {
  const auto* p = static_cast<const uint8_t*>(data);
  for (size_t i = 0; i < bytes; ++i) {
    h ^= p[i];
    h *= 0x100000001b3ULL;
  }
  return h;
}

std::vector<uint16_t> tokenize_bytes(const std::string& text) {
  std::vector<uint16_t> t(text.size() + 1);
  for (size_t i = 0; i < text.size(); ++i) t[i] = static_cast<unsigned char>(text[i]);
  t.back() = kEndOfText;
  return t;
}

std::string detokenize(const std::vector<int32_t>& tokens) {
  std::string s;
  for (int32_t t : tokens) s.push_back(t < 256 ? char(t) : '\n');
  return s;
}

void write_shard(const std::string& path, const std::vector<uint16_t>& tokens, int vocab) {
  ShardHeader h{};
  std::memcpy(h.magic, kMagic, 8);
  h.version = kVersion;
  h.header_bytes = kHeaderBytes;
  h.token_bytes = 2;
  h.vocab = uint32_t(vocab);
  h.num_tokens = tokens.size();
  h.checksum = fnv1a64(tokens.data(), tokens.size() * 2);
  std::string bytes(reinterpret_cast<const char*>(&h), sizeof(h));
  bytes.append(reinterpret_cast<const char*>(tokens.data()), tokens.size() * 2);
  write_file_atomic(path, bytes);
}

ShardView check_shard(const void* bytes, size_t size, const std::string& name) {
  WF_CHECK(reinterpret_cast<uintptr_t>(bytes) % alignof(uint16_t) == 0,
           "token shard '{}' is not 2-byte aligned in memory", name);
  auto fail = [&](const std::string& why) {
    throw UsageError(fmt::format("token shard '{}': {}", name, why));
  };
  if (size < kHeaderBytes)
    fail(fmt::format("truncated ({} bytes, header needs {})", size, kHeaderBytes));
  ShardHeader h;
  std::memcpy(&h, bytes, sizeof(h));
  if (std::memcmp(h.magic, kMagic, 8) != 0) fail("not a wallfacer token shard (bad magic)");
  if (h.version != kVersion) fail(fmt::format("version {} (expected {})", h.version, kVersion));
  if (h.header_bytes != kHeaderBytes || h.token_bytes != 2) fail("unsupported header layout");
  // Sizes compared without a product that could wrap.
  if ((size - kHeaderBytes) % 2 != 0 || (size - kHeaderBytes) / 2 != h.num_tokens) {
    fail(fmt::format("truncated: {} bytes for {} tokens", size, h.num_tokens));
  }
  if (h.vocab < 1 || h.vocab > 65536)
    fail(fmt::format("vocabulary {} outside 1..65536 (16-bit tokens)", h.vocab));
  const auto* tokens =
      reinterpret_cast<const uint16_t*>(static_cast<const char*>(bytes) + kHeaderBytes);
  if (fnv1a64(tokens, h.num_tokens * 2) != h.checksum) fail("checksum mismatch (corrupt file)");
  // Every token id inside the vocabulary: the model indexes embeddings and logits with them.
  for (uint64_t i = 0; i < h.num_tokens; ++i) {
    if (tokens[i] >= h.vocab)
      fail(
          fmt::format("token {} at position {} is outside its vocabulary of {} (corrupt file, or "
                      "written for another vocabulary: run `wallfacer prepare` again)",
                      tokens[i], i, h.vocab));
  }
  return {tokens, int64_t(h.num_tokens), int(h.vocab)};
}

TokenShard::TokenShard(const std::string& path) : path_(path) {
  std::error_code ec;
  WF_USAGE_CHECK(!std::filesystem::is_directory(path, ec),
                 "token shard '{}' is a folder; a file written by `wallfacer prepare` is expected",
                 path);
  const int fd = ::open(path.c_str(), O_RDONLY);
  WF_USAGE_CHECK(fd >= 0, "cannot open token shard '{}': {} (run `wallfacer prepare` first)", path,
                 std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int e = errno;
    ::close(fd);
    throw UsageError(fmt::format("cannot read token shard '{}': {}", path, std::strerror(e)));
  }
  map_bytes_ = size_t(st.st_size);
  if (map_bytes_ > 0) {  // an empty file cannot be mapped; check_shard refuses it below
    map_ = ::mmap(nullptr, map_bytes_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (map_ == MAP_FAILED) {
      const int e = errno;
      map_ = nullptr;
      ::close(fd);
      raise_error(__FILE__, __LINE__,
                  fmt::format("mmap of '{}' failed: {}", path, std::strerror(e)));
    }
  }
  ::close(fd);
  static const uint16_t kNothing = 0;
  try {
    view_ = check_shard(map_ ? map_ : &kNothing, map_bytes_, path);
  } catch (...) {
    if (map_) ::munmap(map_, map_bytes_);
    map_ = nullptr;
    throw;
  }
}

TokenShard::~TokenShard() {
  if (map_) ::munmap(map_, map_bytes_);
}

PrepareStats prepare(const std::vector<std::string>& inputs, const std::string& out_dir,
                     double val_fraction) {
  WF_USAGE_CHECK(!inputs.empty(), "prepare needs at least one --input file");
  WF_USAGE_CHECK(val_fraction > 0 && val_fraction < 1, "--val-fraction must lie in (0, 1)");
  std::vector<uint16_t> all;
  for (const auto& in : inputs) {
    auto t = tokenize_bytes(read_file(in));
    all.insert(all.end(), t.begin(), t.end());
  }
  const auto n_val = int64_t(double(all.size()) * val_fraction);
  WF_USAGE_CHECK(n_val >= 2 && int64_t(all.size()) - n_val >= 2,
                 "--val-fraction {} of the inputs' {} tokens leaves {} validation and {} training "
                 "tokens; each needs at least 2: give more text or another --val-fraction",
                 val_fraction, all.size(), n_val, int64_t(all.size()) - n_val);
  make_directories(out_dir, "--out");
  const auto split = all.end() - n_val;
  write_shard(out_dir + "/train.bin", std::vector<uint16_t>(all.begin(), split), kByteVocab);
  write_shard(out_dir + "/val.bin", std::vector<uint16_t>(split, all.end()), kByteVocab);
  return {int64_t(all.size()) - n_val, n_val};
}

SequenceLoader::SequenceLoader(const TokenShard& shard, int64_t seq, uint64_t seed)
    : shard_(shard), seq_(seq), seed_(seed) {
  WF_USAGE_CHECK(shard.size() > seq,
                 "token shard '{}' holds {} tokens, fewer than train.seq + 1 = {} (prepare more "
                 "text or lower train.seq)",
                 shard.path(), shard.size(), seq + 1);
}

int64_t SequenceLoader::start(int64_t step, int64_t j) const {
  const uint64_t span = uint64_t(shard_.size() - seq_);  // starts in [0, size - seq - 1]
  return int64_t(mix64(seed_ ^ 0x5EED5EEDULL, uint64_t(step) * 0x10000ULL + uint64_t(j)) % span);
}

void SequenceLoader::load_window(int64_t s, const int64_t* positions, int64_t count,
                                 int32_t* tokens, int32_t* targets) const {
  for (int64_t i = 0; i < count; ++i) {
    WF_CHECK(positions[i] >= 0 && positions[i] < seq_, "load_window: position {} outside [0, {})",
             positions[i], seq_);
    tokens[i] = shard_[s + positions[i]];
    targets[i] = shard_[s + positions[i] + 1];
  }
}

void SequenceLoader::load(int64_t step, int64_t b0, int nb, const std::vector<int64_t>& positions,
                          int32_t* tokens, int32_t* targets) const {
  const size_t T = positions.size();
  for (int b = 0; b < nb; ++b) {
    load_window(start(step, b0 + b), positions.data(), int64_t(T), tokens + size_t(b) * T,
                targets + size_t(b) * T);
  }
}

void SequenceLoader::load_eval(int64_t j0, int nb, const std::vector<int64_t>& positions,
                               int32_t* tokens, int32_t* targets, int64_t num_eval) const {
  const size_t T = positions.size();
  for (int b = 0; b < nb; ++b) {
    load_window(eval_start(j0 + b, num_eval), positions.data(), int64_t(T), tokens + size_t(b) * T,
                targets + size_t(b) * T);
  }
}

int64_t SequenceLoader::eval_start(int64_t j, int64_t num_eval) const {
  return (shard_.size() - seq_) * j / std::max<int64_t>(1, num_eval);
}

std::vector<int64_t> SequenceLoader::documents(int64_t start) const {
  std::vector<int64_t> lengths;
  int64_t begin = 0;
  for (int64_t t = 0; t < seq_; ++t) {
    if (shard_[start + t] == kEndOfText || t + 1 == seq_) {
      lengths.push_back(t + 1 - begin);
      begin = t + 1;
    }
  }
  return lengths;
}

}  // namespace wallfacer::train
