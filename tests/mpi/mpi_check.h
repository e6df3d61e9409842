#pragma once
// Failure counting for the MPI test programs: check() prints what failed on this rank; finish()
// sums the failures over the ranks, prints one line on rank 0 and gives the exit code.

#include <cstdio>
#include <string>

#include "wallfacer/comm/communicator.h"

namespace wallfacer::testing {

inline int failures = 0;

inline void check(bool ok, const std::string& what) {
  if (ok) return;
  ++failures;
  std::fprintf(stderr, "FAIL %s\n", what.c_str());
}

// "ok: SUMMARY" or "FAIL: SUMMARY" on rank 0; 0 when no rank failed, 1 otherwise.
inline int finish(comm::Communicator& world, const std::string& summary) {
  double f = failures;
  world.all_reduce_sum(&f, 1);
  if (world.rank() == 0) std::printf("%s: %s\n", f > 0 ? "FAIL" : "ok", summary.c_str());
  return f > 0 ? 1 : 0;
}

}  // namespace wallfacer::testing
