#include "wallfacer/train/checkpoint.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <functional>
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

namespace {
// (step, path) of the step-N folders under ckpt_dir; complete ones (a manifest, not .tmp) or the
// leftovers of interrupted saves (.tmp).
std::vector<std::pair<int64_t, std::string>> step_dirs(const std::string& ckpt_dir, bool tmp) {
  std::vector<std::pair<int64_t, std::string>> out;
  std::error_code ec;
  if (!fs::is_directory(ckpt_dir, ec)) return out;
  for (const auto& e : fs::directory_iterator(ckpt_dir, ec)) {
    std::string name = e.path().filename().string();
    if (!e.is_directory() || !name.starts_with("step-") || name.ends_with(".tmp") != tmp) continue;
    if (tmp) name.resize(name.size() - 4);
    if (!tmp && !fs::exists(e.path() / "manifest.json")) continue;
    const std::string digits = name.substr(5);
    if (digits.empty() || digits.size() > 18 ||
        digits.find_first_not_of("0123456789") != std::string::npos)
      continue;
    out.emplace_back(std::stoll(digits), e.path().string());
  }
  std::sort(out.begin(), out.end(), std::greater<>());
  return out;
}

// Keeps the newest `keep` complete checkpoints (0: all) and removes .tmp leftovers.
void prune_checkpoints(const std::string& ckpt_dir, int keep) {
  std::error_code ec;
  for (const auto& [step, path] : step_dirs(ckpt_dir, true)) fs::remove_all(path, ec);
  if (keep <= 0) return;
  const auto done = step_dirs(ckpt_dir, false);
  for (size_t i = size_t(keep); i < done.size(); ++i) fs::remove_all(done[i].second, ec);
  fsync_dir(ckpt_dir);
}
}  // namespace

void save_checkpoint(comm::Communicator& world, const std::string& ckpt_dir,
                     const CheckpointState& state, const std::string& config_toml,
                     const std::string& layout_json, int keep) {
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
    prune_checkpoints(ckpt_dir, keep);
  });
}

std::vector<std::string> list_checkpoints(const std::string& ckpt_dir) {
  std::vector<std::string> out;
  for (const auto& [step, path] : step_dirs(ckpt_dir, false)) out.push_back(path);
  return out;
}

std::string latest_checkpoint(const std::string& ckpt_dir) {
  const auto all = list_checkpoints(ckpt_dir);
  return all.empty() ? "" : all.front();
}

namespace {
nlohmann::json read_manifest(const std::string& dir) {
  const std::string path = dir + "/manifest.json";
  std::string text;
  try {
    text = read_file(path);
  } catch (const UsageError& e) {
    throw Error(fmt::format("checkpoint manifest unreadable: {}", e.what()));
  }
  try {
    auto m = nlohmann::json::parse(text);
    WF_CHECK(m.value("format", "") == "wallfacer-checkpoint" && m.value("version", 0) == 1,
             "'{}' is not a version-1 wallfacer checkpoint manifest", path);
    return m;
  } catch (const nlohmann::json::exception& e) {
    throw Error(fmt::format("checkpoint manifest '{}' is corrupt: {}", path, e.what()));
  }
}

// The value of `key` in the manifest object j; an Error naming the file and the key otherwise.
template <class T>
T manifest_value(const nlohmann::json& j, const std::string& key, const std::string& path) {
  try {
    return j.at(key).get<T>();
  } catch (const nlohmann::json::exception& e) {
    throw Error(
        fmt::format("checkpoint manifest '{}': key '{}' is missing or of the wrong type ({})", path,
                    key, e.what()));
  }
}
}  // namespace

std::string checkpoint_config(const std::string& dir) {
  return manifest_value<std::string>(read_manifest(dir), "config", dir + "/manifest.json");
}

CheckpointState load_checkpoint(const std::string& dir, int rank, int world_size,
                                int64_t num_params) {
  const std::string mpath = dir + "/manifest.json";
  const auto m = read_manifest(dir);
  const int world = manifest_value<int>(m, "world", mpath);
  const auto step = manifest_value<int64_t>(m, "step", mpath);
  WF_CHECK(world >= 1 && step >= 0, "checkpoint manifest '{}': world {} or step {} out of range",
           mpath, world, step);
  WF_USAGE_CHECK(world_size <= 0 || world == world_size,
                 "checkpoint '{}' was written by {} ranks; resume with the same number (got {})",
                 dir, world, world_size);
  WF_CHECK(rank >= 0 && rank < world, "checkpoint '{}' has no shard for rank {} ({} ranks)", dir,
           rank, world);
  const auto shards = m.contains("shards") ? m["shards"] : nlohmann::json();
  WF_CHECK(shards.is_array() && int64_t(shards.size()) == world,
           "checkpoint manifest '{}': key 'shards' must list {} shards", mpath, world);
  const auto& e = shards[size_t(rank)];
  const std::string key = fmt::format("shards[{}]", rank);
  // The name is the one save_checkpoint writes: no path may lead out of the checkpoint's folder.
  const auto file = manifest_value<std::string>(e, "file", mpath);
  WF_CHECK(file == shard_name(rank), "checkpoint manifest '{}': {}.file is '{}', expected '{}'",
           mpath, key, file, shard_name(rank));
  const std::string path = dir + "/" + file;
  std::string bytes;
  try {
    bytes = read_file(path);
  } catch (const UsageError& err) {
    throw Error(fmt::format("checkpoint shard missing or unreadable: {}", err.what()));
  }
  const auto want_bytes = manifest_value<uint64_t>(e, "bytes", mpath);
  WF_CHECK(bytes.size() == want_bytes,
           "checkpoint shard '{}' is truncated or damaged: {} bytes, manifest says {}", path,
           bytes.size(), want_bytes);
  WF_CHECK(fmt::format("{:016x}", fnv1a64(bytes.data(), bytes.size())) ==
               manifest_value<std::string>(e, "fnv1a64", mpath),
           "checkpoint shard '{}' is corrupt: checksum differs from the manifest", path);
  ShardHeader h;
  WF_CHECK(bytes.size() >= sizeof(h), "checkpoint shard '{}' is shorter than its header", path);
  std::memcpy(&h, bytes.data(), sizeof(h));
  WF_CHECK(std::memcmp(h.magic, kMagic, 8) == 0 && h.version == kVersion &&
               h.header_bytes == sizeof(h) && h.rank == uint32_t(rank) &&
               h.world == uint32_t(world),
           "checkpoint shard '{}' has a bad header", path);
  WF_CHECK(h.step == uint64_t(step), "checkpoint shard '{}' is of step {}, its manifest of step {}",
           path, h.step, step);
  WF_CHECK(int64_t(h.num_params) == num_params,
           "checkpoint shard '{}' holds {} parameters, the model has {}: the config differs", path,
           h.num_params, num_params);
  WF_CHECK((bytes.size() - sizeof(h)) / 12 == h.num_params &&
               bytes.size() == sizeof(h) + 3 * h.num_params * 4 &&
               fnv1a64(bytes.data() + sizeof(h), bytes.size() - sizeof(h)) == h.checksum,
           "checkpoint shard '{}' is corrupt: payload checksum mismatch", path);
  CheckpointState mine;
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
  return mine;
}

}  // namespace wallfacer::train
