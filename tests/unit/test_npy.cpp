// .npy files: the header NumPy expects (magic, version 1.0, dict, 64-byte alignment) and a round
// trip of the data.

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "wallfacer/core/error.h"
#include "wallfacer/core/npy.h"

namespace wallfacer {
namespace {

TEST(Npy, HeaderAndRoundTrip) {
  const std::string path = testing::TempDir() + "wf_npy_test.npy";
  std::vector<float> x(2 * 3 * 5);
  for (size_t i = 0; i < x.size(); ++i) x[i] = float(i) * 0.5f - 3.0f;
  write_npy(path, x.data(), {2, 3, 5});
  std::ifstream f(path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  ASSERT_GE(bytes.size(), 10u);
  EXPECT_EQ(bytes.substr(0, 6), "\x93NUMPY");
  EXPECT_EQ(bytes[6], 1);
  EXPECT_EQ(bytes[7], 0);
  const size_t hlen = uint8_t(bytes[8]) | size_t(uint8_t(bytes[9])) << 8;
  EXPECT_EQ((10 + hlen) % 64, 0u);
  const std::string header = bytes.substr(10, hlen);
  EXPECT_NE(header.find("'descr': '<f4', 'fortran_order': False, 'shape': (2, 3, 5), }"),
            std::string::npos)
      << header;
  EXPECT_EQ(header.back(), '\n');
  EXPECT_EQ(bytes.size(), 10 + hlen + x.size() * 4);

  std::vector<int64_t> shape;
  EXPECT_EQ(read_npy(path, shape), x);
  EXPECT_EQ(shape, (std::vector<int64_t>{2, 3, 5}));

  write_npy(path, x.data(), {7});
  EXPECT_EQ(read_npy(path, shape).size(), 7u);
  EXPECT_EQ(shape, (std::vector<int64_t>{7}));
  std::remove(path.c_str());
  EXPECT_THROW(read_npy(path, shape), Error);
}

}  // namespace
}  // namespace wallfacer
