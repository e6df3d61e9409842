// .npy files (core/npy.h): any bytes give a shape whose product is the number of floats read, or
// wallfacer::Error.

#include "fuzz.h"
#include "wallfacer/core/npy.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace wallfacer;
  std::vector<int64_t> shape;
  const auto x = fuzz::accepted<Error>(
      [&] { return parse_npy(fuzz::as_text(data, size), "input.npy", shape); });
  if (!x) return 0;
  uint64_t count = 1;
  for (int64_t d : shape) FUZZ_EXPECT(d >= 0, fmt::format("dimension {}", d));
  for (int64_t d : shape) count = d == 0 || count == 0 ? 0 : count * uint64_t(d);
  FUZZ_EXPECT(x->size() == count,
              fmt::format("{} floats for shape ({})", x->size(), fmt::join(shape, ", ")));
  return 0;
}
