// Trace files as trace-plot reads them (core/trace.h, read_timeline): any bytes give a timeline
// or a UsageError; its ranks cover every span, its hosts name every rank or none, and its labels
// are printable.

#include <algorithm>
#include <cmath>

#include "fuzz.h"
#include "wallfacer/core/trace.h"

namespace {

bool printable(const std::string& s) {
  return std::none_of(s.begin(), s.end(),
                      [](char c) { return static_cast<unsigned char>(c) < 0x20 || c == 0x7f; });
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace wallfacer;
  const auto read = fuzz::accepted([&] { return trace::read_timeline(fuzz::as_text(data, size)); });
  if (!read) return 0;
  const trace::Timeline& t = *read;
  FUZZ_EXPECT(t.ranks >= 0 && t.ranks <= trace::kMaxTraceRank + 1,
              fmt::format("{} ranks", t.ranks));
  for (const auto& s : t.spans) {
    FUZZ_EXPECT(s.rank >= 0 && s.rank < t.ranks, fmt::format("rank {} of {}", s.rank, t.ranks));
    FUZZ_EXPECT(s.lane >= 0 && s.lane < 100, fmt::format("lane {}", s.lane));
    FUZZ_EXPECT(std::isfinite(s.ts + s.dur) && s.dur >= 0, fmt::format("{} {}", s.ts, s.dur));
  }
  FUZZ_EXPECT(t.hosts.empty() || t.hosts.size() == size_t(t.ranks),
              fmt::format("{} hosts for {} ranks", t.hosts.size(), t.ranks));
  FUZZ_EXPECT(printable(t.title) && printable(t.command), t.title + "\n" + t.command);
  for (const auto& h : t.hosts) FUZZ_EXPECT(printable(h), h);
  return 0;
}
