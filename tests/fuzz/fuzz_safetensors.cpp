// safetensors files (core/safetensors.h): any bytes are a file whose tensors tile the data after
// the header exactly, each of the byte size its dtype and shape give, and whose float tensors read
// as the product of their shape in values; or a UsageError.

#include <vector>

#include "fuzz.h"
#include "wallfacer/core/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace wallfacer;
  const auto r = fuzz::accepted(
      [&] { return safetensors::Reader::parse(fuzz::as_text(data, size), "input.safetensors"); });
  if (!r) return 0;
  int64_t at = 0;
  for (const safetensors::TensorInfo& t : r->tensors()) {
    FUZZ_EXPECT(t.begin == at && t.end >= t.begin,
                fmt::format("'{}' at [{}, {}) after {}", t.name, t.begin, t.end, at));
    at = t.end;
    uint64_t count = 1;
    for (int64_t d : t.shape) {
      FUZZ_EXPECT(d >= 0, fmt::format("'{}' dimension {}", t.name, d));
      count = d == 0 || count == 0 ? 0 : count * uint64_t(d);
    }
    const int64_t elem = safetensors::dtype_size(t.dtype);
    FUZZ_EXPECT(elem > 0 && count * uint64_t(elem) == uint64_t(t.end - t.begin),
                fmt::format("'{}' {} [{}] in {} bytes", t.name, t.dtype, fmt::join(t.shape, ", "),
                            t.end - t.begin));
    FUZZ_EXPECT(r->has(t.name) && &r->info(t.name) == &t, t.name);
    if (t.dtype != "F32" && t.dtype != "BF16" && t.dtype != "F16") {
      FUZZ_EXPECT(!fuzz::accepted([&] { return r->read_f32(t.name); }), t.dtype);
      continue;
    }
    const std::vector<float> x = r->read_f32(t.name);
    FUZZ_EXPECT(x.size() == count, fmt::format("'{}': {} values of {}", t.name, x.size(), count));
  }
  FUZZ_EXPECT(uint64_t(at) <= size, fmt::format("data to {} in {} bytes", at, size));
  return 0;
}
