// safetensors files: files written by tests/golden/gen_safetensors.py (Python's struct module,
// not wallfacer) read back to the values it wrote, a write -> read round trip, and every refusal.

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "wallfacer/core/bf16.h"
#include "wallfacer/core/error.h"
#include "wallfacer/core/safetensors.h"

namespace wallfacer::safetensors {
namespace {

namespace fs = std::filesystem;

const std::string kGolden = std::string(WALLFACER_SOURCE_DIR) + "/tests/golden/safetensors/";

nlohmann::json expected_values() {
  std::ifstream f(kGolden + "expected.json");
  EXPECT_TRUE(f.good()) << "missing " << kGolden << "expected.json";
  return nlohmann::json::parse(f);
}

std::vector<uint32_t> bits_of(const std::vector<float>& x) {
  std::vector<uint32_t> out;
  for (float v : x) out.push_back(float_bits(v));
  return out;
}

// Every float tensor the generator listed reads back bit for bit as the fp32 values it wrote.
void expect_generated(const Reader& r, const nlohmann::json& expected, const std::string& name) {
  SCOPED_TRACE(name);
  const nlohmann::json& e = expected.at(name);
  ASSERT_TRUE(r.has(name));
  EXPECT_EQ(r.info(name).dtype, e["dtype"].get<std::string>());
  EXPECT_EQ(r.info(name).shape, e["shape"].get<std::vector<int64_t>>());
  EXPECT_EQ(bits_of(r.read_f32(name)), e["f32_bits"].get<std::vector<uint32_t>>());
}

TEST(Safetensors, ReadsGeneratedDtypes) {
  const nlohmann::json expected = expected_values();
  const Reader r = Reader::open_file(kGolden + "dtypes.safetensors");
  for (const char* name : {"weight.f32", "a.bf16", "m.f16", "empty.f32", "scalar.f16"})
    expect_generated(r, expected, name);
  // Some values spelled out: bf16 0x0001 is the smallest subnormal 2^-133, f16 2^-24 likewise.
  const std::vector<float> bf = r.read_f32("a.bf16");
  EXPECT_EQ(bf[0], 1.0f);
  EXPECT_EQ(bf[1], -5.0f);
  EXPECT_EQ(bf[2], std::ldexp(1.0f, -133));
  EXPECT_TRUE(std::signbit(bf[4]) && bf[4] == 0.0f);
  EXPECT_EQ(bf[5], -INFINITY);
  const std::vector<float> h = r.read_f32("m.f16");
  EXPECT_EQ(h[2], 65504.0f);
  EXPECT_EQ(h[3], std::ldexp(1.0f, -24));
  EXPECT_EQ(h[6], -INFINITY);
  EXPECT_TRUE(std::isnan(h[7]));
  // In the order of their data, with the generator's offsets and file.
  std::vector<std::string> order;
  for (const TensorInfo& t : r.tensors()) order.push_back(t.name);
  EXPECT_EQ(order, (std::vector<std::string>{"weight.f32", "a.bf16", "m.f16", "ids.i64",
                                             "empty.f32", "scalar.f16"}));
  EXPECT_EQ(r.info("a.bf16").begin, 24);
  EXPECT_EQ(r.info("a.bf16").end, 38);
  EXPECT_EQ(r.info("a.bf16").file, kGolden + "dtypes.safetensors");
  EXPECT_EQ(r.metadata(), (std::map<std::string, std::string>{{"format", "pt"},
                                                              {"source", "gen_safetensors.py"}}));
  EXPECT_TRUE(r.read_f32("empty.f32").empty());
  // An integer tensor is listed but not read as floats.
  EXPECT_EQ(r.info("ids.i64").shape, (std::vector<int64_t>{3}));
  try {
    r.read_f32("ids.i64");
    ADD_FAILURE() << "read an I64 tensor as floats";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("'ids.i64' has dtype I64"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(r.has("missing"));
  EXPECT_THROW(r.info("missing"), UsageError);
}

TEST(Safetensors, ReadsGeneratedShardedFolder) {
  const nlohmann::json expected = expected_values();
  const Reader r = Reader::open_dir(kGolden + "sharded");
  ASSERT_EQ(r.tensors().size(), 3u);
  for (const char* name : {"model.embed_tokens.weight", "model.norm.weight", "lm_head.weight"})
    expect_generated(r, expected, name);
  EXPECT_EQ(r.info("lm_head.weight").file,
            (fs::path(kGolden + "sharded") / "model-00002-of-00002.safetensors").string());
  EXPECT_EQ(r.metadata().at("format"), "pt");
}

TEST(Safetensors, HalfToFloatMatchesItsDefinition) {
  // Every finite half: (-1)^s 2^(e-15) (1 + m/1024), subnormals 2^-14 (m/1024), in double.
  for (uint32_t b = 0; b < 0x10000; ++b) {
    const int e = (b >> 10) & 0x1f, m = b & 0x3ff;
    const float got = f16_to_float(uint16_t(b));
    if (e == 0x1f) {
      EXPECT_TRUE(m ? std::isnan(got) : std::isinf(got)) << b;
      continue;
    }
    const double mag = e == 0 ? std::ldexp(m / 1024.0, -14) : std::ldexp(1 + m / 1024.0, e - 15);
    const double want = (b & 0x8000) ? -mag : mag;
    ASSERT_EQ(double(got), want) << b;
    ASSERT_EQ(std::signbit(got), bool(b & 0x8000)) << b;
  }
}

class SafetensorsFiles : public testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(testing::TempDir()) / ("wf_safetensors_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  void put(const std::string& name, const std::string& bytes) const {
    std::ofstream(path(name), std::ios::binary) << bytes;
  }
  fs::path dir_;
};

TEST_F(SafetensorsFiles, RoundTripF32AndBf16) {
  std::vector<float> a(2 * 3 * 4), b = {1.0f, -0.0f, INFINITY, 3.0e38f, 1e-42f};
  for (size_t i = 0; i < a.size(); ++i) a[i] = std::sin(float(i) * 0.37f) * 100.0f;
  const std::vector<WriteTensor> tensors = {
      {"layers.0.w", {2, 3, 4}, a.data()}, {"b", {5}, b.data()}, {"none", {0}, nullptr}};
  write_file(path("f32.safetensors"), tensors, Dtype::fp32, {{"format", "pt"}});
  const Reader r = Reader::open_file(path("f32.safetensors"));
  EXPECT_EQ(bits_of(r.read_f32("layers.0.w")), bits_of(a));
  EXPECT_EQ(bits_of(r.read_f32("b")), bits_of(b));
  EXPECT_EQ(r.info("layers.0.w").shape, (std::vector<int64_t>{2, 3, 4}));
  EXPECT_EQ(r.info("layers.0.w").dtype, "F32");
  EXPECT_TRUE(r.read_f32("none").empty());
  EXPECT_EQ(r.metadata(), (std::map<std::string, std::string>{{"format", "pt"}}));
  // The tensors in the order given, the header padded to 8 bytes.
  ASSERT_EQ(r.tensors().size(), 3u);
  EXPECT_EQ(r.tensors()[0].name, "layers.0.w");
  EXPECT_EQ(r.tensors()[1].begin, 96);
  std::ifstream f(path("f32.safetensors"), std::ios::binary);
  unsigned char len[8];
  f.read(reinterpret_cast<char*>(len), 8);
  EXPECT_EQ(len[0] % 8, 0);
  EXPECT_FALSE(fs::exists(path("f32.safetensors.tmp")));

  // bf16: rounded to nearest, ties to even, computed here from the bits: 1 + 2^-8 lies halfway
  // between 1 and 1 + 2^-7 and goes to 1 (even); 1 + 3 * 2^-8 goes up to 1 + 2^-6 (even).
  const std::vector<float> ties = {1.0f + std::ldexp(1.0f, -8), 1.0f + 3 * std::ldexp(1.0f, -8),
                                   1.0f + std::ldexp(1.0f, -8) + std::ldexp(1.0f, -20), -2.0f};
  write_file(path("bf16.safetensors"), {{"t", {2, 2}, ties.data()}}, Dtype::bf16);
  const Reader rb = Reader::open_file(path("bf16.safetensors"));
  EXPECT_EQ(rb.info("t").dtype, "BF16");
  EXPECT_EQ(rb.info("t").end, 8);
  EXPECT_EQ(rb.read_f32("t"), (std::vector<float>{1.0f, 1.0f + std::ldexp(1.0f, -6),
                                                  1.0f + std::ldexp(1.0f, -7), -2.0f}));
  EXPECT_TRUE(rb.metadata().empty());
  // What bf16 stores, written again as bf16, is the same file.
  const std::vector<float> back = rb.read_f32("t");
  write_file(path("bf16b.safetensors"), {{"t", {2, 2}, back.data()}}, Dtype::bf16);
  std::ifstream f1(path("bf16.safetensors"), std::ios::binary),
      f2(path("bf16b.safetensors"), std::ios::binary);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(f1), {}),
            std::string(std::istreambuf_iterator<char>(f2), {}));
}

TEST_F(SafetensorsFiles, OpensAFolderWithOneFile) {
  const std::vector<float> x = {1, 2, 3};
  write_file(path("model.safetensors"), {{"x", {3}, x.data()}}, Dtype::fp32);
  EXPECT_EQ(Reader::open_dir(dir_.string()).read_f32("x"), x);
}

// The message of the UsageError `f` throws, or "" (a failure) when it throws none.
template <class F>
std::string usage_error(F&& f) {
  try {
    f();
  } catch (const UsageError& e) {
    const std::string what = e.what();
    EXPECT_EQ(what.find('\n'), std::string::npos) << what;
    return what;
  }
  ADD_FAILURE() << "no UsageError";
  return "";
}

std::string le64(uint64_t n) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[size_t(i)] = char(n >> (8 * i) & 0xff);
  return s;
}
// A file with this header text and `data` bytes after it.
std::string file_bytes(const std::string& header, const std::string& data) {
  return le64(header.size()) + header + data;
}

#define EXPECT_REFUSED(bytes, part)                                             \
  do {                                                                          \
    const std::string msg = usage_error([&] { Reader::parse(bytes, "x.st"); }); \
    EXPECT_NE(msg.find("x.st"), std::string::npos) << msg;                      \
    EXPECT_NE(msg.find(part), std::string::npos) << msg;                        \
  } while (0)

TEST(Safetensors, RefusesBadHeaders) {
  const std::string four(4, '\0');
  const std::string ok = R"("t":{"dtype":"F32","shape":[1],"data_offsets":[0,4]})";
  EXPECT_NO_THROW(Reader::parse(file_bytes("{" + ok + "}", four), "x.st"));
  EXPECT_REFUSED(std::string("\x02\x00\x00", 3), "truncated (3 bytes)");
  EXPECT_REFUSED(le64(100) + "{}", "header length 100 runs past the end");
  EXPECT_REFUSED(le64(~uint64_t(0)) + "{}", "runs past the end");
  EXPECT_REFUSED(file_bytes("{\"t\":", ""), "not JSON");
  EXPECT_REFUSED(file_bytes("[1,2]", ""), "not an object (array)");
  EXPECT_REFUSED(file_bytes(R"({"t":[1]})", ""), "tensor 't' is array");
  EXPECT_REFUSED(file_bytes(R"({"t":{"dtype":"F32","shape":[1]}})", four), "no \"data_offsets\"");
  // One tensor 't' of this dtype, shape and offsets over 4 data bytes.
  const struct {
    const char *dtype, *shape, *offsets, *part;
  } one_tensor[] = {
      {"Q4", "1", "0,4", "'t' has the unknown dtype 'Q4'"},
      {"F32", "2", "0,4", "needs 8 bytes"},
      {"F32", "-1", "0,4", "negative dimension -1"},
      {"F32", "1.5", "0,4", "not an integer"},
      {"F32", "1", "0,9223372036854775808", "overflows int64"},
      {"F32", "1", "-4,0", "not a non-negative integer"},
      {"F32", "1", "4,0", "ends (0) before it begins (4)"},
      // Dimensions whose product overflows int64, each of them alone fine.
      {"BF16", "4294967296,4294967296", "0,4", "more bytes than int64 counts"},
      {"F32", "2", "0,8", "runs past the 4 bytes"},
      {"F32", "[[1]]", "0,4", "deeper"},
  };
  for (const auto& c : one_tensor) {
    EXPECT_REFUSED(file_bytes(fmt::format(R"({{"t":{{"dtype":"{}","shape":[{}],)"
                                          R"("data_offsets":[{}]}}}})",
                                          c.dtype, c.shape, c.offsets),
                              four),
                   c.part);
  }
  // A name with a control character: the message stays on one line (usage_error checks it).
  EXPECT_REFUSED(file_bytes(R"({"a\nb":{"dtype":"Q4","shape":[1],"data_offsets":[0,4]}})", four),
                 "tensor 'a\\x0ab' has the unknown dtype");
  EXPECT_REFUSED(file_bytes(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                            R"("b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                            std::string(8, '\0')),
                 "overlaps that of 'a'");
  EXPECT_REFUSED(
      file_bytes(R"({"t":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", std::string(8, '\0')),
      "4 bytes before the data of tensor 't'");
  EXPECT_REFUSED(file_bytes("{" + ok + "}", std::string(6, '\0')), "2 bytes after the last");
  EXPECT_REFUSED(file_bytes("{" + ok + "," + ok + "}", four), "names 't' twice");
  EXPECT_REFUSED(file_bytes(R"({"__metadata__":{"k":1}})", ""), "__metadata__ 'k' is 1");
  EXPECT_REFUSED(file_bytes(R"({"__metadata__":[]})", ""), "__metadata__ is array");
}

TEST_F(SafetensorsFiles, RefusesBadFilesAndFolders) {
  const std::vector<float> x = {1, 2, 3, 4};
  write_file(path("ok.safetensors"), {{"a", {4}, x.data()}}, Dtype::fp32);
  std::ifstream f(path("ok.safetensors"), std::ios::binary);
  const std::string whole(std::istreambuf_iterator<char>(f), {});
  put("cut.safetensors", whole.substr(0, whole.size() - 1));
  std::string msg = usage_error([&] { Reader::open_file(path("cut.safetensors")); });
  EXPECT_NE(msg.find("cut.safetensors: the data of tensor 'a' [0, 16) runs past the 15 bytes"),
            std::string::npos)
      << msg;
  put("short.safetensors", whole.substr(0, 5));
  msg = usage_error([&] { Reader::open_file(path("short.safetensors")); });
  EXPECT_NE(msg.find("short.safetensors: the file is truncated (5 bytes)"), std::string::npos)
      << msg;
  // A header length beyond the format's limit, in a (sparse) file long enough to hold it.
  put("huge.safetensors", le64(uint64_t(200) << 20) + "{}");
  fs::resize_file(path("huge.safetensors"), uintmax_t(300) << 20);
  msg = usage_error([&] { Reader::open_file(path("huge.safetensors")); });
  EXPECT_NE(msg.find("huge.safetensors: the header length 209715200 is beyond the 104857600 bytes"),
            std::string::npos)
      << msg;
  msg = usage_error([&] { Reader::open_file(path("absent.safetensors")); });
  EXPECT_NE(msg.find("absent.safetensors"), std::string::npos) << msg;
  // A file that shrank after its header was read.
  const Reader r = Reader::open_file(path("ok.safetensors"));
  put("ok.safetensors", whole.substr(0, whole.size() - 8));
  msg = usage_error([&] { r.read_f32("a"); });
  EXPECT_NE(msg.find("truncated?"), std::string::npos) << msg;

  msg = usage_error([&] { Reader::open_dir(dir_.string()); });
  EXPECT_NE(msg.find("holds neither model.safetensors nor model.safetensors.index.json"),
            std::string::npos)
      << msg;
  msg = usage_error([&] { Reader::open_dir(path("nothing")); });
  EXPECT_NE(msg.find("is not a folder"), std::string::npos) << msg;

  // Sharded: index.json and shards that disagree.
  write_file(path("s1.safetensors"), {{"a", {4}, x.data()}, {"b", {2}, x.data()}}, Dtype::fp32);
  write_file(path("s2.safetensors"), {{"c", {1}, x.data()}}, Dtype::bf16);
  write_file(path("s3.safetensors"), {{"a", {1}, x.data()}}, Dtype::fp32);
  const auto index = [&](const std::string& weight_map) {
    put("model.safetensors.index.json",
        R"({"metadata":{"total_size":26},"weight_map":)" + weight_map + "}");
  };
  index(R"({"a":"s1.safetensors","b":"s1.safetensors","c":"s2.safetensors"})");
  const Reader ok = Reader::open_dir(dir_.string());
  EXPECT_EQ(ok.tensors().size(), 3u);
  EXPECT_EQ(ok.read_f32("c"), (std::vector<float>{1}));
  const auto refused = [&](const std::string& weight_map, const std::string& part) {
    index(weight_map);
    const std::string m = usage_error([&] { Reader::open_dir(dir_.string()); });
    EXPECT_NE(m.find(part), std::string::npos) << m;
    EXPECT_NE(m.find("model.safetensors.index.json"), std::string::npos) << m;
  };
  refused(R"({"a":"s1.safetensors","b":"s1.safetensors","c":"s9.safetensors"})",
          "the shard '" + path("s9.safetensors") + "' is missing");
  refused(R"({"a":"s1.safetensors","b":"s1.safetensors","c":"s2.safetensors",)"
          R"("d":"s2.safetensors"})",
          "tensor 'd' is absent from its shard 's2.safetensors'");
  refused(R"({"a":"s1.safetensors","b":"s2.safetensors","c":"s2.safetensors"})",
          "shard 's1.safetensors' holds tensor 'b', which the index puts in 's2.safetensors'");
  refused(R"({"a":"s1.safetensors","b":"s1.safetensors","c":"../s2.safetensors"})",
          "not a file name in the folder");
  refused(R"({"a":"s1.safetensors","b":7})", "not a file name");
  refused(R"([])", "no \"weight_map\"");
  index(R"({"a":"s1.safetensors","b":"s1.safetensors","c":"s2.safetensors","x":"s3.safetensors"})");
  msg = usage_error([&] { Reader::open_dir(dir_.string()); });
  EXPECT_NE(msg.find("s3.safetensors: tensor 'a' is also in '" + path("s1.safetensors") + "'"),
            std::string::npos)
      << msg;
  put("model.safetensors.index.json", "{\"weight_map\": ");
  msg = usage_error([&] { Reader::open_dir(dir_.string()); });
  EXPECT_NE(msg.find("model.safetensors.index.json: not JSON"), std::string::npos) << msg;
}

TEST_F(SafetensorsFiles, WriteRefusesBadTensorsAndWritesNothing) {
  const std::vector<float> x = {1, 2};
  const auto refused = [&](const std::vector<WriteTensor>& t, const std::string& part) {
    const std::string m = usage_error([&] { write_file(path("w.safetensors"), t, Dtype::fp32); });
    EXPECT_NE(m.find(part), std::string::npos) << m;
    EXPECT_FALSE(fs::exists(path("w.safetensors")));
    EXPECT_FALSE(fs::exists(path("w.safetensors.tmp")));
  };
  refused({{"a", {2}, x.data()}, {"a", {1}, x.data()}}, "'a': the name is given twice");
  refused({{"__metadata__", {2}, x.data()}}, "reserved");
  refused({{"a", {-2}, x.data()}}, "negative dimension -2");
  refused({{"a", {2}, nullptr}}, "'a' has no data");
  refused({{"a", {int64_t(1) << 40, int64_t(1) << 40}, x.data()}}, "too large");
}

}  // namespace
}  // namespace wallfacer::safetensors
