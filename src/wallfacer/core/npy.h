#pragma once
// NumPy .npy files (format version 1.0, C order): float32 written and read, int64 written, and
// little-endian integers of 1, 2, 4 (signed or not) or 8 bytes (signed) read.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace wallfacer {

// Writes `data` (product of `shape` floats) to `path` via a temporary file and a rename.
// Throws wallfacer::Error naming the path when it cannot.
void write_npy(const std::string& path, const float* data, const std::vector<int64_t>& shape);
// The same for int64 data (NumPy '<i8').
void write_npy(const std::string& path, const int64_t* data, const std::vector<int64_t>& shape);

// Reads a float32 .npy file written by write_npy (or NumPy): returns the data, sets `shape`.
// Throws wallfacer::UsageError naming the path when the file cannot be read or is not such a file.
std::vector<float> read_npy(const std::string& path, std::vector<int64_t>& shape);

// The same from the file's bytes; `name` names them in messages. The shape must account for
// exactly the data bytes that follow the header (checked before anything is allocated).
std::vector<float> parse_npy(std::string_view bytes, const std::string& name,
                             std::vector<int64_t>& shape);

// Reads an integer .npy file ('|i1', '|u1', '<i2', '<u2', '<i4', '<u4' or '<i8', e.g. token ids):
// returns the values, sets `shape`. Throws UsageError naming the path as read_npy does; a
// float file is refused naming its type.
std::vector<int64_t> read_npy_ints(const std::string& path, std::vector<int64_t>& shape);
// The same from the file's bytes; `name` names them in messages.
std::vector<int64_t> parse_npy_ints(std::string_view bytes, const std::string& name,
                                    std::vector<int64_t>& shape);

}  // namespace wallfacer
