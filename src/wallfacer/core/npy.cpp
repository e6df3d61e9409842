#include "wallfacer/core/npy.h"

#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include "wallfacer/core/error.h"

namespace wallfacer {

void write_npy(const std::string& path, const float* data, const std::vector<int64_t>& shape) {
  std::string dims;
  int64_t count = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    dims += std::to_string(shape[i]) + (shape.size() == 1 || i + 1 < shape.size() ? "," : "");
    if (i + 1 < shape.size()) dims += " ";
    count *= shape[i];
  }
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (" + dims + "), }";
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
    f.write(reinterpret_cast<const char*>(data), std::streamsize(count * sizeof(float)));
    f.flush();
    WF_CHECK(f.good(), "writing {} failed", tmp);
  }
  WF_CHECK(std::rename(tmp.c_str(), path.c_str()) == 0, "cannot rename {} to {}: {}", tmp, path,
           std::strerror(errno));
}

std::vector<float> read_npy(const std::string& path, std::vector<int64_t>& shape) {
  std::ifstream f(path, std::ios::binary);
  WF_CHECK(f.good(), "cannot open {}", path);
  char magic[10];
  f.read(magic, 10);
  WF_CHECK(f.good() && std::memcmp(magic, "\x93NUMPY", 6) == 0 && magic[6] == 1,
           "{} is not a version 1 .npy file", path);
  const size_t len = uint8_t(magic[8]) | size_t(uint8_t(magic[9])) << 8;
  std::string header(len, ' ');
  f.read(header.data(), std::streamsize(len));
  WF_CHECK(header.find("'descr': '<f4'") != std::string::npos &&
               header.find("'fortran_order': False") != std::string::npos,
           "{}: only little-endian float32 in C order is supported", path);
  const size_t open = header.find('('), close = header.find(')');
  WF_CHECK(open != std::string::npos && close != std::string::npos, "{}: no shape", path);
  shape.clear();
  std::stringstream dims(header.substr(open + 1, close - open - 1));
  std::string item;
  int64_t count = 1;
  while (std::getline(dims, item, ',')) {
    if (item.find_first_not_of(' ') == std::string::npos) continue;
    shape.push_back(std::stoll(item));
    count *= shape.back();
  }
  std::vector<float> data(static_cast<size_t>(count));
  f.read(reinterpret_cast<char*>(data.data()), std::streamsize(count * sizeof(float)));
  WF_CHECK(f.good(), "{}: truncated data", path);
  return data;
}

}  // namespace wallfacer
