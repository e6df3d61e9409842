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

namespace wallfacer::seqpar {

enum class Strategy { Ring, Zigzag, Ulysses, WallFacer };

// "ring" | "zigzag" | "ulysses" | "wallfacer"; throws UsageError naming the bad value.
Strategy parse_strategy(std::string_view name);
std::string_view strategy_name(Strategy s);

struct AttnConfig {
  Strategy strategy = Strategy::Ring;
  int teams = 1;  // C, for WallFacer
  int batch = 1;
  int64_t seq = 0;  // global sequence length
  int heads = 1;
  int kv_heads = 1;
  int head_dim = 0;
  bool causal = false;
};

// Throws UsageError with a one-line message when cfg cannot run on P ranks.
void validate(const AttnConfig& cfg, int P);

// Global token positions of the rows rank `rank` holds, in local row order (seq / P of them).
std::vector<int64_t> local_positions(const AttnConfig& cfg, int P, int rank);

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

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace wallfacer::seqpar
