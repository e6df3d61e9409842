// Checkpoint writing on the ranks of one mpirun launch: the replicated state is written once, as
// state.bin with the header documented in checkpoint.h (read back here field by field, with this
// file's own checksum) and a manifest naming every rank; every rank loads it back; when one rank's
// state differs, every rank refuses with the same error and nothing is written.
// Usage: mpirun -np P test_checkpoint_mpi DIR

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "mpi_check.h"
#include "wallfacer/comm/communicator.h"
#include "wallfacer/core/error.h"
#include "wallfacer/core/file.h"
#include "wallfacer/train/checkpoint.h"

using namespace wallfacer;
namespace fs = std::filesystem;

namespace {

using testing::check;

uint64_t fnv(const char* p, size_t n, uint64_t h = 0xcbf29ce484222325ULL) {
  for (size_t i = 0; i < n; ++i) {
    h ^= static_cast<unsigned char>(p[i]);
    h *= 0x100000001b3ULL;
  }
  return h;
}

template <class T>
T at(const std::string& b, size_t offset) {
  T x;
  std::memcpy(&x, b.data() + offset, sizeof(T));
  return x;
}

// The files a checkpoint directory holds, sorted.
std::vector<std::string> files_in(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

// Rank 0: state.bin and manifest.json of `dir` hold s as written by P ranks.
void check_files(const std::string& dir, const train::CheckpointState& s, int P) {
  check(files_in(dir) == std::vector<std::string>{"manifest.json", "state.bin"},
        fmt::format("{} holds {}", dir, fmt::join(files_in(dir), " ")));
  const std::string b = read_file(dir + "/state.bin");
  const size_t n = s.params.size();
  check(b.size() == 96 + 12 * n, "state.bin size");
  if (b.size() != 96 + 12 * n) return;
  check(b.compare(0, 8, "WFCKPT01") == 0, "magic");
  check(at<uint32_t>(b, 8) == 2 && at<uint32_t>(b, 12) == 96, "version and header size");
  check(at<uint32_t>(b, 16) == 0 && at<uint32_t>(b, 20) == 1, "shard 0 of 1");
  check(at<uint32_t>(b, 24) == uint32_t(P) && at<uint32_t>(b, 28) == uint32_t(P),
        "world and replicas");
  check(at<uint64_t>(b, 32) == uint64_t(s.step), "step");
  check(at<uint64_t>(b, 40) == n && at<uint64_t>(b, 48) == 0 && at<uint64_t>(b, 56) == n,
        "parameter counts");
  check(at<uint64_t>(b, 64) == s.rng_state, "rng state");
  check(b.find_first_not_of('\0', 80) >= 96, "reserved bytes");
  std::string zeroed = b;
  std::memset(zeroed.data() + 72, 0, 8);
  const uint64_t sum = fnv(zeroed.data(), zeroed.size());
  check(at<uint64_t>(b, 72) == sum, "checksum over the header and the payload");
  check(std::memcmp(b.data() + 96, s.params.data(), 4 * n) == 0 &&
            std::memcmp(b.data() + 96 + 4 * n, s.m.data(), 4 * n) == 0 &&
            std::memcmp(b.data() + 96 + 8 * n, s.v.data(), 4 * n) == 0,
        "payload: params, m, v");
  const auto m = nlohmann::json::parse(read_file(dir + "/manifest.json"));
  std::vector<int> ranks(static_cast<size_t>(P));
  for (int r = 0; r < P; ++r) ranks[size_t(r)] = r;
  check(m["version"] == 2 && m["world"] == P && m["step"] == s.step && m["layout"]["sp"] == P,
        "manifest version, world, step, layout");
  check(m["shards"].size() == 1 && m["shards"][0]["file"] == "state.bin" &&
            m["shards"][0]["ranks"] == ranks && m["shards"][0]["first_param"] == 0 &&
            m["shards"][0]["num_params"] == n && m["shards"][0]["bytes"] == b.size() &&
            m["shards"][0]["fnv1a64"] == fmt::format("{:016x}", sum),
        "manifest shard entry: " + m["shards"].dump());
}

}  // namespace

int main(int argc, char** argv) {
  comm::MpiSession session(&argc, &argv);
  auto world = comm::Communicator::world();
  const int P = world.size(), rank = world.rank();
  const std::string dir = fmt::format("{}/ckpt_p{}", argc > 1 ? argv[1] : ".", P);
  if (rank == 0) {
    fs::remove_all(dir);
    fs::create_directories(dir);
  }
  world.barrier();

  train::CheckpointState s;
  s.step = 7;
  s.rng_state = 0xfedcba9876543210ULL;
  for (int i = 0; i < 100; ++i) {
    s.params.push_back(0.25f * float(i) - 1.0f);
    s.m.push_back(1e-2f * float(i));
    s.v.push_back(1e-4f * float(i + 3));
  }
  const std::string config = "[model]\nlayers = 1\n";
  const std::string layout = fmt::format(R"({{"world": {}, "sp": {}, "dp": 1}})", P, P);
  train::save_checkpoint(world, dir, s, config, layout, 2);
  if (rank == 0) check_files(dir + "/step-7", s, P);
  const auto back = train::load_checkpoint(dir + "/step-7", rank, P, 100);
  check(back.step == 7 && back.rng_state == s.rng_state && back.params == s.params &&
            back.m == s.m && back.v == s.v,
        "the state loads back");

  // One rank's state differs (a bug): every rank refuses alike, nothing of step 8 is written.
  train::CheckpointState other = s;
  other.step = 8;
  if (rank == P - 1) other.v[42] += 1e-6f;
  std::string message;
  try {
    train::save_checkpoint(world, dir, other, config, layout, 2);
  } catch (const Error& e) {
    message = e.what();
  }
  if (P > 1) {
    check(message.find("step 8: the ranks hold different training states") != std::string::npos,
          "differing states: '" + message + "'");
  } else {
    check(message.empty(), "one rank cannot disagree with itself: " + message);
  }
  world.barrier();
  if (rank == 0 && P > 1)
    check(files_in(dir) == std::vector<std::string>{"step-7"},
          fmt::format("after a refused save: {}", fmt::join(files_in(dir), " ")));

  // all_reduce_max on values above 2^63 (unsigned).
  {
    uint64_t x[2] = {(uint64_t(1) << 63) + uint64_t(rank), ~uint64_t(rank)};
    world.all_reduce_max(x, 2);
    check(x[0] == (uint64_t(1) << 63) + uint64_t(P - 1) && x[1] == ~uint64_t(0), "all_reduce_max");
  }

  return testing::finish(world, fmt::format("checkpoint writing on {} ranks", P));
}
