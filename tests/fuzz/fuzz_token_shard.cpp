// Token shards (train/data.h): any bytes are a shard whose tokens lie inside its vocabulary and
// fill the file after the header exactly, or a UsageError.

#include <cstring>
#include <vector>

#include "fuzz.h"
#include "wallfacer/train/data.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace wallfacer;
  // A copy in memory aligned as a mapped file is (check_shard views the tokens in place).
  std::vector<uint16_t> aligned((size + 1) / 2);
  if (size > 0) std::memcpy(aligned.data(), data, size);
  const auto v =
      fuzz::accepted([&] { return train::check_shard(aligned.data(), size, "input.bin"); });
  if (!v) return 0;
  FUZZ_EXPECT(v->size >= 0 && 64 + 2 * uint64_t(v->size) == size,
              fmt::format("{} tokens in {} bytes", v->size, size));
  FUZZ_EXPECT(v->vocab >= 1 && v->vocab <= 65536, fmt::format("vocabulary {}", v->vocab));
  for (int64_t i = 0; i < v->size; ++i)
    FUZZ_EXPECT(v->tokens[i] < v->vocab, fmt::format("token {} at {}", v->tokens[i], i));
  return 0;
}
