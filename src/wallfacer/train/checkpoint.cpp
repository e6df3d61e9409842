#include "wallfacer/train/checkpoint.h"

#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "wallfacer/core/error.h"
#include "wallfacer/train/data.h"
#include "wallfacer/train/io.h"

namespace wallfacer::train {

namespace fs = std::filesystem;

namespace {
constexpr char kMagic[8] = {'W', 'F', 'C', 'K', 'P', 'T', '0', '1'};
constexpr uint32_t kVersion = 1;

struct ShardHeader {
  char magic[8];
  uint32_t version;
  uint32_t header_bytes;
  uint32_t rank;
  uint32_t world;
  uint64_t step;
  uint64_t num_params;
  uint64_t rng_state;
  uint64_t checksum;
  uint8_t reserved[8];
};
static_assert(sizeof(ShardHeader) == 64);

std::string shard_name(int rank) { return fmt::format("rank-{:05d}.bin", rank); }

std::string encode(int rank, int world, const CheckpointState& s) {
  const size_t n = s.params.size();
  std::string payload(3 * n * sizeof(float), '\0');
  std::memcpy(payload.data(), s.params.data(), n * 4);
  std::memcpy(payload.data() + n * 4, s.m.data(), n * 4);
  std::memcpy(payload.data() + 2 * n * 4, s.v.data(), n * 4);
  ShardHeader h{};
  std::memcpy(h.magic, kMagic, 8);
  h.version = kVersion;
  h.header_bytes = sizeof(ShardHeader);
  h.rank = uint32_t(rank);
  h.world = uint32_t(world);
  h.step = uint64_t(s.step);
  h.num_params = n;
  h.rng_state = s.rng_state;
  h.checksum = fnv1a64(payload.data(), payload.size());
  return std::string(reinterpret_cast<const char*>(&h), sizeof(h)) + payload;
}
}  // namespace

void save_checkpoint(comm::Communicator& world, const std::string& ckpt_dir,
                     const CheckpointState& state, const std::string& config_toml,
                     const std::string& layout_json) {
  const int rank = world.rank(), P = world.size();
  const std::string final_dir = fmt::format("{}/step-{}", ckpt_dir, state.step);
  const std::string tmp_dir = final_dir + ".tmp";
  world.agree([&] {
    if (rank != 0) return;
    fs::remove_all(tmp_dir);
    make_directories(tmp_dir, "the checkpoint folder");
  });
  const std::string bytes = encode(rank, P, state);
  world.agree([&] { write_file_atomic(tmp_dir + "/" + shard_name(rank), bytes); });
  const uint64_t sum = fnv1a64(bytes.data(), bytes.size());
  // Gather every shard's checksum (as two exact 32-bit halves) and size on rank 0.
  std::vector<double> info(size_t(3 * P), 0.0);
  info[size_t(3 * rank)] = double(sum >> 32);
  info[size_t(3 * rank + 1)] = double(sum & 0xffffffffULL);
  info[size_t(3 * rank + 2)] = double(bytes.size());
  world.all_reduce_sum(info.data(), int64_t(info.size()));
  world.agree([&] {
    if (rank != 0) return;
    nlohmann::json m;
    m["format"] = "wallfacer-checkpoint";
    m["version"] = kVersion;
    m["step"] = state.step;
    m["world"] = P;
    m["layout"] = nlohmann::json::parse(layout_json);
    m["config"] = config_toml;
    for (int r = 0; r < P; ++r) {
      const uint64_t s = (uint64_t(info[size_t(3 * r)]) << 32) | uint64_t(info[size_t(3 * r + 1)]);
      m["shards"].push_back({{"file", shard_name(r)},
                             {"bytes", int64_t(info[size_t(3 * r + 2)])},
                             {"fnv1a64", fmt::format("{:016x}", s)}});
    }
    write_file_atomic(tmp_dir + "/manifest.json", m.dump(1) + "\n");
    fs::remove_all(final_dir);
    fs::rename(tmp_dir, final_dir);
    fsync_dir(ckpt_dir);
  });
}

std::string latest_checkpoint(const std::string& ckpt_dir) {
  if (!fs::is_directory(ckpt_dir)) return "";
  int64_t best = -1;
  std::string path;
  for (const auto& e : fs::directory_iterator(ckpt_dir)) {
    const std::string name = e.path().filename().string();
    if (!e.is_directory() || !name.starts_with("step-") || name.ends_with(".tmp")) continue;
    if (!fs::exists(e.path() / "manifest.json")) continue;
    try {
      const int64_t s = std::stoll(name.substr(5));
      if (s > best) {
        best = s;
        path = e.path().string();
      }
    } catch (const std::exception&) {
    }
  }
  return path;
}

namespace {
nlohmann::json read_manifest(const std::string& dir) {
  const std::string path = dir + "/manifest.json";
  try {
    auto m = nlohmann::json::parse(read_file(path));
    WF_CHECK(m.value("format", "") == "wallfacer-checkpoint" && m.value("version", 0) == 1,
             "'{}' is not a version-1 wallfacer checkpoint manifest", path);
    return m;
  } catch (const nlohmann::json::exception& e) {
    throw Error(fmt::format("checkpoint manifest '{}' is corrupt: {}", path, e.what()));
  }
}
}  // namespace

std::string checkpoint_config(const std::string& dir) {
  return read_manifest(dir)["config"].get<std::string>();
}

CheckpointState load_checkpoint(const std::string& dir, int rank, int world_size,
                                int64_t num_params) {
  const auto m = read_manifest(dir);
  const int world = m["world"].get<int>();
  WF_USAGE_CHECK(world_size <= 0 || world == world_size,
                 "checkpoint '{}' was written by {} ranks; resume with the same number (got {})",
                 dir, world, world_size);
  CheckpointState mine;
  const auto& shards = m["shards"];
  WF_CHECK(int(shards.size()) == world, "checkpoint '{}': manifest lists {} shards for {} ranks",
           dir, shards.size(), world);
  for (int r = 0; r < world; ++r) {
    const auto& e = shards[size_t(r)];
    const std::string path = dir + "/" + e["file"].get<std::string>();
    const std::string bytes = read_file(path);
    const auto want_bytes = e["bytes"].get<uint64_t>();
    WF_CHECK(bytes.size() == want_bytes,
             "checkpoint shard '{}' is truncated or damaged: {} bytes, manifest says {}", path,
             bytes.size(), want_bytes);
    WF_CHECK(fmt::format("{:016x}", fnv1a64(bytes.data(), bytes.size())) == e["fnv1a64"],
             "checkpoint shard '{}' is corrupt: checksum differs from the manifest", path);
    ShardHeader h;
    std::memcpy(&h, bytes.data(), sizeof(h));
    WF_CHECK(std::memcmp(h.magic, kMagic, 8) == 0 && h.version == kVersion &&
                 h.rank == uint32_t(r) && h.world == uint32_t(world),
             "checkpoint shard '{}' has a bad header", path);
    WF_CHECK(int64_t(h.num_params) == num_params,
             "checkpoint shard '{}' holds {} parameters, the model has {}: the config differs",
             path, h.num_params, num_params);
    WF_CHECK(bytes.size() == sizeof(h) + 3 * h.num_params * 4 &&
                 fnv1a64(bytes.data() + sizeof(h), bytes.size() - sizeof(h)) == h.checksum,
             "checkpoint shard '{}' is corrupt: payload checksum mismatch", path);
    if (r != rank) continue;
    const size_t n = h.num_params;
    mine.step = int64_t(h.step);
    mine.rng_state = h.rng_state;
    mine.params.resize(n);
    mine.m.resize(n);
    mine.v.resize(n);
    const char* p = bytes.data() + sizeof(h);
    std::memcpy(mine.params.data(), p, n * 4);
    std::memcpy(mine.m.data(), p + n * 4, n * 4);
    std::memcpy(mine.v.data(), p + 2 * n * 4, n * 4);
  }
  return mine;
}

}  // namespace wallfacer::train
