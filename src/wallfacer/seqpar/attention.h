#pragma once
// Distributed exact attention over a sequence-parallel group: the interface the models use.
// One long sequence of `seq` tokens is split over the P ranks of the group; each rank holds the
// rows of the tokens that the strategy's layout gives it (local_positions), computes q, k, v for
// them, and gets back o, lse (forward) and dq, dk, dv (backward) for the same rows.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "wallfacer/comm/communicator.h"
#include "wallfacer/seqpar/config.h"

namespace wallfacer::seqpar {

struct AttnStats {
  int64_t p2p_bytes_fwd = 0, p2p_bytes_bwd = 0;
  int64_t coll_bytes_fwd = 0, coll_bytes_bwd = 0;
  int64_t p2p_steps_fwd = 0, p2p_steps_bwd = 0;
  double fwd_ms = 0, bwd_ms = 0;
  double exposed_comm_fwd_ms = 0, exposed_comm_bwd_ms = 0;
  double attn_flops = 0;  // this rank's attention FLOPs, forward
};

class DistAttention {
 public:
  DistAttention(const AttnConfig& cfg, comm::Communicator& group);
  ~DistAttention();

  // q: (B, S/P, H, D), k, v: (B, S/P, Hkv, D) local rows, contiguous; o: (B, S/P, H, D),
  // lse: (B, H, S/P). Scale 1/sqrt(D).
  void forward(const float* q, const float* k, const float* v, float* o, float* lse);

  // Gradients for the same rows, given the forward's inputs and outputs.
  void backward(const float* q, const float* k, const float* v, const float* o, const float* lse,
                const float* dout, float* dq, float* dk, float* dv);

  const AttnStats& stats() const;

  // While transfers are pending, the kernels run on sub-blocks of this many query rows and MPI is
  // driven between them (default 256; 0: whole blocks, MPI progresses only in the waits).
  void set_progress_rows(int64_t rows);

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace wallfacer::seqpar
