#pragma once
// Memory sizing before allocation: a job whose estimated need exceeds what this process may use
// stops with the estimate and the limit instead of failing in the allocator minutes later.

#include <string>

namespace wallfacer {

// Bytes this process may allocate: set_memory_limit's value when given (--max-memory), else the
// machine's physical memory shared among the ranks the launcher placed on this node.
double memory_limit_bytes();
void set_memory_limit(double bytes);

// Throws UsageError when `bytes` exceed memory_limit_bytes(): "WHAT needs about X GiB per process,
// the limit is Y GiB: ...". A double, so that products of user values cannot wrap.
void check_memory(double bytes, const std::string& what);

}  // namespace wallfacer
