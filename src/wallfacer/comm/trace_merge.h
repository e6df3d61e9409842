#pragma once
// A job's trace: clock alignment of the ranks against rank 0 and the merge of every rank's
// recorded spans (core/trace.h) into one Chrome trace file, written by rank 0 (docs/trace.md).

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "wallfacer/comm/communicator.h"

namespace wallfacer::comm {

struct ClockSync {
  int64_t offset_ns = 0;  // this rank's: add to its steady clock to read rank 0's
  double error_us = 0;    // bound on |offset error| over all ranks (half the best round trip)
  std::vector<double> offsets_us, errors_us;  // every rank's (index = rank)
};

// Collective over `world`: each rank exchanges `pings` round trips with rank 0 and keeps the one
// with the shortest round trip: offset = t(rank 0) - (t(send) + t(reply)) / 2, error = RTT / 2.
ClockSync sync_clocks(Communicator& world, int pings = 16);

// Collective: rank 0 checks that it can create `path` (a temp file next to it, removed again).
// Throws UsageError on every rank when it cannot (rank 0's with the reason).
void check_trace_path(Communicator& world, const std::string& path);

// Collective: gathers every rank's recorded spans to rank 0, which writes the merged file to
// `path` atomically (temp name, rename). `metadata` goes to "otherData", with the alignment error,
// the ranks, the hosts and the dropped spans added. Every rank returns, or every rank throws
// UsageError (rank 0's naming the cause) when rank 0 could not write.
void write_trace(Communicator& world, const std::string& path, const ClockSync& sync,
                 nlohmann::json metadata);

}  // namespace wallfacer::comm
