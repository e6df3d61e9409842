#pragma once
// Hugging Face safetensors files: an 8-byte little-endian header length N, N bytes of JSON
// ({"NAME": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, ...,
// "__metadata__": {"key": "value"}}; offsets count from the byte after the header), then the
// tensors' little-endian bytes, one after another. A checkpoint folder holds model.safetensors,
// or model.safetensors.index.json ({"weight_map": {"NAME": "SHARD FILE"}}) and its shards.
//
// Every problem with a file is a UsageError of one line naming the file and what is wrong: a
// truncated file, a header that is not a JSON object, an unknown dtype, a shape that does not
// match the bytes, offsets outside the data or overlapping, a tensor named twice, an index that
// names a missing shard or a tensor its shard does not hold.

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "wallfacer/core/dtype.h"

namespace wallfacer::safetensors {

struct TensorInfo {
  std::string name;
  std::string dtype;  // as the file names it: "F32", "BF16", "F16", "I64", ...
  std::vector<int64_t> shape;
  int64_t begin = 0, end = 0;  // byte offsets in the data section (after the header)
  std::string file;            // the file that holds it
};

class Reader {
 public:
  // One .safetensors file; only its header is read here, the tensors when asked for.
  static Reader open_file(const std::string& path);
  // A Hugging Face folder: DIR/model.safetensors, else DIR/model.safetensors.index.json and the
  // shards it names (each in DIR).
  static Reader open_dir(const std::string& dir);
  // A whole file held in memory; `name` stands for it in messages (the fuzz target, tests).
  static Reader parse(std::string bytes, const std::string& name);

  // In the order of their data (and of their files for a folder).
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  bool has(const std::string& name) const { return index_.count(name) > 0; }
  // Throws UsageError naming the checkpoint when there is no tensor `name`.
  const TensorInfo& info(const std::string& name) const;
  // The tensor's values (product of its shape), F32, BF16 and F16 converted exactly to fp32; any
  // other dtype is a UsageError naming it and the tensor.
  std::vector<float> read_f32(const std::string& name) const;
  // The "__metadata__" of the file (of every shard, the first shard's value kept for a key
  // several name).
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

 private:
  static Reader read_dir(const std::string& dir);
  void add_file(const std::string& path, std::shared_ptr<const std::string> bytes);
  std::vector<float> read_values(const std::string& name) const;

  std::string source_;  // the file or folder, for messages
  std::vector<TensorInfo> tensors_;
  std::map<std::string, size_t> index_;
  std::map<std::string, std::string> metadata_;
  std::map<std::string, int64_t> data_start_;  // per file: 8 + header length
  std::map<std::string, std::shared_ptr<const std::string>> in_memory_;  // parse()'s bytes
};

// A tensor to write: the product of `shape` floats at `data`.
struct WriteTensor {
  std::string name;
  std::vector<int64_t> shape;
  const float* data = nullptr;
};

// The element types write_file writes: Dtype::fp32 ("F32") and Dtype::bf16 ("BF16", rounded to
// nearest even, core/bf16.h).
using Dtype = wallfacer::Dtype;

// Writes `tensors` in their order to `path` atomically (nothing is left half-written), with
// `metadata` as "__metadata__" (none when empty). The header is padded with spaces to a multiple
// of 8 bytes, so that every tensor's data starts 8-byte aligned in the file when the tensors
// before it have a multiple of 8 bytes. Throws UsageError for a name given twice or "__metadata__",
// a negative dimension, or a null `data` with elements.
void write_file(const std::string& path, const std::vector<WriteTensor>& tensors, Dtype dtype,
                const std::map<std::string, std::string>& metadata = {});

// Bytes of one element of a dtype the format defines ("F32": 4, "BF16": 2, "BOOL": 1, ...), or 0
// for a name it does not define.
int64_t dtype_size(const std::string& dtype);

// IEEE half precision (F16) bits -> fp32, exact (subnormals, infinities, NaN included).
float f16_to_float(uint16_t bits);

}  // namespace wallfacer::safetensors
