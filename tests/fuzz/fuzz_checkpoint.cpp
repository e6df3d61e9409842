// Checkpoints (train/checkpoint.h) as `train --resume` and `sample --ckpt` read them: the input is
// manifest.json, then a line "--shard", then the bytes of the shard file. They are written into a
// temporary checkpoint folder under the names of both formats (state.bin, rank-00000.bin) and
// loaded as rank 0 of 1 and of 2 ranks for a model of 4 parameters (the seeds' size). Any input
// gives a state of the model's size at a non-negative step, or wallfacer::Error naming the file.

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "fuzz.h"
#include "wallfacer/train/checkpoint.h"

namespace {
constexpr int64_t kNumParams = 4;

// A folder of this process, removed when it ends.
struct ScratchDir {
  std::string path =
      (std::filesystem::temp_directory_path() / ("wf-fuzz-ckpt-" + std::to_string(getpid())))
          .string();
  ScratchDir() { std::filesystem::create_directories(path); }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
};
ScratchDir scratch;

void put(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), std::streamsize(bytes.size()));
  if (!f) std::abort();
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace wallfacer;
  const std::string text = fuzz::as_text(data, size), sep = "\n--shard\n";
  const size_t cut = text.find(sep);
  const std::string& dir = scratch.path;
  put(dir + "/manifest.json", text.substr(0, cut));
  const std::string shard = cut == std::string::npos ? "" : text.substr(cut + sep.size());
  put(dir + "/state.bin", shard);
  put(dir + "/rank-00000.bin", shard);
  for (int world : {1, 2}) {
    const auto st =
        fuzz::accepted<Error>([&] { return train::load_checkpoint(dir, 0, world, kNumParams); });
    if (!st) continue;
    FUZZ_EXPECT(st->step >= 0, fmt::format("step {}", st->step));
    FUZZ_EXPECT(int64_t(st->params.size()) == kNumParams && st->m.size() == st->params.size() &&
                    st->v.size() == st->params.size(),
                fmt::format("{} {} {} values", st->params.size(), st->m.size(), st->v.size()));
  }
  fuzz::accepted<Error>([&] { return train::checkpoint_config(dir); });
  return 0;
}
