#include "wallfacer/train/checkpoint.h"

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <filesystem>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>
#include <type_traits>

#include "wallfacer/core/error.h"
#include "wallfacer/core/file.h"
#include "wallfacer/core/json_error.h"
#include "wallfacer/train/data.h"

namespace wallfacer::train {

namespace fs = std::filesystem;

namespace {
constexpr char kMagic[8] = {'W', 'F', 'C', 'K', 'P', 'T', '0', '1'};
constexpr uint32_t kVersion = 2;

// Format 2 (checkpoint.h has the layout).
struct ShardHeader {
  char magic[8];
  uint32_t version;
  uint32_t header_bytes;
  uint32_t shard;
  uint32_t shards;
  uint32_t world;
  uint32_t replicas;
  uint64_t step;
  uint64_t num_params;
  uint64_t first_param;
  uint64_t shard_params;
  uint64_t rng_state;
  uint64_t checksum;
  uint8_t reserved[16];
};
static_assert(sizeof(ShardHeader) == 96 && offsetof(ShardHeader, checksum) == 72);

// Format 1, read only.
struct ShardHeaderV1 {
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
static_assert(sizeof(ShardHeaderV1) == 64);

// The file of shard i of `count` (format 2): state.bin when the state is one replica group.
std::string shard_name(size_t i, size_t count) {
  return count == 1 ? "state.bin" : fmt::format("state-{:05d}.bin", i);
}
std::string shard_name_v1(int rank) { return fmt::format("rank-{:05d}.bin", rank); }

// The checksum of a format-2 shard: its header with the checksum field zeroed, then the payload
// (the slices of params, m and v, one after the other).
uint64_t shard_checksum(ShardHeader h, const float* params, const float* m, const float* v) {
  h.checksum = 0;
  const size_t bytes = h.shard_params * sizeof(float);
  uint64_t sum = fnv1a64(&h, sizeof(h));
  sum = fnv1a64(params, bytes, sum);
  sum = fnv1a64(m, bytes, sum);
  return fnv1a64(v, bytes, sum);
}

std::string encode(const ShardHeader& h, const CheckpointState& s) {
  const size_t first = h.first_param, n = h.shard_params * sizeof(float);
  std::string bytes(sizeof(h) + 3 * n, '\0');
  std::memcpy(bytes.data(), &h, sizeof(h));
  std::memcpy(bytes.data() + sizeof(h), s.params.data() + first, n);
  std::memcpy(bytes.data() + sizeof(h) + n, s.m.data() + first, n);
  std::memcpy(bytes.data() + sizeof(h) + 2 * n, s.v.data() + first, n);
  return bytes;
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
  const uint64_t n = state.params.size();
  WF_CHECK(state.m.size() == n && state.v.size() == n,
           "checkpoint of step {}: {} parameters but {} and {} AdamW moments", state.step, n,
           state.m.size(), state.v.size());
  // The whole state is one replica group: every rank holds it, one shard holds it.
  ShardHeader h{};
  std::memcpy(h.magic, kMagic, 8);
  h.version = kVersion;
  h.header_bytes = sizeof(ShardHeader);
  h.shard = 0;
  h.shards = 1;
  h.world = uint32_t(P);
  h.replicas = uint32_t(P);
  h.step = uint64_t(state.step);
  h.num_params = n;
  h.first_param = 0;
  h.shard_params = n;
  h.rng_state = state.rng_state;
  h.checksum = shard_checksum(h, state.params.data(), state.m.data(), state.v.data());
  // The ranks must really hold the same state: the smallest and the largest checksum (the largest
  // of its complement) agree. Every rank sees the same verdict.
  uint64_t extremes[2] = {h.checksum, ~h.checksum};
  world.all_reduce_max(extremes, 2);
  WF_CHECK(extremes[0] == ~extremes[1],
           "step {}: the ranks hold different training states (state checksums {:016x} to "
           "{:016x}), although the parameters, AdamW moments and RNG state are the same on every "
           "rank by construction: this is a bug in wallfacer; no checkpoint of this step was "
           "written (the earlier ones stay)",
           state.step, ~extremes[1], extremes[0]);

  const std::string final_dir = fmt::format("{}/step-{}", ckpt_dir, state.step);
  const std::string tmp_dir = final_dir + ".tmp";
  const std::string file = shard_name(0, 1);
  const int writer = 0;  // the lowest rank of the replica group
  world.agree([&] {
    if (rank != 0) return;
    fs::remove_all(tmp_dir);
    make_directories(tmp_dir, "the checkpoint folder");
  });
  world.agree([&] {
    if (rank == writer) write_file_atomic(tmp_dir + "/" + file, encode(h, state));
  });
  world.agree([&] {
    if (rank != 0) return;
    nlohmann::json ranks = nlohmann::json::array();
    for (int r = 0; r < P; ++r) ranks.push_back(r);
    nlohmann::json m;
    m["format"] = "wallfacer-checkpoint";
    m["version"] = kVersion;
    m["step"] = state.step;
    m["world"] = P;
    m["layout"] = nlohmann::json::parse(layout_json);
    m["config"] = config_toml;
    m["shards"].push_back({{"file", file},
                           {"ranks", ranks},
                           {"first_param", 0},
                           {"num_params", n},
                           {"bytes", sizeof(ShardHeader) + 3 * n * sizeof(float)},
                           {"fnv1a64", fmt::format("{:016x}", h.checksum)}});
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
// The value of `key` in the manifest object j (shown as `where`.key), of type T: a string, an
// integer that fits T (a float such as 1e300 or 2.0 is refused, never converted) or a list of
// integers; an Error naming the file and the key otherwise.
template <class T>
T manifest_value(const nlohmann::json& j, const std::string& key, const std::string& path,
                 const std::string& where = "") {
  const std::string name = where.empty() ? key : where + "." + key;
  WF_CHECK(j.is_object(), "checkpoint manifest '{}': {} must be an object", path,
           where.empty() ? "the manifest" : where);
  const auto it = j.find(key);
  WF_CHECK(it != j.end(), "checkpoint manifest '{}': key '{}' is missing", path, name);
  const nlohmann::json& v = *it;
  std::string shown = v.dump();
  if (shown.size() > 40) shown = shown.substr(0, 37) + "...";
  // An integer of JSON that fits into I.
  const auto fits = [](const nlohmann::json& x, auto type_tag) {
    using I = decltype(type_tag);
    if (x.is_number_unsigned()) return x.get<uint64_t>() <= uint64_t(std::numeric_limits<I>::max());
    if (!x.is_number_integer()) return false;
    const int64_t i = x.get<int64_t>();
    return i >= int64_t(std::numeric_limits<I>::min()) &&
           (i < 0 || uint64_t(i) <= uint64_t(std::numeric_limits<I>::max()));
  };
  if constexpr (std::is_same_v<T, std::string>) {
    WF_CHECK(v.is_string(), "checkpoint manifest '{}': key '{}' must be a string (it is {})", path,
             name, shown);
    return v.get<std::string>();
  } else if constexpr (std::is_same_v<T, std::vector<int64_t>>) {
    WF_CHECK(v.is_array() &&
                 std::all_of(v.begin(), v.end(), [&](const auto& x) { return fits(x, int64_t{}); }),
             "checkpoint manifest '{}': key '{}' must be a list of integers (it is {})", path, name,
             shown);
    return v.get<std::vector<int64_t>>();
  } else {
    WF_CHECK(fits(v, T{}),
             "checkpoint manifest '{}': key '{}' must be an integer in {}..{} (it is {})", path,
             name, std::numeric_limits<T>::min(), std::numeric_limits<T>::max(), shown);
    return v.get<T>();
  }
}

nlohmann::json read_manifest(const std::string& dir) {
  const std::string path = dir + "/manifest.json";
  std::string text;
  try {
    text = read_file(path);
  } catch (const UsageError& e) {
    throw Error(fmt::format("checkpoint manifest unreadable: {}", e.what()));
  }
  nlohmann::json m;
  try {
    m = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw Error(
        fmt::format("checkpoint manifest '{}' is corrupt: {}", path, describe_json_error(text, e)));
  }
  const auto format = m.is_object() ? m.find("format") : m.end();
  WF_CHECK(m.is_object() && format != m.end() && *format == "wallfacer-checkpoint",
           "'{}' is not a wallfacer checkpoint manifest (no \"format\": "
           "\"wallfacer-checkpoint\")",
           path);
  const int version = manifest_value<int>(m, "version", path);
  WF_CHECK(version == 1 || version == 2,
           "checkpoint manifest '{}' is of format version {}; this wallfacer reads versions 1 "
           "and 2",
           path, version);
  return m;
}

std::string read_shard(const std::string& path) {
  try {
    return read_file(path);
  } catch (const UsageError& err) {
    throw Error(fmt::format("checkpoint shard missing or unreadable: {}", err.what()));
  }
}

// A format-1 checkpoint: shard `index` (every shard holds the same state).
CheckpointState load_v1(const std::string& dir, const nlohmann::json& shards, int index, int world,
                        int64_t step, int64_t num_params) {
  const std::string mpath = dir + "/manifest.json";
  WF_CHECK(int64_t(shards.size()) == world,
           "checkpoint manifest '{}': key 'shards' must list {} shards", mpath, world);
  const auto& e = shards[size_t(index)];
  const std::string key = fmt::format("shards[{}]", index);
  // The name is the one wallfacer writes: no path may lead out of the checkpoint's folder.
  const auto file = manifest_value<std::string>(e, "file", mpath, key);
  WF_CHECK(file == shard_name_v1(index), "checkpoint manifest '{}': {}.file is '{}', expected '{}'",
           mpath, key, file, shard_name_v1(index));
  const std::string path = dir + "/" + file;
  const std::string bytes = read_shard(path);
  const auto want_bytes = manifest_value<uint64_t>(e, "bytes", mpath, key);
  WF_CHECK(bytes.size() == want_bytes,
           "checkpoint shard '{}' is truncated or damaged: {} bytes, manifest says {}", path,
           bytes.size(), want_bytes);
  WF_CHECK(fmt::format("{:016x}", fnv1a64(bytes.data(), bytes.size())) ==
               manifest_value<std::string>(e, "fnv1a64", mpath, key),
           "checkpoint shard '{}' is corrupt: checksum differs from the manifest", path);
  ShardHeaderV1 h;
  WF_CHECK(bytes.size() >= sizeof(h), "checkpoint shard '{}' is shorter than its header", path);
  std::memcpy(&h, bytes.data(), sizeof(h));
  WF_CHECK(std::memcmp(h.magic, kMagic, 8) == 0 && h.version == 1 && h.header_bytes == sizeof(h) &&
               h.rank == uint32_t(index) && h.world == uint32_t(world),
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
  CheckpointState st;
  const size_t n = h.num_params;
  st.step = int64_t(h.step);
  st.rng_state = h.rng_state;
  st.params.resize(n);
  st.m.resize(n);
  st.v.resize(n);
  const char* p = bytes.data() + sizeof(h);
  std::memcpy(st.params.data(), p, n * 4);
  std::memcpy(st.m.data(), p + n * 4, n * 4);
  std::memcpy(st.v.data(), p + 2 * n * 4, n * 4);
  return st;
}

// A format-2 checkpoint: the shards covering parameters [0, num_params), each read and verified
// once (today there is one).
// Shard i of `shards` in a format-2 manifest: its file, ranks and slice, checked (the name is the
// one wallfacer writes, the ranks are of 0..world-1 in increasing order, the slice starts at
// `next` and ends inside the model's n parameters).
struct ShardEntry {
  std::string file;
  std::vector<int64_t> ranks;
  uint64_t first = 0, count = 0;
};

ShardEntry shard_entry(const std::string& dir, const nlohmann::json& e, size_t i, size_t shards,
                       int world, uint64_t next, uint64_t n) {
  const std::string mpath = dir + "/manifest.json";
  const std::string key = fmt::format("shards[{}]", i);
  // The name is the one wallfacer writes: no path may lead out of the checkpoint's folder.
  const auto file = manifest_value<std::string>(e, "file", mpath, key);
  WF_CHECK(file == shard_name(i, shards),
           "checkpoint manifest '{}': {}.file is '{}', expected '{}'", mpath, key, file,
           shard_name(i, shards));
  const auto ranks = manifest_value<std::vector<int64_t>>(e, "ranks", mpath, key);
  bool ranks_ok = !ranks.empty();
  for (size_t j = 0; j < ranks.size(); ++j)
    ranks_ok = ranks_ok && ranks[j] >= 0 && ranks[j] < world && (j == 0 || ranks[j] > ranks[j - 1]);
  WF_CHECK(ranks_ok,
           "checkpoint manifest '{}': {}.ranks must list ranks of 0..{} in increasing order", mpath,
           key, world - 1);
  const auto first = manifest_value<uint64_t>(e, "first_param", mpath, key);
  const auto count = manifest_value<uint64_t>(e, "num_params", mpath, key);
  WF_CHECK(first == next && count >= 1,
           "checkpoint manifest '{}': {} holds parameters from {} ({} of them); the slices must "
           "follow each other from parameter 0 ({} expected)",
           mpath, key, first, count, next);
  WF_CHECK(count <= n - std::min(n, first),
           "checkpoint '{}' holds parameters up to {}, the model has {}: the config differs", dir,
           first + count, n);
  return {file, ranks, first, count};
}

// The header of shard i's bytes (read from path), checked against its checksum, the manifest's
// checksum `want_sum` and its entry `entry`: what follows the checksum finds a writer and a
// manifest that disagree.
ShardHeader checked_header(const std::string& bytes, const std::string& path,
                           const std::string& want_sum, size_t i, size_t shards, int world,
                           int64_t step, uint64_t n, const ShardEntry& entry) {
  ShardHeader h;
  WF_CHECK(bytes.size() >= sizeof(h), "checkpoint shard '{}' is shorter than its header", path);
  std::memcpy(&h, bytes.data(), sizeof(h));
  ShardHeader zeroed = h;
  zeroed.checksum = 0;
  const uint64_t sum =
      fnv1a64(bytes.data() + sizeof(h), bytes.size() - sizeof(h), fnv1a64(&zeroed, sizeof(zeroed)));
  WF_CHECK(sum == h.checksum,
           "checkpoint shard '{}' is corrupt: its checksum does not match its header and "
           "payload",
           path);
  WF_CHECK(fmt::format("{:016x}", sum) == want_sum,
           "checkpoint shard '{}' is corrupt: its checksum differs from the manifest's", path);
  // The checksum holds: what follows finds a writer and a manifest that disagree.
  const uint8_t zero[sizeof(h.reserved)] = {};
  WF_CHECK(std::memcmp(h.magic, kMagic, 8) == 0 && h.version == kVersion &&
               h.header_bytes == sizeof(h) && std::memcmp(h.reserved, zero, sizeof(zero)) == 0,
           "checkpoint shard '{}' has a bad header (magic, version {}, header size {})", path,
           h.version, h.header_bytes);
  WF_CHECK(h.step == uint64_t(step), "checkpoint shard '{}' is of step {}, its manifest of step {}",
           path, h.step, step);
  WF_CHECK(h.num_params == n,
           "checkpoint shard '{}' holds {} parameters, the model has {}: the config differs", path,
           h.num_params, n);
  WF_CHECK(h.shard == i && h.shards == shards && h.world == uint32_t(world) &&
               h.replicas == entry.ranks.size() && h.first_param == entry.first &&
               h.shard_params == entry.count,
           "checkpoint shard '{}' differs from its manifest: the shard says shard {} of {}, "
           "world {}, held by {} ranks, parameters from {} ({}); the manifest says shard {} of "
           "{}, world {}, {} ranks, from {} ({})",
           path, h.shard, h.shards, h.world, h.replicas, h.first_param, h.shard_params, i, shards,
           world, entry.ranks.size(), entry.first, entry.count);
  WF_CHECK((bytes.size() - sizeof(h)) % 12 == 0 && (bytes.size() - sizeof(h)) / 12 == entry.count,
           "checkpoint shard '{}' holds {} payload bytes for {} parameters", path,
           bytes.size() - sizeof(h), entry.count);
  return h;
}

CheckpointState load_v2(const std::string& dir, const nlohmann::json& shards, int world,
                        int64_t step, int64_t num_params) {
  const std::string mpath = dir + "/manifest.json";
  const uint64_t n = uint64_t(num_params);
  CheckpointState st;
  st.step = step;
  st.params.resize(n);
  st.m.resize(n);
  st.v.resize(n);
  uint64_t next = 0;  // where the next shard's slice starts
  for (size_t i = 0; i < shards.size(); ++i) {
    const auto& e = shards[i];
    const std::string key = fmt::format("shards[{}]", i);
    const ShardEntry entry = shard_entry(dir, e, i, shards.size(), world, next, n);
    const uint64_t first = entry.first, count = entry.count;
    next = first + count;

    const std::string path = dir + "/" + entry.file;
    const std::string bytes = read_shard(path);
    const auto want_bytes = manifest_value<uint64_t>(e, "bytes", mpath, key);
    const auto want_sum = manifest_value<std::string>(e, "fnv1a64", mpath, key);
    WF_CHECK(bytes.size() == want_bytes,
             "checkpoint shard '{}' is truncated or damaged: {} bytes, manifest says {}", path,
             bytes.size(), want_bytes);
    const ShardHeader h =
        checked_header(bytes, path, want_sum, i, shards.size(), world, step, n, entry);
    WF_CHECK(i == 0 || h.rng_state == st.rng_state,
             "checkpoint shard '{}' has another RNG state than shard 0", path);
    st.rng_state = h.rng_state;
    const size_t b = count * sizeof(float);
    const char* p = bytes.data() + sizeof(h);
    std::memcpy(st.params.data() + first, p, b);
    std::memcpy(st.m.data() + first, p + b, b);
    std::memcpy(st.v.data() + first, p + 2 * b, b);
  }
  WF_CHECK(next == n, "checkpoint '{}' holds {} parameters, the model has {}: the config differs",
           dir, next, n);
  return st;
}
}  // namespace

std::string checkpoint_config(const std::string& dir) {
  return manifest_value<std::string>(read_manifest(dir), "config", dir + "/manifest.json");
}

CheckpointState load_checkpoint(const std::string& dir, int rank, int world_size,
                                int64_t num_params, CheckpointOrigin* origin) {
  const std::string mpath = dir + "/manifest.json";
  const auto m = read_manifest(dir);
  const int version = manifest_value<int>(m, "version", mpath);
  const int world = manifest_value<int>(m, "world", mpath);
  const auto step = manifest_value<int64_t>(m, "step", mpath);
  WF_CHECK(world >= 1 && step >= 0, "checkpoint manifest '{}': world {} or step {} out of range",
           mpath, world, step);
  const auto shards = m.contains("shards") ? m["shards"] : nlohmann::json();
  WF_CHECK(shards.is_array() && !shards.empty(),
           "checkpoint manifest '{}': key 'shards' must list the shards", mpath);
  if (origin) {
    const auto layout = m.value("layout", nlohmann::json::object());
    auto layout_int = [&](const char* key) {
      return layout.is_object() && layout.contains(key) && layout[key].is_number_integer()
                 ? layout[key].get<int>()
                 : 0;
    };
    *origin = {version, world, layout_int("sp"), layout_int("dp")};
  }
  if (version == 1) {
    // Every shard holds the same state: on the writer's number of ranks each rank reads its own,
    // on another number shard 0.
    const int index = world_size == world && rank >= 0 && rank < world ? rank : 0;
    return load_v1(dir, shards, index, world, step, num_params);
  }
  return load_v2(dir, shards, world, step, num_params);
}

std::string resolve_checkpoint(const std::string& dir) {
  if (std::filesystem::exists(dir + "/manifest.json")) return dir;
  std::string c = latest_checkpoint(dir + "/ckpt");
  if (c.empty()) c = latest_checkpoint(dir);
  WF_USAGE_CHECK(!c.empty(), "no complete checkpoint in '{}' (train with train.ckpt_every > 0)",
                 dir);
  return c;
}

}  // namespace wallfacer::train
