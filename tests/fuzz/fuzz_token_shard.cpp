// Token shards (train/data.h), versions 1 (u16 ids) and 2 (i32 ids): any bytes are a shard whose
// tokens lie inside its vocabulary and fill the file after the header exactly, or a UsageError.

#include <cstring>
#include <vector>

#include "fuzz.h"
#include "wallfacer/train/data.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace wallfacer;
  // A copy in memory aligned as a mapped file is (check_shard views the tokens in place).
  std::vector<int32_t> aligned((size + 3) / 4);
  if (size > 0) std::memcpy(aligned.data(), data, size);
  const auto v =
      fuzz::accepted([&] { return train::check_shard(aligned.data(), size, "input.bin"); });
  if (!v) return 0;
  const uint64_t token_bytes = v->tokens32 ? 4 : 2;
  FUZZ_EXPECT((v->tokens32 != nullptr) != (v->tokens16 != nullptr), "one kind of tokens");
  FUZZ_EXPECT(v->size >= 0 && 64 + token_bytes * uint64_t(v->size) == size,
              fmt::format("{} tokens in {} bytes", v->size, size));
  FUZZ_EXPECT(v->vocab >= 1 && v->vocab <= (v->tokens32 ? int64_t(1) << 31 : 65536),
              fmt::format("vocabulary {}", v->vocab));
  FUZZ_EXPECT(v->eos >= 0 && (v->tokens16 || v->eos < v->vocab),
              fmt::format("end-of-text {}", v->eos));
  for (int64_t i = 0; i < v->size; ++i)
    FUZZ_EXPECT((*v)[i] >= 0 && (*v)[i] < v->vocab, fmt::format("token {} at {}", (*v)[i], i));
  return 0;
}
