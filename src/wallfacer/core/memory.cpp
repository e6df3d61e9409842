#include "wallfacer/core/memory.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdlib>
#include <new>

#include "wallfacer/core/error.h"
#include "wallfacer/core/threads.h"

namespace wallfacer {

namespace {
double& limit_override() {
  static double bytes = 0;  // 0: none
  return bytes;
}
}  // namespace

double memory_limit_bytes() {
  if (limit_override() > 0) return limit_override();
  const double total = double(sysconf(_SC_PHYS_PAGES)) * double(sysconf(_SC_PAGE_SIZE));
  return total / double(local_ranks());
}

void set_memory_limit(double bytes) { limit_override() = bytes; }

void check_memory(double bytes, const std::string& what) {
  const double limit = memory_limit_bytes(), gib = 1024.0 * 1024.0 * 1024.0;
  WF_USAGE_CHECK(bytes <= limit,
                 "{} needs about {:.3g} GiB per process; the limit is {:.3g} GiB (this machine's "
                 "memory shared by its ranks, or --max-memory): make the job smaller or spread it "
                 "over more ranks",
                 what, bytes / gib, limit / gib);
}

namespace {
constexpr size_t kHugePage = size_t(2) << 20;
}  // namespace

void* large_alloc(size_t bytes) {
  if (bytes < kLargePageBytes) return ::operator new(bytes);
  const size_t rounded = (bytes + kHugePage - 1) / kHugePage * kHugePage;
  void* p = std::aligned_alloc(kHugePage, rounded);
  if (!p) throw std::bad_alloc();
  madvise(p, rounded, MADV_HUGEPAGE);  // a hint: without transparent huge pages it fails, harmless
  return p;
}

void large_free(void* p, size_t bytes) noexcept {
  if (bytes < kLargePageBytes) {
    ::operator delete(p);
    return;
  }
  std::free(p);
}

}  // namespace wallfacer
