#pragma once
// Scratch arrays of fp32 that outlive a kernel call. Internal to the kernels (the bf16 portable
// paths: attention_bf16.cpp, dense_bf16.cpp; the fp32 forward's avx512 path: attention.cpp).
//
// Each thread has a few buffers (slots) that only grow: the next call of the same size neither
// allocates nor touches fresh pages, and nothing is zeroed (every array is written before it is
// read). A buffer is kept up to kScratchKeepBytes; a larger one is freed when the Scratch that grew
// it ends. Slots keep apart the buffers a thread uses at the same time, e.g. a call's shared arrays
// (slot 0, on the calling thread) and an OpenMP thread's own (slot 1; the calling thread is one of
// the region's threads); slot 2 holds the fp32 forward's packed keys (kernels/attention.cpp), which
// the bf16 portable path calls with its own arrays in slot 0.

#include <cstddef>
#include <cstdint>
#include <memory>

#include "wallfacer/core/error.h"

namespace wallfacer::kernels::detail {

inline constexpr size_t kScratchKeepBytes = size_t(64) << 20;
inline constexpr int kScratchSlots = 3;

class Scratch {
 public:
  Scratch(int64_t bytes, int slot) : buf_(buffer(slot)) {
    const size_t floats = size_t(bytes) / sizeof(float);
    if (floats > buf_.floats) {
      buf_.data.reset();
      buf_.data.reset(new float[floats]);
      buf_.floats = floats;
    }
  }
  ~Scratch() {
    if (buf_.floats * sizeof(float) > kScratchKeepBytes) buf_ = Buffer{};
  }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;

  // Hands out the buffer again from its start.
  void reset() { used_ = 0; }
  // The next `floats` floats of the buffer.
  float* take(size_t floats) {
    WF_CHECK(used_ + floats <= buf_.floats, "kernel scratch of {} floats exceeded", buf_.floats);
    float* p = buf_.data.get() + used_;
    used_ += floats;
    return p;
  }

 private:
  struct Buffer {
    std::unique_ptr<float[]> data;
    size_t floats = 0;
  };
  static Buffer& buffer(int slot) {
    thread_local Buffer buffers[kScratchSlots];
    WF_CHECK(slot >= 0 && slot < kScratchSlots, "kernel scratch slot {} out of range", slot);
    return buffers[slot];
  }
  Buffer& buf_;
  size_t used_ = 0;
};

}  // namespace wallfacer::kernels::detail
