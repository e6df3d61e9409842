#pragma once
// NumPy .npy files (format version 1.0, little-endian float32 (and int64 written), C order).

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
// Throws wallfacer::Error naming the path when the file cannot be read or is not such a file.
std::vector<float> read_npy(const std::string& path, std::vector<int64_t>& shape);

// The same from the file's bytes; `name` names them in messages. The shape must account for
// exactly the data bytes that follow the header (checked before anything is allocated).
std::vector<float> parse_npy(std::string_view bytes, const std::string& name,
                             std::vector<int64_t>& shape);

}  // namespace wallfacer
