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

// A version 1.0 file by hand: magic, header length, the dict, then the data bytes.
std::string npy_bytes(const std::string& shape, const std::string& data,
                      const std::string& descr = "<f4", const std::string& order = "False") {
  const std::string dict =
      "{'descr': '" + descr + "', 'fortran_order': " + order + ", 'shape': " + shape + ", }\n";
  return std::string("\x93NUMPY\x01\x00", 8) + char(dict.size() & 0xff) + char(dict.size() >> 8) +
         dict + data;
}

TEST(Npy, ParsesShapesFromBytes) {
  std::vector<int64_t> shape;
  const std::string two_floats("\x00\x00\x80\x3f\x00\x00\x00\xc0", 8);  // 1, -2
  EXPECT_EQ(parse_npy(npy_bytes("(2,)", two_floats), "x", shape), (std::vector<float>{1, -2}));
  EXPECT_EQ(shape, (std::vector<int64_t>{2}));
  EXPECT_EQ(parse_npy(npy_bytes("(1, 2)", two_floats), "x", shape).size(), 2u);
  EXPECT_EQ(shape, (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(parse_npy(npy_bytes("()", two_floats.substr(0, 4)), "x", shape),
            (std::vector<float>{1}));
  EXPECT_TRUE(shape.empty());
  // A zero dimension holds nothing, whatever the others say.
  EXPECT_TRUE(parse_npy(npy_bytes("(4611686018427387904, 0)", ""), "x", shape).empty());
  EXPECT_EQ(shape, (std::vector<int64_t>{4611686018427387904, 0}));
}

// Expects `parse` (parse_npy or parse_npy_ints) to refuse `bytes` with a UsageError whose message
// holds `why`.
template <class Parse>
void expect_refused(Parse parse, const std::string& bytes, const std::string& why) {
  std::vector<int64_t> shape;
  try {
    parse(bytes, "x.npy", shape);
    ADD_FAILURE() << "accepted: " << why;
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << e.what();
  }
}

TEST(Npy, RefusesBytesThatDoNotFitTheirShape) {
  const std::string eight(32, '\0');
  auto refused = [](const std::string& bytes, const std::string& why) {
    expect_refused(parse_npy, bytes, why);
  };
  refused(npy_bytes("(9,)", eight), "needs more than the 32 bytes");
  refused(npy_bytes("(7,)", eight), "needs 28 bytes of data, the file holds 32");
  // Products that wrap in 64 bits, negative and non-numeric dimensions, a cut-off header.
  refused(npy_bytes("(4294967296, 4294967296, 2)", eight), "needs more than");
  refused(npy_bytes("(-1, -8)", eight), "'-1', not a dimension");
  refused(npy_bytes("(x,)", eight), "'x', not a dimension");
  refused(npy_bytes("(99999999999999999999,)", eight), "not a dimension");
  refused(npy_bytes("(2,,)", eight), "'', not a dimension");
  refused(npy_bytes("(8,)", eight).substr(0, 40), "cut off");
  refused(std::string("\x93NUMPY\x01", 7), "not a version 1 .npy file");
}

TEST(Npy, ReadsIntegersOfEveryWidth) {
  std::vector<int64_t> shape;
  // Little-endian bytes spelled out: 1, -2 (or its unsigned twin), and the type's largest.
  EXPECT_EQ(parse_npy_ints(npy_bytes("(3,)", std::string("\x01\xfe\x7f", 3), "|i1"), "x", shape),
            (std::vector<int64_t>{1, -2, 127}));
  EXPECT_EQ(shape, (std::vector<int64_t>{3}));
  EXPECT_EQ(parse_npy_ints(npy_bytes("(3,)", std::string("\x01\xfe\xff", 3), "|u1"), "x", shape),
            (std::vector<int64_t>{1, 254, 255}));
  EXPECT_EQ(
      parse_npy_ints(npy_bytes("(2,)", std::string("\x01\x00\xfe\xff", 4), "<i2"), "x", shape),
      (std::vector<int64_t>{1, -2}));
  EXPECT_EQ(
      parse_npy_ints(npy_bytes("(2,)", std::string("\x01\x00\xfe\xff", 4), "<u2"), "x", shape),
      (std::vector<int64_t>{1, 65534}));
  const std::string i4("\x00\xf4\x01\x00\xfe\xff\xff\xff\xff\xff\xff\x7f", 12);
  EXPECT_EQ(parse_npy_ints(npy_bytes("(1, 3)", i4, "<i4"), "x", shape),
            (std::vector<int64_t>{128000, -2, 2147483647}));
  EXPECT_EQ(shape, (std::vector<int64_t>{1, 3}));
  EXPECT_EQ(parse_npy_ints(npy_bytes("(3,)", i4, "<u4"), "x", shape),
            (std::vector<int64_t>{128000, 4294967294, 2147483647}));
  const std::string i8("\xfe\xff\xff\xff\xff\xff\xff\xff\x00\x00\x00\x00\x01\x00\x00\x00", 16);
  EXPECT_EQ(parse_npy_ints(npy_bytes("(2,)", i8, "<i8"), "x", shape),
            (std::vector<int64_t>{-2, int64_t(1) << 32}));
  EXPECT_TRUE(parse_npy_ints(npy_bytes("(0,)", "", "<i8"), "x", shape).empty());
  // What write_npy writes as int64 reads back.
  const std::string path = testing::TempDir() + "wf_npy_ints.npy";
  const std::vector<int64_t> ids = {3, 0, 1 << 30, -7};
  write_npy(path, ids.data(), {2, 2});
  EXPECT_EQ(read_npy_ints(path, shape), ids);
  EXPECT_EQ(shape, (std::vector<int64_t>{2, 2}));
  std::remove(path.c_str());

  auto refused = [](const std::string& bytes, const std::string& why) {
    expect_refused(parse_npy_ints, bytes, why);
  };
  refused(npy_bytes("(2,)", i8, "<f8"), "x.npy: the array is '<f8'; only little-endian integers");
  refused(npy_bytes("(1,)", i8.substr(0, 4), "<f4"), "the array is '<f4'");
  refused(npy_bytes("(2,)", i8, "<u8"), "the array is '<u8'");
  refused(npy_bytes("(2,)", i8.substr(0, 8), ">i4"), "the array is '>i4'");
  refused(npy_bytes("(1, 2)", i8.substr(0, 8), "<i4", "True"), "'<i4' in Fortran order");
  refused(npy_bytes("(3,)", i8, "<i8"), "needs more than the 16 bytes");
  refused(npy_bytes("(1,)", i8, "<i8"), "needs 8 bytes of data, the file holds 16");
  // And the float reader refuses integers.
  expect_refused(parse_npy, npy_bytes("(2,)", i8, "<i8"),
                 "the array is '<i8'; only little-endian float32");
}

}  // namespace
}  // namespace wallfacer
