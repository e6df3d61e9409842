#pragma once
// What every fuzz target shares: the input as text, and a check of a property that must hold for
// every input, which aborts (a crash libFuzzer reports with the input) when it does not.

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>

#include "wallfacer/core/error.h"

namespace wallfacer::fuzz {

inline std::string as_text(const uint8_t* data, size_t size) {
  return std::string(reinterpret_cast<const char*>(data), size);
}

// What `read()` returns, or nothing when it refuses its input with a `Refusal` (the expected
// outcome for most inputs); any other exception escapes, and libFuzzer reports it.
template <class Refusal = UsageError, class Read>
auto accepted(Read&& read) -> std::optional<decltype(read())> {
  try {
    return read();
  } catch (const Refusal&) {
    return std::nullopt;
  }
}

[[noreturn]] inline void property_failed(const char* what, const std::string& detail) {
  std::fprintf(stderr, "fuzz property failed: %s\n%s\n", what, detail.c_str());
  std::abort();
}

}  // namespace wallfacer::fuzz

// FUZZ_EXPECT(cond, detail): aborts with the condition and `detail` (a std::string) unless cond.
#define FUZZ_EXPECT(cond, detail)                                     \
  do {                                                                \
    if (!(cond)) ::wallfacer::fuzz::property_failed(#cond, (detail)); \
  } while (0)
