#pragma once
// The run behind `wallfacer attn`: distributed attention, forward and backward, on the seeded
// inputs of the harness, on every rank of an MPI job. Its steps, in order:
//   AttnRun run(cfg, options);   MPI up; cfg checked for the world's ranks, memory, trace file
//   run.place(layout_rank_of);   the ranks ordered by layout rank; the --dump folder made
//   run.iterate();               the iterations (timed, traced)
//   run.summarize();             bytes, steps and times over the ranks
//   run.write_trace(metadata);   the merged Chrome trace (with a trace file)
//   run.check_and_dump();        gathered results against the reference, and the .npy files
//   run.finish();                every rank waits for rank 0's output
// Every step but the constructor and `rank` is collective. An error on one rank ends the job
// through the caller's error path (docs/faults.md).

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "wallfacer/comm/topology.h"
#include "wallfacer/seqpar/config.h"
#include "wallfacer/seqpar/harness.h"

namespace wallfacer::seqpar {

struct AttnRunOptions {
  uint64_t seed = 1;            // of the inputs (fill_inputs)
  int iters = 1;                // iterations of forward and backward
  int64_t progress_rows = 256;  // DistAttention::set_progress_rows
  bool check = false;           // compare with the single-process reference
  std::string dump;             // folder for the inputs and gathered results (.npy); "" none
  std::string trace;            // Chrome trace file of the iterations; "" none
};

// What check_and_dump found: the errors and the reference on rank 0 when `checked`; `pass` on
// every rank (the verdict of rank 0's check, true without one).
struct AttnCheck {
  bool checked = false;
  AttnErrors errors;
  bool fp64 = true;  // the reference: naive fp64, else the fp32 kernel on the whole sequence
  bool pass = true;
};

class AttnRun {
 public:
  // Starts MPI; throws UsageError on every rank when cfg cannot run on the world's ranks, its
  // tensors do not fit in memory, or the trace file cannot be written (then aligns the clocks).
  // A double ring with inner = 0 takes the default inner ring length of the world's nodes
  // (resolved_inner with the largest node's ranks, comm::discover_topology).
  AttnRun(const AttnConfig& cfg, const AttnRunOptions& options);
  ~AttnRun();
  AttnRun(const AttnRun&) = delete;
  AttnRun& operator=(const AttnRun&) = delete;

  int ranks() const;                       // P
  const AttnConfig& config() const;        // as run (the double ring's inner resolved)
  const comm::Topology& topology() const;  // world rank -> node

  // Orders the ranks by layout rank: world rank w takes layout rank layout_rank_of[w] (a
  // permutation of 0..P-1: a placement, plan/placement.h); then rank 0 makes the --dump folder (a
  // folder it cannot create stops every rank).
  void place(const std::vector<int>& layout_rank_of);
  int rank() const;  // this process's layout rank (after place)

  // This rank's rows of the seeded inputs, then the iterations of forward and backward (each
  // begun on a barrier, traced with a trace file).
  void iterate();
  RunSummary summarize();
  // With a trace file: gathers the spans and rank 0 writes them, `metadata` in "otherData".
  void write_trace(const nlohmann::json& metadata);
  // With --check or --dump: gathers the outputs; rank 0 checks them against the reference and
  // writes the .npy files.
  AttnCheck check_and_dump();
  void finish();  // barrier: rank 0's output is out before any rank exits

 private:
  struct State;
  std::unique_ptr<State> s_;
};

}  // namespace wallfacer::seqpar
