#include "wallfacer/core/npy.h"

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <fstream>

#include "wallfacer/core/error.h"
#include "wallfacer/core/file.h"

namespace wallfacer {

namespace {

// Writes `count` elements of `bytes_per` bytes each, of NumPy type `descr`, via a temporary file.
void write_npy_bytes(const std::string& path, const char* descr, const void* data, size_t bytes_per,
                     const std::vector<int64_t>& shape) {
  std::string dims;
  int64_t count = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    dims += std::to_string(shape[i]) + (shape.size() == 1 || i + 1 < shape.size() ? "," : "");
    if (i + 1 < shape.size()) dims += " ";
    count *= shape[i];
  }
  std::string header =
      std::string("{'descr': '") + descr + "', 'fortran_order': False, 'shape': (" + dims + "), }";
  // magic (6) + version (2) + header length (2) + header, padded with spaces to a multiple of 64
  // and ended by a newline.
  const size_t total = (10 + header.size() + 1 + 63) / 64 * 64;
  header.append(total - 10 - header.size() - 1, ' ');
  header += '\n';
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    WF_CHECK(f.good(), "cannot open {} for writing", tmp);
    const char magic[8] = {'\x93', 'N', 'U', 'M', 'P', 'Y', 1, 0};
    f.write(magic, 8);
    const uint16_t len = uint16_t(header.size());
    const char len_le[2] = {char(len & 0xff), char(len >> 8)};
    f.write(len_le, 2);
    f.write(header.data(), std::streamsize(header.size()));
    f.write(static_cast<const char*>(data), std::streamsize(size_t(count) * bytes_per));
    f.flush();
    WF_CHECK(f.good(), "writing {} failed", tmp);
  }
  WF_CHECK(std::rename(tmp.c_str(), path.c_str()) == 0, "cannot rename {} to {}: {}", tmp, path,
           std::strerror(errno));
}

}  // namespace

void write_npy(const std::string& path, const float* data, const std::vector<int64_t>& shape) {
  write_npy_bytes(path, "<f4", data, sizeof(float), shape);
}

void write_npy(const std::string& path, const int64_t* data, const std::vector<int64_t>& shape) {
  write_npy_bytes(path, "<i8", data, sizeof(int64_t), shape);
}

namespace {

// A parsed .npy file: its element type ('descr', e.g. "<f4"), shape and data bytes.
struct NpyContents {
  std::string descr;
  std::vector<int64_t> shape;
  std::string_view data;
  uint64_t count = 0;  // elements: the product of the shape
};

// Parses the header of a version 1 file whose elements have `item_bytes(descr)` bytes each (0:
// a type the caller does not read, refused naming `supported`), and checks that the shape accounts
// for exactly the data bytes that follow (before anything is allocated).
template <class ItemBytes>
NpyContents parse_npy_contents(std::string_view bytes, const std::string& name,
                               ItemBytes&& item_bytes, const char* supported) {
  WF_USAGE_CHECK(bytes.size() >= 10 && bytes.substr(0, 6) == "\x93NUMPY" && bytes[6] == 1,
                 "{} is not a version 1 .npy file", name);
  const size_t len = uint8_t(bytes[8]) | size_t(uint8_t(bytes[9])) << 8;
  WF_USAGE_CHECK(bytes.size() - 10 >= len, "{}: the header of {} bytes is cut off after {}", name,
                 len, bytes.size() - 10);
  NpyContents c;
  const std::string_view header = bytes.substr(10, len);
  c.data = bytes.substr(10 + len);
  constexpr std::string_view kDescr = "'descr': '";
  const size_t at = header.find(kDescr);
  const size_t end = at == std::string_view::npos ? at : header.find('\'', at + kDescr.size());
  if (end != std::string_view::npos)
    c.descr = std::string(header.substr(at + kDescr.size(), end - at - kDescr.size()));
  const uint64_t item = end == std::string_view::npos ? 0 : item_bytes(c.descr);
  WF_USAGE_CHECK(
      item > 0 && header.find("'fortran_order': False") != std::string_view::npos,
      "{}: the array is '{}'{}; only {} in C order is supported", name, c.descr,
      header.find("'fortran_order': True") != std::string_view::npos ? " in Fortran order" : "",
      supported);
  constexpr std::string_view kShape = "'shape': (";
  const size_t open = header.find(kShape);
  const size_t close = open == std::string_view::npos ? open : header.find(')', open);
  WF_USAGE_CHECK(close != std::string_view::npos, "{}: no shape in the header", name);
  std::string_view dims = header.substr(open + kShape.size(), close - open - kShape.size());
  // Dimensions separated by commas, one trailing comma allowed: "()", "(7,)", "(2, 3, 5)".
  for (bool more = !dims.empty(); more;) {
    const size_t comma = dims.find(',');
    std::string_view dim = dims.substr(0, comma);
    more = comma != std::string_view::npos;
    dims = more ? dims.substr(comma + 1) : std::string_view();
    while (!dim.empty() && dim.front() == ' ') dim.remove_prefix(1);
    while (!dim.empty() && dim.back() == ' ') dim.remove_suffix(1);
    if (dim.empty() && !more && !c.shape.empty()) break;  // after the trailing comma
    int64_t d = -1;
    const auto [stop, ec] = std::from_chars(dim.data(), dim.data() + dim.size(), d);
    WF_USAGE_CHECK(ec == std::errc() && stop == dim.data() + dim.size() && d >= 0,
                   "{}: the shape holds '{}', not a dimension (a non-negative integer)", name, dim);
    c.shape.push_back(d);
  }
  // The product is compared with the elements the data holds before it is formed: it cannot wrap.
  const uint64_t elements = c.data.size() / item;
  c.count = 1;
  if (std::find(c.shape.begin(), c.shape.end(), 0) != c.shape.end()) c.count = 0;
  for (size_t i = 0; i < c.shape.size() && c.count > 0; ++i) {
    const auto d = uint64_t(c.shape[i]);
    WF_USAGE_CHECK(c.count <= elements / d,
                   "{}: the shape ({}) needs more than the {} bytes of data the file holds", name,
                   fmt::join(c.shape, ", "), c.data.size());
    c.count *= d;
  }
  WF_USAGE_CHECK(c.data.size() == c.count * item,
                 "{}: the shape ({}) needs {} bytes of data, the file holds {}", name,
                 fmt::join(c.shape, ", "), c.count * item, c.data.size());
  return c;
}

// Bytes of one element of the integer types read_npy_ints reads, 0 for any other.
uint64_t int_item_bytes(const std::string& descr) {
  if (descr == "|i1" || descr == "|u1") return 1;
  if (descr == "<i2" || descr == "<u2") return 2;
  if (descr == "<i4" || descr == "<u4") return 4;
  if (descr == "<i8") return 8;
  return 0;
}

// The little-endian integer of `n` bytes at `p`, signed or not.
int64_t load_int(const char* p, uint64_t n, bool is_signed) {
  uint64_t v = 0;
  for (uint64_t i = n; i-- > 0;) v = v << 8 | uint8_t(p[i]);
  if (is_signed && n < 8 && (v >> (8 * n - 1)) != 0) v |= ~uint64_t(0) << (8 * n);  // sign-extend
  return int64_t(v);
}

}  // namespace

std::vector<float> parse_npy(std::string_view bytes, const std::string& name,
                             std::vector<int64_t>& shape) {
  const NpyContents c = parse_npy_contents(
      bytes, name, [](const std::string& d) { return d == "<f4" ? uint64_t(4) : 0; },
      "little-endian float32 ('<f4')");
  shape = c.shape;
  std::vector<float> out(c.count);
  if (c.count > 0) std::memcpy(out.data(), c.data.data(), c.data.size());
  return out;
}

std::vector<int64_t> parse_npy_ints(std::string_view bytes, const std::string& name,
                                    std::vector<int64_t>& shape) {
  const NpyContents c = parse_npy_contents(
      bytes, name, int_item_bytes,
      "little-endian integers of 1, 2 or 4 bytes, signed or not, or int64 ('<i4', '<u4', '<i8', "
      "...)");
  shape = c.shape;
  const uint64_t n = int_item_bytes(c.descr);
  const bool is_signed = c.descr[1] == 'i';
  std::vector<int64_t> out(c.count);
  for (uint64_t i = 0; i < c.count; ++i) out[i] = load_int(c.data.data() + i * n, n, is_signed);
  return out;
}

std::vector<int64_t> read_npy_ints(const std::string& path, std::vector<int64_t>& shape) {
  return parse_npy_ints(read_file(path), path, shape);
}

std::vector<float> read_npy(const std::string& path, std::vector<int64_t>& shape) {
  return parse_npy(read_file(path), path, shape);
}

}  // namespace wallfacer
