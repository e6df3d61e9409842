// .npy files (core/npy.h): any bytes give a shape whose product is the number of floats read (or
// of integers, for the integer reader), or wallfacer::Error.

#include "fuzz.h"
#include "wallfacer/core/npy.h"

namespace {

template <class Values>
void check_count(const Values& x, const std::vector<int64_t>& shape) {
  uint64_t count = 1;
  for (int64_t d : shape) FUZZ_EXPECT(d >= 0, fmt::format("dimension {}", d));
  for (int64_t d : shape) count = d == 0 || count == 0 ? 0 : count * uint64_t(d);
  FUZZ_EXPECT(x.size() == count,
              fmt::format("{} values for shape ({})", x.size(), fmt::join(shape, ", ")));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace wallfacer;
  const std::string bytes = fuzz::as_text(data, size);
  std::vector<int64_t> shape;
  if (const auto x = fuzz::accepted<Error>([&] { return parse_npy(bytes, "input.npy", shape); }))
    check_count(*x, shape);
  if (const auto x =
          fuzz::accepted<Error>([&] { return parse_npy_ints(bytes, "input.npy", shape); }))
    check_count(*x, shape);
  return 0;
}
