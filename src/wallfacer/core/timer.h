#pragma once
// Wall-clock timing and peak resident memory.

#include <chrono>
#include <cstdint>

namespace wallfacer {

class Timer {
 public:
  Timer() : start_(std::chrono::steady_clock::now()) {}
  void reset() { start_ = std::chrono::steady_clock::now(); }
  double seconds() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }
  double ms() const { return seconds() * 1e3; }

 private:
  std::chrono::steady_clock::time_point start_;
};

// Peak resident set size of this process in bytes (VmHWM).
int64_t peak_rss_bytes();

}  // namespace wallfacer
