#pragma once
// Durable file writes: temp name, write, fsync, rename, fsync of the directory.

#include <string>

namespace wallfacer {

// Writes `bytes` to `path` atomically: a reader sees the old file or the complete new one.
void write_file_atomic(const std::string& path, const std::string& bytes);
// fsync of a directory (after renames inside it).
void fsync_dir(const std::string& dir);
// The whole file; throws UsageError naming the path when it cannot be read or is a folder.
std::string read_file(const std::string& path);
// Creates the folder `dir` and its parents; throws UsageError naming `what` (e.g. "--out") and the
// reason when it cannot.
void make_directories(const std::string& dir, const std::string& what);
// Throws UsageError naming `what` (e.g. "--out") when the folder that would hold the file `path`
// does not exist or is not a folder.
void check_output_folder(const std::string& path, const std::string& what);
// Whether `path` is a complete PNG: it ends with the IEND chunk (gnuplot does not always report a
// write that failed part-way, e.g. on a full disk).
bool png_complete(const std::string& path);

}  // namespace wallfacer
