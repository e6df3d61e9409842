#pragma once
// Token data: a byte-level tokenizer, token shard files, `prepare`, and the loader that gives each
// rank exactly the tokens its sequence-parallel layout holds.
//
// Shard file (little-endian), version 1 (byte-level text, `prepare --input`):
//   offset  0  magic "WFTOKENS" (8 bytes)
//           8  u32 version (1)
//          12  u32 header bytes (64)
//          16  u32 bytes per token (2)
//          20  u32 vocabulary size (1..65536)
//          24  u64 number of tokens
//          32  u64 FNV-1a 64 checksum of the token bytes
//          40  24 reserved zero bytes
//          64  tokens, u16 each; end-of-text is kEndOfText (256)
// Version 2 (token ids of any tokenizer, `prepare --tokens`): the same fields with version 2,
// 4 bytes per token and a vocabulary of 1..2^31, and
//          40  u32 end-of-text id (below the vocabulary)
//          44  20 reserved zero bytes
//          64  tokens, i32 each (0 <= id < vocabulary)
// Written to a temporary name, fsynced and renamed, so a shard is either complete or absent.

#include <cstdint>
#include <string>
#include <vector>

namespace wallfacer::train {

inline constexpr int kEndOfText = 256;  // after each input file
inline constexpr int kByteVocab = 257;  // 256 byte values + end-of-text

// Bytes of the text as tokens, then end-of-text.
std::vector<uint16_t> tokenize_bytes(const std::string& text);
// Tokens back to text (end-of-text shown as a newline).
std::string detokenize(const std::vector<int32_t>& tokens);

uint64_t fnv1a64(const void* data, size_t bytes, uint64_t h = 0xcbf29ce484222325ULL);

// Writes a version 1 shard atomically (temp name, fsync, rename).
void write_shard(const std::string& path, const std::vector<uint16_t>& tokens, int vocab);
// Writes a version 2 shard (int32 ids, each in [0, vocab); eos in [0, vocab)) atomically.
void write_shard(const std::string& path, const std::vector<int32_t>& tokens, int64_t vocab,
                 int32_t eos);

// The tokens of a shard file whose header, size, checksum and token ids were verified: u16 ids
// (version 1) or i32 ids (version 2), read as int32 either way.
struct ShardView {
  const uint16_t* tokens16 = nullptr;  // version 1
  const int32_t* tokens32 = nullptr;   // version 2
  int64_t size = 0;
  int64_t vocab = 0;
  int32_t eos = kEndOfText;  // the end-of-text id that ends documents
  int32_t operator[](int64_t i) const { return tokens32 ? tokens32[i] : tokens16[i]; }
};
// Verifies a shard from its bytes (the whole file, 4-byte aligned) and views its tokens; `name`
// names it in messages. Throws UsageError saying what is wrong.
ShardView check_shard(const void* bytes, size_t size, const std::string& name);

// A shard mapped read-only; verified by check_shard on open.
class TokenShard {
 public:
  explicit TokenShard(const std::string& path);
  ~TokenShard();
  TokenShard(const TokenShard&) = delete;
  TokenShard& operator=(const TokenShard&) = delete;
  int64_t size() const { return view_.size; }
  int64_t vocab() const { return view_.vocab; }
  int32_t eos() const { return view_.eos; }
  const std::string& path() const { return path_; }
  int32_t operator[](int64_t i) const { return view_[i]; }

 private:
  void* map_ = nullptr;
  size_t map_bytes_ = 0;
  ShardView view_;
  std::string path_;
};

struct PrepareStats {
  int64_t train_tokens = 0, val_tokens = 0;
  int64_t vocab = kByteVocab;
  int32_t eos = kEndOfText;
};
// Tokenizes the files in order into DIR/train.bin and DIR/val.bin: the last val_fraction of the
// token stream is the validation split.
PrepareStats prepare(const std::vector<std::string>& inputs, const std::string& out_dir,
                     double val_fraction);

// Token ids already made by a tokenizer (`prepare --tokens`): each file a 1-D .npy array of
// integers (scripts/tokenize writes them), in order, into version 2 shards DIR/train.bin and
// DIR/val.bin, the last val_fraction of the ids held out. Every file ends a document: end-of-text
// is appended unless its last id already is it (so a file may hold one document, or several each
// ended by end-of-text); an empty file adds nothing. End-of-text is `eos` when given (>= 0), else
// the vocabulary's last id. The vocabulary is `vocab` when given (> 0), else the largest id + 1
// (end-of-text included; without `eos`, end-of-text is a new id after the largest). An id outside
// [0, vocab) or above 2^31 - 1 is a UsageError naming the file and its index; nothing is written.
PrepareStats prepare_tokens(const std::vector<std::string>& files, const std::string& out_dir,
                            double val_fraction, int64_t eos = -1, int64_t vocab = 0);

// Cuts training sequences of seq tokens (+1 for the targets) from a shard: sequence j of step s
// starts at a position drawn from (seed, s, j). A rank holds sequences [b0, b0 + nb) of the global
// batch and the rows at `positions` (global token positions inside the sequence).
class SequenceLoader {
 public:
  SequenceLoader(const TokenShard& shard, int64_t seq, uint64_t seed);
  // Start of sequence j (0-based in the global batch) of step s.
  int64_t start(int64_t step, int64_t j) const;
  // tokens, targets: (nb, positions.size())
  void load(int64_t step, int64_t b0, int nb, const std::vector<int64_t>& positions,
            int32_t* tokens, int32_t* targets) const;
  // Evaluation sequences: evenly spaced, the same every time (index j of all of them).
  void load_eval(int64_t j0, int nb, const std::vector<int64_t>& positions, int32_t* tokens,
                 int32_t* targets, int64_t num_eval) const;
  // Start of evaluation sequence j of num_eval.
  int64_t eval_start(int64_t j, int64_t num_eval) const;
  // The rows at `count` global positions of the window starting at `start` (start(...) or
  // eval_start(...)): tokens[i] and targets[i] are the input and next token of position
  // positions[i]. For layouts whose positions differ between sequences (train.packing =
  // "documents" with parallel.layout = "balanced").
  void load_window(int64_t start, const int64_t* positions, int64_t count, int32_t* tokens,
                   int32_t* targets) const;
  // The documents of the input window [start, start + seq) (train.packing = "documents"): their
  // lengths in order, a document ending after each end-of-text token and at the window's end. Read
  // from the shard, so every rank gets the whole window's documents without communication.
  std::vector<int64_t> documents(int64_t start) const;

 private:
  const TokenShard& shard_;
  int64_t seq_;
  uint64_t seed_;
};

}  // namespace wallfacer::train
