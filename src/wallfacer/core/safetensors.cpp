#include "wallfacer/core/safetensors.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <string_view>
#include <utility>

#include "wallfacer/core/bf16.h"
#include "wallfacer/core/error.h"
#include "wallfacer/core/file.h"
#include "wallfacer/core/json_error.h"

namespace wallfacer::safetensors {

namespace {

using json = nlohmann::json;

constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();
// The largest header accepted (the reference implementation's limit too): a longer one is a
// corrupt length, not a header, and is refused before anything is allocated for it.
constexpr uint64_t kMaxHeaderBytes = uint64_t(100) << 20;
constexpr std::string_view kMetadataKey = "__metadata__";

// Runs `f`, its UsageError's message kept on one line: a control character (a tensor name or
// key may hold any, escaped in the JSON) is shown as \xNN.
template <class F>
auto on_one_line(F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const UsageError& e) {
    std::string msg;
    for (const char c : std::string_view(e.what())) {
      if (uint8_t(c) < 0x20 || c == 0x7f)
        msg += fmt::format("\\x{:02x}", uint8_t(c));
      else
        msg += c;
    }
    throw UsageError(msg);
  }
}

uint64_t load_u64_le(const char* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = v << 8 | uint8_t(p[i]);
  return v;
}

// The header's JSON: an object of objects, nested at most 3 deep (tensor -> shape -> dimension),
// each key of the top object once. Deeper values are dropped while parsing (so that no input
// builds a deep tree) and refused after.
json parse_header_json(const std::string& text, const std::string& file) {
  std::set<std::string> seen;
  std::string duplicate;
  bool too_deep = false;
  const json::parser_callback_t callback = [&](int depth, json::parse_event_t event, json& parsed) {
    if (depth > 3) {
      too_deep = true;
      return false;
    }
    if (event == json::parse_event_t::key && depth == 1 && duplicate.empty() &&
        !seen.insert(parsed.get<std::string>()).second)
      duplicate = parsed.get<std::string>();
    return true;
  };
  json header;
  try {
    header = json::parse(text, callback);
  } catch (const json::exception& e) {
    throw UsageError(fmt::format("{}: the safetensors header is not JSON: {}", file,
                                 describe_json_error(text, e)));
  }
  WF_USAGE_CHECK(header.is_object(), "{}: the safetensors header is JSON but not an object ({})",
                 file, header.type_name());
  WF_USAGE_CHECK(duplicate.empty(), "{}: the header names '{}' twice", file, duplicate);
  WF_USAGE_CHECK(!too_deep, "{}: the header nests values deeper than a safetensors header does",
                 file);
  return header;
}

// A non-negative JSON integer that fits int64, or a UsageError naming `what`.
int64_t offset_value(const json& v, const std::string& file, const std::string& what) {
  WF_USAGE_CHECK(v.is_number_integer() && (v.is_number_unsigned() || v.get<int64_t>() >= 0),
                 "{}: {} is {}, not a non-negative integer", file, what, v.dump());
  if (v.is_number_unsigned())
    WF_USAGE_CHECK(v.get<uint64_t>() <= uint64_t(kInt64Max), "{}: {} ({}) overflows int64", file,
                   what, v.get<uint64_t>());
  return v.get<int64_t>();
}

TensorInfo tensor_info(const std::string& name, const json& entry, const std::string& file) {
  const std::string what = "tensor '" + name + "'";
  WF_USAGE_CHECK(entry.is_object(), "{}: {} is {}, not an object with dtype, shape, data_offsets",
                 file, what, entry.type_name());
  for (const char* key : {"dtype", "shape", "data_offsets"})
    WF_USAGE_CHECK(entry.contains(key), "{}: {} has no \"{}\"", file, what, key);
  TensorInfo t;
  t.name = name;
  t.file = file;
  const json& dtype = entry["dtype"];
  WF_USAGE_CHECK(dtype.is_string(), "{}: the dtype of {} is {}, not a string", file, what,
                 dtype.dump());
  t.dtype = dtype.get<std::string>();
  const int64_t elem = dtype_size(t.dtype);
  WF_USAGE_CHECK(elem > 0,
                 "{}: {} has the unknown dtype '{}' (safetensors defines F64, F32, F16, "
                 "BF16, I64, I32, I16, I8, U64, U32, U16, U8, BOOL, F8_E4M3, F8_E5M2)",
                 file, what, t.dtype);
  const json& shape = entry["shape"];
  WF_USAGE_CHECK(shape.is_array(), "{}: the shape of {} is {}, not an array", file, what,
                 shape.dump());
  // The element count, checked against int64 before each product is formed.
  int64_t count = 1;
  for (const json& d : shape) {
    WF_USAGE_CHECK(d.is_number_integer(), "{}: the shape of {} holds {}, not an integer", file,
                   what, d.dump());
    WF_USAGE_CHECK(d.is_number_unsigned() || d.get<int64_t>() >= 0,
                   "{}: the shape of {} has the negative dimension {}", file, what, d.dump());
    WF_USAGE_CHECK(d.get<uint64_t>() <= uint64_t(kInt64Max),
                   "{}: the shape of {} has the dimension {}, beyond int64", file, what, d.dump());
    t.shape.push_back(d.get<int64_t>());
  }
  for (int64_t d : t.shape) {
    if (d == 0) count = 0;
  }
  for (size_t i = 0; i < t.shape.size() && count > 0; ++i) {
    WF_USAGE_CHECK(count <= kInt64Max / elem / t.shape[i],
                   "{}: the shape [{}] of {} holds more bytes than int64 counts", file,
                   fmt::join(t.shape, ", "), what);
    count *= t.shape[i];
  }
  const json& offsets = entry["data_offsets"];
  WF_USAGE_CHECK(offsets.is_array() && offsets.size() == 2,
                 "{}: data_offsets of {} is {}, not [begin, end]", file, what, offsets.dump());
  t.begin = offset_value(offsets[0], file, "the data begin of " + what);
  t.end = offset_value(offsets[1], file, "the data end of " + what);
  WF_USAGE_CHECK(t.begin <= t.end, "{}: the data of {} ends ({}) before it begins ({})", file, what,
                 t.end, t.begin);
  WF_USAGE_CHECK(t.end - t.begin == count * elem,
                 "{}: {} of dtype {} and shape [{}] needs {} bytes, its data_offsets [{}, {}] "
                 "hold {}",
                 file, what, t.dtype, fmt::join(t.shape, ", "), count * elem, t.begin, t.end,
                 t.end - t.begin);
  return t;
}

// The tensors and metadata of one file's header; `data_bytes`: the bytes after the header.
// The tensors come back in the order of their data, which must tile the data exactly.
std::vector<TensorInfo> parse_header(const std::string& text, uint64_t data_bytes,
                                     const std::string& file,
                                     std::map<std::string, std::string>& metadata) {
  const json header = parse_header_json(text, file);
  std::vector<TensorInfo> tensors;
  for (const auto& [key, value] : header.items()) {
    if (key == kMetadataKey) {
      WF_USAGE_CHECK(value.is_object(), "{}: __metadata__ is {}, not an object of strings", file,
                     value.type_name());
      for (const auto& [k, v] : value.items()) {
        WF_USAGE_CHECK(v.is_string(), "{}: __metadata__ '{}' is {}, not a string", file, k,
                       v.dump());
        metadata.emplace(k, v.get<std::string>());
      }
      continue;
    }
    tensors.push_back(tensor_info(key, value, file));
  }
  std::stable_sort(tensors.begin(), tensors.end(), [](const TensorInfo& a, const TensorInfo& b) {
    return std::pair(a.begin, a.end) < std::pair(b.begin, b.end);
  });
  int64_t at = 0;
  const TensorInfo* before = nullptr;
  for (const TensorInfo& t : tensors) {
    WF_USAGE_CHECK(t.begin >= at, "{}: the data of tensor '{}' [{}, {}) overlaps that of '{}'",
                   file, t.name, t.begin, t.end, before ? before->name : "");
    WF_USAGE_CHECK(t.begin == at,
                   "{}: {} bytes before the data of tensor '{}' belong to no tensor (offsets "
                   "must follow each other)",
                   file, t.begin - at, t.name);
    WF_USAGE_CHECK(uint64_t(t.end) <= data_bytes,
                   "{}: the data of tensor '{}' [{}, {}) runs past the {} bytes the file holds "
                   "after its header (truncated?)",
                   file, t.name, t.begin, t.end, data_bytes);
    at = t.end;
    before = &t;
  }
  WF_USAGE_CHECK(uint64_t(at) == data_bytes,
                 "{}: {} bytes after the last tensor's data belong to no tensor", file,
                 data_bytes - uint64_t(at));
  return tensors;
}

// The header length of a file of `size` bytes whose first 8 bytes are `prefix` (size >= 8).
uint64_t header_length(const char* prefix, uint64_t size, const std::string& file) {
  const uint64_t n = load_u64_le(prefix);
  WF_USAGE_CHECK(n <= size - 8,
                 "{}: the header length {} runs past the end of the file ({} bytes; truncated?)",
                 file, n, size);
  WF_USAGE_CHECK(n <= kMaxHeaderBytes,
                 "{}: the header length {} is beyond the {} bytes a safetensors header may have",
                 file, n, kMaxHeaderBytes);
  return n;
}

void check_length(uint64_t size, const std::string& file) {
  WF_USAGE_CHECK(size >= 8,
                 "{}: the file is truncated ({} bytes): a safetensors file starts with an 8-byte "
                 "header length",
                 file, size);
}

// Bytes [offset, offset + n) of the file at `path`.
std::string read_range(const std::string& path, uint64_t offset, uint64_t n) {
  std::ifstream f(path, std::ios::binary);
  WF_USAGE_CHECK(f.good(), "cannot read '{}'", path);
  std::string out(n, '\0');
  f.seekg(std::streamoff(offset));
  f.read(out.data(), std::streamsize(n));
  WF_USAGE_CHECK(f.good() && uint64_t(f.gcount()) == n,
                 "{}: cannot read {} bytes at offset {} (the file is shorter: truncated?)", path, n,
                 offset);
  return out;
}

}  // namespace

int64_t dtype_size(const std::string& dtype) {
  static const std::map<std::string, int64_t, std::less<>> sizes = {
      {"F64", 8}, {"I64", 8}, {"U64", 8},  {"F32", 4},     {"I32", 4},
      {"U32", 4}, {"F16", 2}, {"BF16", 2}, {"I16", 2},     {"U16", 2},
      {"I8", 1},  {"U8", 1},  {"BOOL", 1}, {"F8_E4M3", 1}, {"F8_E5M2", 1}};
  const auto it = sizes.find(dtype);
  return it == sizes.end() ? 0 : it->second;
}

float f16_to_float(uint16_t bits) {
  const uint32_t sign = uint32_t(bits >> 15) << 31;
  const uint32_t exp = (bits >> 10) & 0x1f, mant = bits & 0x3ffu;
  if (exp == 0x1f) return bits_float(sign | 0x7f800000u | mant << 13);  // inf, NaN (payload kept)
  if (exp != 0) return bits_float(sign | (exp + 112) << 23 | mant << 13);  // 127 - 15 = 112
  // Zero or subnormal: mant * 2^-24, exact in fp32 (11 significant bits at most).
  const float magnitude = float(mant) * bits_float(0x33800000u);  // 2^-24
  return bits_float(sign | float_bits(magnitude));
}

void Reader::add_file(const std::string& path, std::shared_ptr<const std::string> bytes) {
  uint64_t size = 0;
  std::string header_text;
  if (bytes) {
    size = bytes->size();
    check_length(size, path);
    const uint64_t n = header_length(bytes->data(), size, path);
    header_text = bytes->substr(8, n);
  } else {
    std::error_code ec;
    WF_USAGE_CHECK(!std::filesystem::is_directory(path, ec),
                   "'{}' is a folder; a .safetensors file is expected there", path);
    size = std::filesystem::file_size(path, ec);
    WF_USAGE_CHECK(!ec, "cannot read '{}': {}", path, ec.message());
    check_length(size, path);
    const std::string prefix = read_range(path, 0, 8);
    header_text = read_range(path, 8, header_length(prefix.data(), size, path));
  }
  const uint64_t data_start = 8 + header_text.size();
  std::map<std::string, std::string> metadata;
  std::vector<TensorInfo> tensors = parse_header(header_text, size - data_start, path, metadata);
  for (TensorInfo& t : tensors) {
    const auto [it, added] = index_.emplace(t.name, tensors_.size());
    WF_USAGE_CHECK(added, "{}: tensor '{}' is also in '{}': a checkpoint names each tensor once",
                   path, t.name, tensors_[it->second].file);
    tensors_.push_back(std::move(t));
  }
  metadata_.insert(metadata.begin(), metadata.end());  // keeps the first file's value of a key
  data_start_[path] = int64_t(data_start);
  if (bytes) in_memory_[path] = std::move(bytes);
}

Reader Reader::open_file(const std::string& path) {
  return on_one_line([&] {
    Reader r;
    r.source_ = path;
    r.add_file(path, nullptr);
    return r;
  });
}

Reader Reader::parse(std::string bytes, const std::string& name) {
  return on_one_line([&] {
    Reader r;
    r.source_ = name;
    r.add_file(name, std::make_shared<const std::string>(std::move(bytes)));
    return r;
  });
}

Reader Reader::open_dir(const std::string& dir) {
  return on_one_line([&] { return read_dir(dir); });
}

Reader Reader::read_dir(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  WF_USAGE_CHECK(fs::is_directory(dir, ec),
                 "'{}' is not a folder: give a Hugging Face checkpoint "
                 "folder (model.safetensors or model.safetensors.index.json)",
                 dir);
  const fs::path single = fs::path(dir) / "model.safetensors";
  if (fs::exists(single, ec)) return open_file(single.string());
  const fs::path index_path = fs::path(dir) / "model.safetensors.index.json";
  WF_USAGE_CHECK(fs::exists(index_path, ec),
                 "'{}' holds neither model.safetensors nor model.safetensors.index.json", dir);
  const std::string where = index_path.string();
  const std::string text = read_file(where);
  json index;
  try {
    index = json::parse(text);
  } catch (const json::exception& e) {
    throw UsageError(fmt::format("{}: not JSON: {}", where, describe_json_error(text, e)));
  }
  WF_USAGE_CHECK(
      index.is_object() && index.contains("weight_map") && index["weight_map"].is_object(),
      "{}: no \"weight_map\" object (tensor name -> shard file)", where);
  // The shards in the order the index first names them, each with the tensors it should hold.
  std::vector<std::string> shards;
  std::map<std::string, std::set<std::string>> expected;
  for (const auto& [name, shard] : index["weight_map"].items()) {
    WF_USAGE_CHECK(shard.is_string(), "{}: the shard of tensor '{}' is {}, not a file name", where,
                   name, shard.dump());
    const std::string file = shard.get<std::string>();
    WF_USAGE_CHECK(
        !file.empty() && file.find('/') == std::string::npos && file != "." && file != "..",
        "{}: tensor '{}' is in shard '{}', not a file name in the folder", where, name, file);
    if (!expected.count(file)) shards.push_back(file);
    expected[file].insert(name);
  }
  Reader r;
  r.source_ = dir;
  for (const std::string& file : shards) {
    const std::string path = (fs::path(dir) / file).string();
    WF_USAGE_CHECK(fs::is_regular_file(path, ec), "{}: the shard '{}' is missing", where, path);
    const size_t first = r.tensors_.size();
    r.add_file(path, nullptr);
    std::set<std::string>& names = expected[file];
    for (size_t i = first; i < r.tensors_.size(); ++i) {
      WF_USAGE_CHECK(names.erase(r.tensors_[i].name) == 1,
                     "{}: shard '{}' holds tensor '{}', which the index puts {}", where, file,
                     r.tensors_[i].name,
                     index["weight_map"].contains(r.tensors_[i].name)
                         ? "in '" + index["weight_map"][r.tensors_[i].name].get<std::string>() + "'"
                         : "nowhere");
    }
    WF_USAGE_CHECK(names.empty(), "{}: tensor '{}' is absent from its shard '{}'", where,
                   names.empty() ? "" : *names.begin(), file);
  }
  return r;
}

const TensorInfo& Reader::info(const std::string& name) const {
  const auto it = index_.find(name);
  if (it == index_.end())
    on_one_line([&] { throw UsageError(fmt::format("{}: no tensor '{}'", source_, name)); });
  return tensors_[it->second];
}

std::vector<float> Reader::read_f32(const std::string& name) const {
  return on_one_line([&] { return read_values(name); });
}

std::vector<float> Reader::read_values(const std::string& name) const {
  const TensorInfo& t = info(name);
  const int64_t elem = dtype_size(t.dtype);
  WF_USAGE_CHECK(t.dtype == "F32" || t.dtype == "BF16" || t.dtype == "F16",
                 "{}: tensor '{}' has dtype {}; wallfacer reads F32, BF16 and F16 tensors", t.file,
                 name, t.dtype);
  const int64_t count = (t.end - t.begin) / elem;
  const uint64_t offset = uint64_t(data_start_.at(t.file) + t.begin);
  const uint64_t n = uint64_t(t.end - t.begin);
  std::string read;
  const char* bytes = nullptr;
  if (const auto mem = in_memory_.find(t.file); mem != in_memory_.end()) {
    bytes = mem->second->data() + offset;
  } else {
    read = read_range(t.file, offset, n);
    bytes = read.data();
  }
  std::vector<float> out(size_t(count), 0.0f);
  for (int64_t i = 0; i < count; ++i) {
    const char* p = bytes + i * elem;
    if (elem == 4) {
      std::memcpy(&out[size_t(i)], p, 4);
      continue;
    }
    const auto bits = uint16_t(uint8_t(p[0]) | uint16_t(uint8_t(p[1])) << 8);
    out[size_t(i)] = t.dtype == "BF16" ? bits_to_float(bits) : f16_to_float(bits);
  }
  return out;
}

void write_file(const std::string& path, const std::vector<WriteTensor>& tensors, Dtype dtype,
                const std::map<std::string, std::string>& metadata) {
  const int64_t elem = dtype_bytes(dtype);
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header[std::string(kMetadataKey)] = metadata;
  std::set<std::string> names;
  std::vector<int64_t> counts;
  int64_t at = 0;
  for (const WriteTensor& t : tensors) {
    WF_USAGE_CHECK(t.name != kMetadataKey && names.insert(t.name).second,
                   "{}: cannot write tensor '{}': {}", path, t.name,
                   t.name == kMetadataKey ? "the name is reserved" : "the name is given twice");
    int64_t count = 1;
    for (int64_t d : t.shape) {
      WF_USAGE_CHECK(d >= 0, "{}: tensor '{}' has the negative dimension {}", path, t.name, d);
      WF_USAGE_CHECK(d == 0 || count <= kInt64Max / elem / d,
                     "{}: tensor '{}' of shape [{}] is too large", path, t.name,
                     fmt::join(t.shape, ", "));
      count *= d;
    }
    WF_USAGE_CHECK(count == 0 || t.data != nullptr, "{}: tensor '{}' has no data", path, t.name);
    header[t.name] = {{"dtype", dtype == Dtype::fp32 ? "F32" : "BF16"},
                      {"shape", t.shape},
                      {"data_offsets", {at, at + count * elem}}};
    at += count * elem;
    counts.push_back(count);
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  std::string bytes(8 + text.size() + size_t(at), '\0');
  for (int i = 0; i < 8; ++i) bytes[size_t(i)] = char(uint64_t(text.size()) >> (8 * i) & 0xff);
  std::memcpy(bytes.data() + 8, text.data(), text.size());
  char* out = bytes.data() + 8 + text.size();
  for (size_t k = 0; k < tensors.size(); ++k) {
    const float* x = tensors[k].data;
    for (int64_t i = 0; i < counts[k]; ++i, out += elem) {
      if (dtype == Dtype::fp32) {
        std::memcpy(out, &x[i], 4);
      } else {
        const uint16_t b = to_bf16_bits(x[i]);
        out[0] = char(b & 0xff);
        out[1] = char(b >> 8);
      }
    }
  }
  write_file_atomic(path, bytes);
}

}  // namespace wallfacer::safetensors
