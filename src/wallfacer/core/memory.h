#pragma once
// Memory sizing before allocation: a job whose estimated need exceeds what this process may use
// stops with the estimate and the limit instead of failing in the allocator minutes later. And the
// allocator of large buffers (huge pages).

#include <cstddef>
#include <new>
#include <string>
#include <vector>

namespace wallfacer {

// Bytes this process may allocate: set_memory_limit's value when given (--max-memory), else the
// machine's physical memory shared among the ranks the launcher placed on this node.
double memory_limit_bytes();
void set_memory_limit(double bytes);

// Throws UsageError when `bytes` exceed memory_limit_bytes(): "WHAT needs about X GiB per process,
// the limit is Y GiB: ...". A double, so that products of user values cannot wrap.
void check_memory(double bytes, const std::string& what);

// Memory for large buffers (activation arenas, weights, KV caches): blocks of at least
// kLargePageBytes come 2 MiB-aligned and marked for transparent huge pages (madvise
// MADV_HUGEPAGE), so that a buffer of gigabytes is mapped in 2 MiB pages on first touch, not in
// hundreds of thousands of 4 KiB page faults; smaller ones come from operator new. Where the kernel
// has no transparent huge pages the hint is ignored.
constexpr size_t kLargePageBytes = size_t(4) << 20;
void* large_alloc(size_t bytes);
void large_free(void* p, size_t bytes) noexcept;

template <class T>
struct LargePageAllocator {
  using value_type = T;
  LargePageAllocator() = default;
  template <class U>
  LargePageAllocator(const LargePageAllocator<U>&) noexcept {}
  T* allocate(size_t n) {
    if (n > size_t(-1) / sizeof(T)) throw std::bad_array_new_length();
    return static_cast<T*>(large_alloc(n * sizeof(T)));
  }
  void deallocate(T* p, size_t n) noexcept { large_free(p, n * sizeof(T)); }
  template <class U>
  bool operator==(const LargePageAllocator<U>&) const noexcept {
    return true;
  }
};

// A std::vector whose large buffers come in huge pages (LargePageAllocator).
template <class T>
using LargeVector = std::vector<T, LargePageAllocator<T>>;

}  // namespace wallfacer
