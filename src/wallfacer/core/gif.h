#pragma once
// A minimal animated GIF (GIF89a) writer for RGB frames: a fixed 3-3-2 palette (8 red x 8 green
// x 4 blue levels), LZW codes kept 9 bits wide by a clear code every 254 pixels (valid for every
// decoder, not compressed much), looping forever.

#include <cstdint>
#include <string>
#include <vector>

namespace wallfacer {

// frames: (count, height, width, 3) bytes. delay_cs: time per frame in 1/100 s. Writes `path`
// with write_file_atomic (core/file.h): no PATH.tmp is left when it fails; throws Error.
void write_gif(const std::string& path, const uint8_t* frames, int count, int height, int width,
               int delay_cs);

// The bytes write_gif would write.
std::vector<uint8_t> encode_gif(const uint8_t* frames, int count, int height, int width,
                                int delay_cs);

}  // namespace wallfacer
