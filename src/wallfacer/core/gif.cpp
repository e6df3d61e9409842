#include "wallfacer/core/gif.h"

#include <cstdio>

#include "wallfacer/core/error.h"
#include "wallfacer/core/file.h"

namespace wallfacer {

namespace {

void put16(std::vector<uint8_t>& b, int v) {
  b.push_back(uint8_t(v & 0xff));
  b.push_back(uint8_t((v >> 8) & 0xff));
}

// Packs codes LSB first and emits them as data sub-blocks of up to 255 bytes.
class CodeWriter {
 public:
  explicit CodeWriter(std::vector<uint8_t>& out) : out_(out) {}
  void put(int code, int width) {
    acc_ |= uint32_t(code) << nbits_;
    nbits_ += width;
    while (nbits_ >= 8) {
      byte(uint8_t(acc_ & 0xff));
      acc_ >>= 8;
      nbits_ -= 8;
    }
  }
  void finish() {
    if (nbits_ > 0) byte(uint8_t(acc_ & 0xff));
    flush();
    out_.push_back(0);  // block terminator
  }

 private:
  void byte(uint8_t b) {
    block_.push_back(b);
    if (block_.size() == 255) flush();
  }
  void flush() {
    if (block_.empty()) return;
    out_.push_back(uint8_t(block_.size()));
    out_.insert(out_.end(), block_.begin(), block_.end());
    block_.clear();
  }
  std::vector<uint8_t>& out_;
  std::vector<uint8_t> block_;
  uint32_t acc_ = 0;
  int nbits_ = 0;
};

}  // namespace

std::vector<uint8_t> encode_gif(const uint8_t* frames, int count, int height, int width,
                                int delay_cs) {
  WF_CHECK(count >= 1 && height >= 1 && width >= 1 && height < 65536 && width < 65536,
           "GIF needs at least one frame of 1..65535 pixels per side (got {} of {}x{})", count,
           height, width);
  std::vector<uint8_t> b;
  for (char c : std::string("GIF89a")) b.push_back(uint8_t(c));
  put16(b, width);
  put16(b, height);
  b.push_back(0xF7);               // global colour table of 256 entries, 8 bits per channel
  b.push_back(0);                  // background colour
  b.push_back(0);                  // aspect
  for (int i = 0; i < 256; ++i) {  // 3-3-2 palette
    b.push_back(uint8_t(((i >> 5) & 7) * 255 / 7));
    b.push_back(uint8_t(((i >> 2) & 7) * 255 / 7));
    b.push_back(uint8_t((i & 3) * 255 / 3));
  }
  // NETSCAPE2.0 application extension: loop forever.
  b.insert(b.end(), {0x21, 0xFF, 0x0B});
  for (char c : std::string("NETSCAPE2.0")) b.push_back(uint8_t(c));
  b.insert(b.end(), {0x03, 0x01, 0x00, 0x00, 0x00});
  const int64_t pixels = int64_t(height) * width;
  for (int f = 0; f < count; ++f) {
    b.insert(b.end(), {0x21, 0xF9, 0x04, 0x04});  // graphic control: keep the frame
    put16(b, delay_cs);
    b.insert(b.end(), {0x00, 0x00});
    b.push_back(0x2C);  // image descriptor
    put16(b, 0);
    put16(b, 0);
    put16(b, width);
    put16(b, height);
    b.push_back(0);
    b.push_back(8);  // LZW minimum code size
    CodeWriter w(b);
    constexpr int kClear = 256, kEnd = 257, kWidth = 9, kRun = 254;
    const uint8_t* px = frames + int64_t(f) * pixels * 3;
    for (int64_t i = 0; i < pixels; ++i) {
      if (i % kRun == 0) w.put(kClear, kWidth);
      const uint8_t* p = px + i * 3;
      w.put(((p[0] * 7 + 127) / 255) << 5 | ((p[1] * 7 + 127) / 255) << 2 | (p[2] * 3 + 127) / 255,
            kWidth);
    }
    w.put(kEnd, kWidth);
    w.finish();
  }
  b.push_back(0x3B);  // trailer
  return b;
}

void write_gif(const std::string& path, const uint8_t* frames, int count, int height, int width,
               int delay_cs) {
  const std::vector<uint8_t> bytes = encode_gif(frames, count, height, width, delay_cs);
  write_file_atomic(path, std::string(bytes.begin(), bytes.end()));
}

}  // namespace wallfacer
