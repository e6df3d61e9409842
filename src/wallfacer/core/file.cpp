#include "wallfacer/core/file.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "wallfacer/core/error.h"

namespace wallfacer {

void fsync_dir(const std::string& dir) {
  const int fd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

void write_file_atomic(const std::string& path, const std::string& bytes) {
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  WF_CHECK(fd >= 0, "cannot create '{}': {}", tmp, std::strerror(errno));
  // A failed write leaves neither the temporary file nor a changed `path`.
  const auto fail = [&](const std::string& what) {
    const int e = errno;
    ::close(fd);
    ::unlink(tmp.c_str());
    raise_error(__FILE__, __LINE__, fmt::format("{} '{}' failed: {}", what, tmp, std::strerror(e)));
  };
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t w = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) fail("write to");
    done += size_t(w);
  }
  if (::fsync(fd) != 0) fail("fsync of");
  if (::close(fd) != 0) {
    const int e = errno;
    ::unlink(tmp.c_str());
    raise_error(__FILE__, __LINE__, fmt::format("close of '{}' failed: {}", tmp, std::strerror(e)));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int e = errno;
    ::unlink(tmp.c_str());
    raise_error(__FILE__, __LINE__,
                fmt::format("rename '{}' -> '{}' failed: {}", tmp, path, std::strerror(e)));
  }
  fsync_dir(std::filesystem::path(path).parent_path().string());
}

std::string read_file(const std::string& path) {
  std::error_code ec;
  WF_USAGE_CHECK(!std::filesystem::is_directory(path, ec),
                 "'{}' is a folder; a file is expected there", path);
  std::ifstream f(path, std::ios::binary);
  WF_USAGE_CHECK(f.good(), "cannot read '{}'", path);
  // A regular file is read in one piece into a string of its size (a checkpoint of gigabytes is
  // not copied through a growing buffer); anything else (a pipe) through a stream.
  std::error_code size_ec;
  const std::uintmax_t size = std::filesystem::is_regular_file(path, size_ec)
                                  ? std::filesystem::file_size(path, size_ec)
                                  : std::uintmax_t(-1);
  if (!size_ec && size != std::uintmax_t(-1)) {
    std::string bytes(size_t(size), '\0');
    f.read(bytes.data(), std::streamsize(size));
    WF_USAGE_CHECK(f.gcount() == std::streamsize(size) && f.peek() == EOF,
                   "cannot read '{}': it changed size while being read", path);
    return bytes;
  }
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

void make_directories(const std::string& dir, const std::string& what) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  WF_USAGE_CHECK(!ec && std::filesystem::is_directory(dir),
                 "cannot create the folder '{}' ({}): {}; give {} a writable folder", dir, what,
                 ec ? ec.message() : "a file of that name exists", what);
}

void check_output_folder(const std::string& path, const std::string& what) {
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  const std::filesystem::path dir = parent.empty() ? std::filesystem::path(".") : parent;
  std::error_code ec;
  WF_USAGE_CHECK(std::filesystem::is_directory(dir, ec),
                 "cannot write '{}': the folder '{}' does not exist or is not a folder; give {} a "
                 "path in a writable folder",
                 path, dir.string(), what);
}

bool png_complete(const std::string& path) {
  std::string tail(8, '\0');
  std::ifstream f(path, std::ios::binary | std::ios::ate);
  return f.good() && f.tellg() >= 8 && f.seekg(-8, std::ios::end) && f.read(tail.data(), 8) &&
         tail == std::string("IEND\xae\x42\x60\x82", 8);
}

namespace {

std::string read_fd(int fd) {
  std::string text;
  char buf[256];
  for (off_t at = 0;;) {
    const ssize_t n = ::pread(fd, buf, sizeof buf, at);
    if (n <= 0) break;
    text.append(buf, size_t(n));
    at += n;
  }
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  return text;
}

}  // namespace

FolderLock::FolderLock(const std::string& dir, const std::string& name, const std::string& what)
    : path_((std::filesystem::path(dir) / name).string()) {
  for (;;) {
    fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    WF_USAGE_CHECK(fd_ >= 0, "{}: cannot create the lock file '{}': {}", what, path_,
                   std::strerror(errno));
    if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
      const int e = errno;
      const std::string holder = read_fd(fd_);
      ::close(fd_);
      fd_ = -1;
      WF_USAGE_CHECK(e != EWOULDBLOCK,
                     "{} '{}' is in use by another job ({}; lock file '{}'): wait until it ends, "
                     "or choose another {}",
                     what, dir, holder.empty() ? "starting" : holder, path_, what);
      WF_USAGE_CHECK(false, "{}: cannot lock '{}': {}", what, path_, std::strerror(e));
    }
    // The holder before us may have removed the file between our open and flock: then the lock
    // is on a file nobody else sees; lock the one at the path now.
    struct stat held {
    }, now{};
    if (::fstat(fd_, &held) == 0 && ::stat(path_.c_str(), &now) == 0 && held.st_dev == now.st_dev &&
        held.st_ino == now.st_ino)
      break;
    ::close(fd_);
    fd_ = -1;
  }
  taken_over_ = read_fd(fd_);
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) != 0) std::strcpy(host, "unknown");
  const std::string me = "host " + std::string(host) + " pid " + std::to_string(::getpid()) + "\n";
  if (::ftruncate(fd_, 0) != 0 || ::pwrite(fd_, me.data(), me.size(), 0) != ssize_t(me.size())) {
    const int e = errno;
    release();
    WF_USAGE_CHECK(false, "{}: cannot write the lock file '{}': {}", what, path_, std::strerror(e));
  }
}

void FolderLock::release() {
  if (fd_ < 0) return;
  // While still holding it: a process waiting on this file retries. Only when the path still
  // names our file: a launcher may have handed it to a new job while this one was stalled
  // (scripts/wallfacer-elastic, a frozen node).
  struct stat held {
  }, now{};
  if (::fstat(fd_, &held) == 0 && ::stat(path_.c_str(), &now) == 0 && held.st_dev == now.st_dev &&
      held.st_ino == now.st_ino)
    ::unlink(path_.c_str());
  ::close(fd_);
  fd_ = -1;
}

FolderLock::~FolderLock() { release(); }

FolderLock::FolderLock(FolderLock&& other) noexcept
    : fd_(other.fd_), path_(std::move(other.path_)), taken_over_(std::move(other.taken_over_)) {
  other.fd_ = -1;
}

FolderLock& FolderLock::operator=(FolderLock&& other) noexcept {
  if (this != &other) {
    release();
    fd_ = other.fd_;
    path_ = std::move(other.path_);
    taken_over_ = std::move(other.taken_over_);
    other.fd_ = -1;
  }
  return *this;
}

}  // namespace wallfacer
