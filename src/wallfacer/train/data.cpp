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
#include "wallfacer/core/npy.h"
#include "wallfacer/core/rng.h"

namespace wallfacer::train {

namespace {
constexpr char kMagic[8] = {'W', 'F', 'T', 'O', 'K', 'E', 'N', 'S'};
constexpr uint32_t kVersion16 = 1, kVersion32 = 2, kHeaderBytes = 64;
constexpr int64_t kMaxVocab32 = int64_t(1) << 31;  // ids up to 2^31 - 1

struct ShardHeader {
  char magic[8];
  uint32_t version;
  uint32_t header_bytes;
  uint32_t token_bytes;
  uint32_t vocab;
  uint64_t num_tokens;
  uint64_t checksum;
  uint32_t eos;  // version 2; zero in version 1
  uint8_t reserved[20];
};
static_assert(sizeof(ShardHeader) == kHeaderBytes);

void write_shard_bytes(const std::string& path, uint32_t version, const void* tokens,
                       uint64_t count, uint32_t token_bytes, uint32_t vocab, uint32_t eos) {
  ShardHeader h{};
  std::memcpy(h.magic, kMagic, 8);
  h.version = version;
  h.header_bytes = kHeaderBytes;
  h.token_bytes = token_bytes;
  h.vocab = vocab;
  h.num_tokens = count;
  h.checksum = fnv1a64(tokens, count * token_bytes);
  h.eos = eos;
  std::string bytes(reinterpret_cast<const char*>(&h), sizeof(h));
  bytes.append(static_cast<const char*>(tokens), count * token_bytes);
  write_file_atomic(path, bytes);
}
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
  write_shard_bytes(path, kVersion16, tokens.data(), tokens.size(), 2, uint32_t(vocab), 0);
}

void write_shard(const std::string& path, const std::vector<int32_t>& tokens, int64_t vocab,
                 int32_t eos) {
  WF_CHECK(vocab >= 1 && vocab <= kMaxVocab32 && eos >= 0 && eos < vocab,
           "write_shard: vocabulary {} outside 1..2^31 or end-of-text {} outside it", vocab, eos);
  write_shard_bytes(path, kVersion32, tokens.data(), tokens.size(), 4, uint32_t(vocab),
                    uint32_t(eos));
}

ShardView check_shard(const void* bytes, size_t size, const std::string& name) {
  WF_CHECK(reinterpret_cast<uintptr_t>(bytes) % alignof(int32_t) == 0,
           "token shard '{}' is not 4-byte aligned in memory", name);
  auto fail = [&](const std::string& why) {
    throw UsageError(fmt::format("token shard '{}': {}", name, why));
  };
  if (size < kHeaderBytes)
    fail(fmt::format("truncated ({} bytes, header needs {})", size, kHeaderBytes));
  ShardHeader h;
  std::memcpy(&h, bytes, sizeof(h));
  if (std::memcmp(h.magic, kMagic, 8) != 0) fail("not a wallfacer token shard (bad magic)");
  if (h.version != kVersion16 && h.version != kVersion32)
    fail(fmt::format("version {} (expected {} or {})", h.version, kVersion16, kVersion32));
  const bool wide = h.version == kVersion32;
  const uint32_t token_bytes = wide ? 4 : 2;
  if (h.header_bytes != kHeaderBytes || h.token_bytes != token_bytes)
    fail("unsupported header layout");
  // Sizes compared without a product that could wrap.
  if ((size - kHeaderBytes) % token_bytes != 0 ||
      (size - kHeaderBytes) / token_bytes != h.num_tokens) {
    fail(fmt::format("truncated: {} bytes for {} tokens", size, h.num_tokens));
  }
  const int64_t max_vocab = wide ? kMaxVocab32 : 65536;
  if (h.vocab < 1 || h.vocab > max_vocab)
    fail(fmt::format("vocabulary {} outside 1..{} ({}-bit tokens)", h.vocab, max_vocab,
                     8 * token_bytes));
  if (wide && h.eos >= h.vocab)
    fail(fmt::format("end-of-text id {} is outside its vocabulary of {}", h.eos, h.vocab));
  const char* data = static_cast<const char*>(bytes) + kHeaderBytes;
  if (fnv1a64(data, h.num_tokens * token_bytes) != h.checksum)
    fail("checksum mismatch (corrupt file)");
  ShardView v;
  if (wide) {
    v.tokens32 = reinterpret_cast<const int32_t*>(data);
    v.eos = int32_t(h.eos);
  } else {
    v.tokens16 = reinterpret_cast<const uint16_t*>(data);
  }
  v.size = int64_t(h.num_tokens);
  v.vocab = h.vocab;
  // Every token id inside the vocabulary: the model indexes embeddings and logits with them.
  for (int64_t i = 0; i < v.size; ++i) {
    if (v[i] < 0 || v[i] >= v.vocab)
      fail(
          fmt::format("token {} at position {} is outside its vocabulary of {} (corrupt file, or "
                      "written for another vocabulary: run `wallfacer prepare` again)",
                      v[i], i, h.vocab));
  }
  return v;
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
  static const int32_t kNothing = 0;
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

namespace {

// The validation split's size: the last val_fraction of `total` tokens; both splits need 2.
int64_t validation_tokens(int64_t total, double val_fraction, const char* more) {
  WF_USAGE_CHECK(val_fraction > 0 && val_fraction < 1, "--val-fraction must lie in (0, 1)");
  const auto n_val = int64_t(double(total) * val_fraction);
  WF_USAGE_CHECK(n_val >= 2 && total - n_val >= 2,
                 "--val-fraction {} of the inputs' {} tokens leaves {} validation and {} training "
                 "tokens; each needs at least 2: give {} or another --val-fraction",
                 val_fraction, total, n_val, total - n_val, more);
  return n_val;
}

}  // namespace

PrepareStats prepare(const std::vector<std::string>& inputs, const std::string& out_dir,
                     double val_fraction) {
  WF_USAGE_CHECK(!inputs.empty(), "prepare needs at least one --input file");
  std::vector<uint16_t> all;
  for (const auto& in : inputs) {
    auto t = tokenize_bytes(read_file(in));
    all.insert(all.end(), t.begin(), t.end());
  }
  const int64_t n_val = validation_tokens(int64_t(all.size()), val_fraction, "more text");
  make_directories(out_dir, "--out");
  const auto split = all.end() - n_val;
  write_shard(out_dir + "/train.bin", std::vector<uint16_t>(all.begin(), split), kByteVocab);
  write_shard(out_dir + "/val.bin", std::vector<uint16_t>(split, all.end()), kByteVocab);
  return {int64_t(all.size()) - n_val, n_val};
}

PrepareStats prepare_tokens(const std::vector<std::string>& files, const std::string& out_dir,
                            double val_fraction, int64_t eos, int64_t vocab) {
  WF_USAGE_CHECK(!files.empty(), "prepare needs at least one --tokens file");
  WF_USAGE_CHECK(vocab == 0 || (vocab >= 2 && vocab <= kMaxVocab32),
                 "--vocab {} must lie in 2..2147483648 (ids up to 2^31 - 1)", vocab);
  WF_USAGE_CHECK(eos == -1 || (eos >= 0 && eos < kMaxVocab32), "--eos {} must lie in 0..2147483647",
                 eos);
  WF_USAGE_CHECK(vocab == 0 || eos < vocab, "--eos {} must lie below --vocab {}", eos, vocab);
  // The ids, each file's ids checked, and where each file ends (end-of-text is placed after).
  std::vector<int32_t> all;
  std::vector<size_t> ends;
  int64_t largest = -1;
  for (const std::string& f : files) {
    std::vector<int64_t> shape;
    const std::vector<int64_t> ids = read_npy_ints(f, shape);
    WF_USAGE_CHECK(shape.size() == 1,
                   "{}: the array has shape ({}); a token file holds a 1-D array of ids", f,
                   fmt::join(shape, ", "));
    const int64_t limit = vocab > 0 ? vocab : kMaxVocab32;
    for (size_t i = 0; i < ids.size(); ++i) {
      WF_USAGE_CHECK(ids[i] >= 0 && ids[i]<limit, "{}: the id {} at index {} is outside {}: {}", f,
                                           ids[i], i, vocab> 0
                         ? fmt::format("the vocabulary 0..{}", vocab - 1)
                         : std::string("0..2147483647"),
                     vocab > 0 ? "give the tokenizer's vocabulary size as --vocab"
                               : "token ids are non-negative 31-bit integers");
      largest = std::max(largest, ids[i]);
    }
    all.insert(all.end(), ids.begin(), ids.end());
    ends.push_back(all.size());
  }
  // End-of-text and the vocabulary (see data.h).
  PrepareStats st;
  if (eos >= 0) {
    st.eos = int32_t(eos);
    st.vocab = vocab > 0 ? vocab : std::max(largest, eos) + 1;
  } else {
    WF_USAGE_CHECK(vocab > 0 || largest + 1 < kMaxVocab32,
                   "the largest id is {}: no id is left for end-of-text; give --eos", largest);
    st.vocab = vocab > 0 ? vocab : largest + 2;
    st.eos = int32_t(st.vocab - 1);
  }
  std::vector<int32_t> tokens;
  tokens.reserve(all.size() + files.size());
  size_t from = 0;
  for (size_t end : ends) {
    tokens.insert(tokens.end(), all.begin() + int64_t(from), all.begin() + int64_t(end));
    if (end > from && all[end - 1] != st.eos) tokens.push_back(st.eos);
    from = end;
  }
  std::vector<int32_t>().swap(all);
  const int64_t n_val = validation_tokens(int64_t(tokens.size()), val_fraction, "more token ids");
  make_directories(out_dir, "--out");
  const auto split = tokens.end() - n_val;
  write_shard(out_dir + "/train.bin", std::vector<int32_t>(tokens.begin(), split), st.vocab,
              st.eos);
  write_shard(out_dir + "/val.bin", std::vector<int32_t>(split, tokens.end()), st.vocab, st.eos);
  st.train_tokens = int64_t(tokens.size()) - n_val;
  st.val_tokens = n_val;
  return st;
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
    if (shard_[start + t] == shard_.eos() || t + 1 == seq_) {
      lengths.push_back(t + 1 - begin);
      begin = t + 1;
    }
  }
  return lengths;
}

}  // namespace wallfacer::train
