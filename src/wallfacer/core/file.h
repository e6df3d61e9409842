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
// An advisory lock (flock) on the folder `dir`, held while the object lives: the file dir/name
// records the holder ("host HOST pid PID"). When another process holds it, the constructor throws
// UsageError naming `what` (e.g. "--out"), the folder and the holder. The kernel releases the lock
// of a process that ends in any way; the file a killed process leaves behind is taken over
// (taken_over() says whose it was). The destructor removes the file, when the path still names the
// file it locked (a launcher may have removed it and a new holder made another), and releases the
// lock.
class FolderLock {
 public:
  FolderLock() = default;
  FolderLock(const std::string& dir, const std::string& name, const std::string& what);
  ~FolderLock();
  FolderLock(FolderLock&& other) noexcept;
  FolderLock& operator=(FolderLock&& other) noexcept;
  FolderLock(const FolderLock&) = delete;
  FolderLock& operator=(const FolderLock&) = delete;
  // The holder recorded by a process that ended without releasing ("" when there was none).
  const std::string& taken_over() const { return taken_over_; }
  const std::string& path() const { return path_; }

 private:
  void release();
  int fd_ = -1;
  std::string path_, taken_over_;
};

// Whether `path` is a complete PNG: it ends with the IEND chunk (gnuplot does not always report a
// write that failed part-way, e.g. on a full disk).
bool png_complete(const std::string& path);

}  // namespace wallfacer
