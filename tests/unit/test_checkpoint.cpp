// Checkpoint files: format-2 and format-1 checkpoints written here byte by byte from the layout
// documented in checkpoint.h (with this file's own checksum) load into the state they hold, on any
// number of ranks; a bit flipped in any header field or in the payload is refused naming the file.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "wallfacer/core/error.h"
#include "wallfacer/core/file.h"
#include "wallfacer/train/checkpoint.h"

namespace wallfacer::train {
namespace {

namespace fs = std::filesystem;

std::string temp_dir(const std::string& name) {
  const auto d = fs::path(WALLFACER_BINARY_DIR) / "test_tmp" / "checkpoint" / name;
  fs::remove_all(d);
  fs::create_directories(d);
  return d.string();
}

// FNV-1a 64, written out here rather than taken from the library.
uint64_t fnv(const std::string& bytes, uint64_t h = 0xcbf29ce484222325ULL) {
  for (unsigned char c : bytes) {
    h ^= c;
    h *= 0x100000001b3ULL;
  }
  return h;
}

void put32(std::string& b, size_t at, uint32_t x) { std::memcpy(b.data() + at, &x, 4); }
void put64(std::string& b, size_t at, uint64_t x) { std::memcpy(b.data() + at, &x, 8); }
std::string floats(const std::vector<float>& x) {
  return std::string(reinterpret_cast<const char*>(x.data()), x.size() * sizeof(float));
}
std::string hex(uint64_t x) { return fmt::format("{:016x}", x); }

// A state whose every value is distinct (and differs with `salt`).
CheckpointState make_state(int64_t n, int64_t step, float salt = 0) {
  CheckpointState s;
  s.step = step;
  s.rng_state = 0x0123456789abcdefULL + uint64_t(salt);
  for (int64_t i = 0; i < n; ++i) {
    s.params.push_back(salt + 0.5f * float(i) - 3.25f);
    s.m.push_back(salt + 1e-3f * float(i + 1));
    s.v.push_back(salt + 1e-6f * float(i * i + 1));
  }
  return s;
}

struct Slice {
  uint64_t first, count;
};

// Format-2 shard `index` of `shards` holding `slice` of s, written by `world` ranks of which
// `replicas` hold it; its checksum covers the header (checksum zeroed) and the payload.
std::string shard_v2(const CheckpointState& s, uint32_t index, uint32_t shards, uint32_t world,
                     uint32_t replicas, Slice slice) {
  std::string h(96, '\0');
  std::memcpy(h.data(), "WFCKPT01", 8);
  put32(h, 8, 2);
  put32(h, 12, 96);
  put32(h, 16, index);
  put32(h, 20, shards);
  put32(h, 24, world);
  put32(h, 28, replicas);
  put64(h, 32, uint64_t(s.step));
  put64(h, 40, s.params.size());
  put64(h, 48, slice.first);
  put64(h, 56, slice.count);
  put64(h, 64, s.rng_state);
  auto part = [&](const std::vector<float>& x) {
    return floats(std::vector<float>(x.begin() + int64_t(slice.first),
                                     x.begin() + int64_t(slice.first + slice.count)));
  };
  const std::string payload = part(s.params) + part(s.m) + part(s.v);
  put64(h, 72, fnv(payload, fnv(h)));
  return h + payload;
}

// Writes a format-2 checkpoint of s into dir, split into `slices`, written by `world` ranks (all
// holding every shard).
void write_v2(const std::string& dir, const CheckpointState& s, int world,
              const std::vector<Slice>& slices) {
  nlohmann::json m{{"format", "wallfacer-checkpoint"},
                   {"version", 2},
                   {"step", s.step},
                   {"world", world},
                   {"layout", {{"world", world}, {"sp", world}, {"dp", 1}}},
                   {"config", ""}};
  nlohmann::json ranks = nlohmann::json::array();
  for (int r = 0; r < world; ++r) ranks.push_back(r);
  for (size_t i = 0; i < slices.size(); ++i) {
    const std::string file = slices.size() == 1 ? "state.bin" : fmt::format("state-{:05d}.bin", i);
    const std::string bytes = shard_v2(s, uint32_t(i), uint32_t(slices.size()), uint32_t(world),
                                       uint32_t(world), slices[i]);
    write_file_atomic(dir + "/" + file, bytes);
    uint64_t sum = 0;
    std::memcpy(&sum, bytes.data() + 72, 8);
    m["shards"].push_back({{"file", file},
                           {"ranks", ranks},
                           {"first_param", slices[i].first},
                           {"num_params", slices[i].count},
                           {"bytes", bytes.size()},
                           {"fnv1a64", hex(sum)}});
  }
  write_file_atomic(dir + "/manifest.json", m.dump(1));
}

// Writes a format-1 checkpoint of `world` ranks: rank r's shard holds states[r].
void write_v1(const std::string& dir, const std::vector<CheckpointState>& states) {
  const int world = int(states.size());
  nlohmann::json m{{"format", "wallfacer-checkpoint"},
                   {"version", 1},
                   {"step", states[0].step},
                   {"world", world},
                   {"layout", {{"world", world}, {"sp", 2}, {"dp", world / 2}}},
                   {"config", ""}};
  for (int r = 0; r < world; ++r) {
    const auto& s = states[size_t(r)];
    const std::string payload = floats(s.params) + floats(s.m) + floats(s.v);
    std::string h(64, '\0');
    std::memcpy(h.data(), "WFCKPT01", 8);
    put32(h, 8, 1);
    put32(h, 12, 64);
    put32(h, 16, uint32_t(r));
    put32(h, 20, uint32_t(world));
    put64(h, 24, uint64_t(s.step));
    put64(h, 32, s.params.size());
    put64(h, 40, s.rng_state);
    put64(h, 48, fnv(payload));
    const std::string file = fmt::format("rank-{:05d}.bin", r);
    write_file_atomic(dir + "/" + file, h + payload);
    m["shards"].push_back(
        {{"file", file}, {"bytes", h.size() + payload.size()}, {"fnv1a64", hex(fnv(h + payload))}});
  }
  write_file_atomic(dir + "/manifest.json", m.dump(1));
}

void expect_state(const CheckpointState& got, const CheckpointState& want) {
  EXPECT_EQ(got.step, want.step);
  EXPECT_EQ(got.rng_state, want.rng_state);
  EXPECT_EQ(got.params, want.params);
  EXPECT_EQ(got.m, want.m);
  EXPECT_EQ(got.v, want.v);
}

// The Error message of load_checkpoint ("" when it loads).
std::string load_error(const std::string& dir, int64_t n, int rank = 0, int world = 1) {
  try {
    load_checkpoint(dir, rank, world, n);
  } catch (const UsageError& e) {
    return std::string("usage error: ") + e.what();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

void flip_bit(const std::string& path, size_t byte, int bit) {
  std::string b = read_file(path);
  b[byte] = char(b[byte] ^ (1 << bit));
  write_file_atomic(path, b);
}

TEST(CheckpointFile, FormatTwoLoadsOnAnyNumberOfRanks) {
  const std::string dir = temp_dir("v2");
  const auto s = make_state(37, 20);
  write_v2(dir, s, 4, {{0, 37}});
  for (auto [rank, world] : {std::pair{0, 4}, {3, 4}, {1, 2}, {0, 1}, {7, 8}, {0, 0}}) {
    CheckpointOrigin origin;
    expect_state(load_checkpoint(dir, rank, world, 37, &origin), s);
    EXPECT_EQ(origin.version, 2);
    EXPECT_EQ(origin.world, 4);
    EXPECT_EQ(origin.sp, 4);
    EXPECT_EQ(origin.dp, 1);
  }
  // Another model: refused, naming the counts.
  EXPECT_NE(load_error(dir, 36).find("holds parameters up to 37, the model has 36"),
            std::string::npos)
      << load_error(dir, 36);
  EXPECT_NE(load_error(dir, 38).find("holds 37 parameters, the model has 38"), std::string::npos)
      << load_error(dir, 38);
}

TEST(CheckpointFile, FormatTwoSlicesAreAssembled) {
  // Several shards, each a slice of the state: the manifest's general form.
  const std::string dir = temp_dir("v2_slices");
  const auto s = make_state(50, 8);
  write_v2(dir, s, 2, {{0, 20}, {20, 30}});
  expect_state(load_checkpoint(dir, 0, 3, 50), s);
  // A gap between the slices is refused.
  auto m = nlohmann::json::parse(read_file(dir + "/manifest.json"));
  m["shards"][1]["first_param"] = 21;
  write_file_atomic(dir + "/manifest.json", m.dump());
  EXPECT_NE(load_error(dir, 50).find("shards[1] holds parameters from 21"), std::string::npos)
      << load_error(dir, 50);
}

TEST(CheckpointFile, FormatTwoRefusesAFlippedBitAnywhere) {
  const std::string dir = temp_dir("v2_flip");
  const auto s = make_state(16, 5);
  write_v2(dir, s, 4, {{0, 16}});
  const std::string path = dir + "/state.bin";
  const std::string good = read_file(path);
  ASSERT_EQ(good.size(), 96u + 3 * 16 * 4);
  ASSERT_EQ(load_error(dir, 16), "");
  // Every header field (magic, version, header bytes, shard, shards, world, replicas, step,
  // parameters, first parameter, slice, RNG state, checksum, reserved) and the payload's params, m
  // and v: each bit flipped alone.
  const std::vector<std::pair<const char*, size_t>> fields = {
      {"magic", 0},           {"version", 8},          {"header bytes", 12}, {"shard", 16},
      {"shards", 20},         {"world", 24},           {"replicas", 28},     {"step", 32},
      {"parameters", 40},     {"first parameter", 48}, {"slice", 56},        {"rng state", 64},
      {"checksum", 72},       {"reserved", 80},        {"reserved", 95},     {"params", 96},
      {"m", 96 + 16 * 4 + 5}, {"v", good.size() - 1}};
  for (const auto& [name, at] : fields) {
    for (int bit : {0, 7}) {
      write_file_atomic(path, good);
      flip_bit(path, at, bit);
      const std::string e = load_error(dir, 16);
      EXPECT_NE(e.find("'" + path + "' is corrupt"), std::string::npos)
          << name << " bit " << bit << ": " << e;
    }
  }
  // Truncated: named with the sizes.
  write_file_atomic(path, good.substr(0, good.size() - 4));
  EXPECT_NE(load_error(dir, 16).find("'" + path +
                                     "' is truncated or damaged: 284 bytes, manifest "
                                     "says 288"),
            std::string::npos)
      << load_error(dir, 16);
  write_file_atomic(path, good);
  EXPECT_EQ(load_error(dir, 16), "");
}

TEST(CheckpointFile, FormatTwoHeaderMustMatchTheManifest) {
  // A shard whose checksum holds but whose header disagrees with its manifest.
  const std::string dir = temp_dir("v2_mismatch");
  const auto s = make_state(10, 3);
  write_v2(dir, s, 2, {{0, 10}});
  const std::string man = read_file(dir + "/manifest.json");
  auto rewrite = [&](const std::function<void(nlohmann::json&)>& edit) {
    auto m = nlohmann::json::parse(man);
    edit(m);
    write_file_atomic(dir + "/manifest.json", m.dump());
    return load_error(dir, 10);
  };
  std::string e = rewrite([](auto& m) { m["step"] = 2; });
  EXPECT_NE(e.find("state.bin' is of step 3, its manifest of step 2"), std::string::npos) << e;
  e = rewrite([](auto& m) { m["world"] = 3; });
  EXPECT_NE(e.find("state.bin' differs from its manifest"), std::string::npos) << e;
  e = rewrite([](auto& m) { m["shards"][0]["ranks"] = {0}; });
  EXPECT_NE(e.find("state.bin' differs from its manifest"), std::string::npos) << e;
  e = rewrite([](auto& m) { m["shards"][0]["ranks"] = {1, 0}; });
  EXPECT_NE(e.find("shards[0].ranks must list ranks of 0..1 in increasing order"),
            std::string::npos)
      << e;
  e = rewrite([](auto& m) { m["shards"][0]["fnv1a64"] = "0000000000000000"; });
  EXPECT_NE(e.find("state.bin' is corrupt: its checksum differs from the manifest's"),
            std::string::npos)
      << e;
  e = rewrite([](auto& m) { m["shards"][0]["file"] = "../state.bin"; });
  EXPECT_NE(e.find("shards[0].file is '../state.bin', expected 'state.bin'"), std::string::npos)
      << e;
  e = rewrite([](auto& m) { m["shards"][0].erase("bytes"); });
  EXPECT_NE(e.find("key 'shards[0].bytes' is missing"), std::string::npos) << e;
  // Missing and mistyped keys: the file and the key in words, never the JSON library's text.
  e = rewrite([](auto& m) { m.erase("step"); });
  EXPECT_NE(e.find("manifest.json': key 'step' is missing"), std::string::npos) << e;
  e = rewrite([](auto& m) { m["step"] = "3"; });
  EXPECT_NE(e.find("key 'step' must be an integer"), std::string::npos) << e;
  e = rewrite([](auto& m) { m["step"] = 3.0; });  // a float is refused, not converted
  EXPECT_NE(e.find("key 'step' must be an integer"), std::string::npos) << e;
  e = rewrite([](auto& m) { m["shards"][0]["bytes"] = -1; });
  EXPECT_NE(e.find("key 'shards[0].bytes' must be an integer in 0.."), std::string::npos) << e;
  e = rewrite([](auto& m) { m["shards"][0]["fnv1a64"] = 1.5; });
  EXPECT_NE(e.find("key 'shards[0].fnv1a64' must be a string (it is 1.5)"), std::string::npos) << e;
  e = rewrite([](auto& m) { m["version"] = "2"; });
  EXPECT_NE(e.find("key 'version' must be an integer"), std::string::npos) << e;
  write_file_atomic(dir + "/manifest.json", "{\"format\": \n");
  e = load_error(dir, 10);
  EXPECT_NE(e.find("manifest.json' is corrupt: not valid JSON at line 2"), std::string::npos) << e;
  e = rewrite([](auto& m) { m.erase("config"); });
  EXPECT_EQ(e, "");
  try {
    checkpoint_config(dir);
    ADD_FAILURE() << "a manifest without 'config' was accepted";
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("key 'config' is missing"), std::string::npos)
        << err.what();
  }
  e = rewrite([](auto& m) { m["version"] = 3; });
  EXPECT_NE(e.find("is of format version 3; this wallfacer reads versions 1 and 2"),
            std::string::npos)
      << e;
  EXPECT_EQ(rewrite([](auto&) {}), "");
}

TEST(CheckpointFile, FormatOneStillLoads) {
  // Format-1 shards hold the same state in a real run; here they differ, to see which one is read.
  const std::string dir = temp_dir("v1");
  std::vector<CheckpointState> states;
  for (int r = 0; r < 4; ++r) states.push_back(make_state(24, 12, float(r) * 100));
  write_v1(dir, states);
  // The writer's number of ranks: each rank its own shard.
  for (int r = 0; r < 4; ++r) {
    CheckpointOrigin origin;
    expect_state(load_checkpoint(dir, r, 4, 24, &origin), states[size_t(r)]);
    EXPECT_EQ(origin.version, 1);
    EXPECT_EQ(origin.world, 4);
    EXPECT_EQ(origin.sp, 2);
    EXPECT_EQ(origin.dp, 2);
  }
  // Another number of ranks (and a tool): shard 0, and only shard 0 is read.
  for (int r = 1; r < 4; ++r) fs::remove(dir + fmt::format("/rank-{:05d}.bin", r));
  for (auto [rank, world] : {std::pair{1, 2}, {0, 1}, {5, 8}, {0, 0}})
    expect_state(load_checkpoint(dir, rank, world, 24), states[0]);
  // Its header is covered by the manifest's checksum of the whole file.
  const std::string path = dir + "/rank-00000.bin";
  flip_bit(path, 24, 0);  // the step
  EXPECT_NE(load_error(dir, 24).find("'" + path + "' is corrupt"), std::string::npos)
      << load_error(dir, 24);
}

}  // namespace
}  // namespace wallfacer::train
