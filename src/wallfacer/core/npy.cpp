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

std::vector<float> parse_npy(std::string_view bytes, const std::string& name,
                             std::vector<int64_t>& shape) {
  WF_CHECK(bytes.size() >= 10 && bytes.substr(0, 6) == "\x93NUMPY" && bytes[6] == 1,
           "{} is not a version 1 .npy file", name);
  const size_t len = uint8_t(bytes[8]) | size_t(uint8_t(bytes[9])) << 8;
  WF_CHECK(bytes.size() - 10 >= len, "{}: the header of {} bytes is cut off after {}", name, len,
           bytes.size() - 10);
  const std::string_view header = bytes.substr(10, len), data = bytes.substr(10 + len);
  WF_CHECK(header.find("'descr': '<f4'") != std::string_view::npos &&
               header.find("'fortran_order': False") != std::string_view::npos,
           "{}: only little-endian float32 in C order is supported", name);
  constexpr std::string_view kShape = "'shape': (";
  const size_t open = header.find(kShape);
  const size_t close = open == std::string_view::npos ? open : header.find(')', open);
  WF_CHECK(close != std::string_view::npos, "{}: no shape in the header", name);
  std::string_view dims = header.substr(open + kShape.size(), close - open - kShape.size());
  // Dimensions separated by commas, one trailing comma allowed: "()", "(7,)", "(2, 3, 5)".
  shape.clear();
  for (bool more = !dims.empty(); more;) {
    const size_t comma = dims.find(',');
    std::string_view item = dims.substr(0, comma);
    more = comma != std::string_view::npos;
    dims = more ? dims.substr(comma + 1) : std::string_view();
    while (!item.empty() && item.front() == ' ') item.remove_prefix(1);
    while (!item.empty() && item.back() == ' ') item.remove_suffix(1);
    if (item.empty() && !more && !shape.empty()) break;  // after the trailing comma
    int64_t d = -1;
    const auto [end, ec] = std::from_chars(item.data(), item.data() + item.size(), d);
    WF_CHECK(ec == std::errc() && end == item.data() + item.size() && d >= 0,
             "{}: the shape holds '{}', not a dimension (a non-negative integer)", name, item);
    shape.push_back(d);
  }
  // The product is compared with the floats the data holds before it is formed: it cannot wrap.
  const uint64_t floats = data.size() / sizeof(float);
  uint64_t count = 1;
  if (std::find(shape.begin(), shape.end(), 0) != shape.end()) count = 0;
  for (size_t i = 0; i < shape.size() && count > 0; ++i) {
    const auto d = uint64_t(shape[i]);
    WF_CHECK(count <= floats / d,
             "{}: the shape ({}) needs more than the {} bytes of data the file holds", name,
             fmt::join(shape, ", "), data.size());
    count *= d;
  }
  WF_CHECK(data.size() == count * sizeof(float),
           "{}: the shape ({}) needs {} bytes of data, the file holds {}", name,
           fmt::join(shape, ", "), count * sizeof(float), data.size());
  std::vector<float> out(count);
  if (count > 0) std::memcpy(out.data(), data.data(), data.size());
  return out;
}

std::vector<float> read_npy(const std::string& path, std::vector<int64_t>& shape) {
  return parse_npy(read_file(path), path, shape);
}

}  // namespace wallfacer
