#pragma once
// Distributed exact attention over a sequence-parallel group: the interface the models use.
// One long sequence of `seq` tokens is split over the P ranks of the group; each rank holds the
// rows of the tokens that the strategy's layout gives it (local_positions), computes q, k, v for
// them, and gets back o, lse (forward) and dq, dk, dv (backward) for the same rows. The result
// equals single-process attention on the whole sequence (kernels::attn_fwd / attn_bwd) within
// fp32 rounding, or within the bf16 tolerances with AttnConfig::dtype = bf16 (docs/numerics.md).
//
// Tensors (contiguous, row-major; n = seq / P rows, in local_positions order; fp32, or with
// AttnConfig::dtype = bf16 every one but lse bf16):
//   q, o, dout, dq   (B, n, H, D)       B = batch, H = heads, D = head_dim
//   k, v, dk, dv     (B, n, Hkv, D)     Hkv = kv_heads
//   lse              (B, H, n)          natural log of each row's softmax denominator (scaled
//                                       scores), -inf for a row that sees no key
// Scores are q.k / sqrt(D); causal masks compare global token positions.
//
// bf16 (AttnConfig::dtype = bf16): q, k, v, o, dout, dq, dk, dv are wallfacer::bf16 and lse is
// fp32; the bf16 kernels (kernels/attention_bf16.h) compute in fp32, the tensors travel between
// ranks as bf16, and the partial O and the gradients are accumulated in fp32 (the gradients also
// travel in fp32) and rounded to bf16 once, into o, dq, dk, dv (docs/seqpar.md, "bf16").
//
// Memory: the caller owns every tensor; wallfacer reads and writes them only during the call and
// keeps no pointer. A DistAttention owns its scratch buffers (allocated when it is built; with
// keep_kv also one team K,V block per forward awaiting its backward) and its sub-communicators.
//
// Collective: the constructor, forward, backward and the destructor are called by every rank of
// the group, in the same order (the constructor splits the group; a forward or backward on one
// rank waits for the others). Thread-safety: one thread at a time per DistAttention and its
// group; the kernels inside run OpenMP threads (OMP_NUM_THREADS, else the CPUs this process may
// use).
//
// Errors: a config the group cannot run throws UsageError from the constructor, the same on every
// rank (seqpar::validate); a failed MPI call or bad buffer throws wallfacer::Error; a rank that
// stops making progress ends the job through the watchdog (comm::set_timeout).
//
// Placement (which ranks share a node) is the group's rank order: the strategy's layout rank r is
// rank r of the group. To place WallFacer's sub-rings inside nodes of consecutive ranks
// (plan::Placement::RingIntra), order the group first:
//   plan::Candidate c{cfg.strategy, cfg.teams, cfg.ulysses, plan::Placement::RingIntra};
//   auto layout_of = plan::inverse_order(plan::candidate_devices(c, world.size()));
//   auto group = world.split(0, layout_of[world.rank()]);
// (plan::plan_all ranks the placements for a cluster; team-intra is the plain order.)

#include <cstdint>
#include <memory>
#include <vector>

#include "wallfacer/comm/communicator.h"
#include "wallfacer/core/bf16.h"
#include "wallfacer/seqpar/config.h"

namespace wallfacer::seqpar {

// This rank's figures of the latest forward and backward (not summed over calls).
struct AttnStats {
  int64_t p2p_bytes_fwd = 0, p2p_bytes_bwd = 0;    // bytes this rank sent point-to-point
  int64_t coll_bytes_fwd = 0, coll_bytes_bwd = 0;  // bytes its collectives address to other ranks
  int64_t p2p_steps_fwd = 0, p2p_steps_bwd = 0;    // point-to-point rounds
  double fwd_ms = 0, bwd_ms = 0;                   // wall time, milliseconds
  double exposed_comm_fwd_ms = 0, exposed_comm_bwd_ms = 0;  // of it, blocked on communication
  double attn_flops = 0;                                    // this rank's attention FLOPs, forward
  // The ring algorithm's volume of the same collectives (equal for the attention's).
  int64_t coll_formula_bytes_fwd = 0, coll_formula_bytes_bwd = 0;
};

class DistAttention {
 public:
  // Collective over `group` (P = group.size() ranks): validates cfg for P (UsageError), splits
  // the sub-groups the strategy needs and allocates its scratch buffers. Keeps a copy of `group`
  // (its MPI communicator lives as long as this object).
  DistAttention(const AttnConfig& cfg, comm::Communicator& group);
  ~DistAttention();
  DistAttention(const DistAttention&) = delete;
  DistAttention& operator=(const DistAttention&) = delete;

  // Collective. This rank's rows: q (B, n, H, D), k, v (B, n, Hkv, D) in; o (B, n, H, D),
  // lse (B, H, n) out (overwritten). Inputs are not modified; outputs must not overlap inputs.
  // The float forms need AttnConfig::dtype = fp32, the bf16 forms bf16 (else UsageError).
  void forward(const float* q, const float* k, const float* v, float* o, float* lse);
  void forward(const bf16* q, const bf16* k, const bf16* v, bf16* o, float* lse);

  // Collective. Gradients of the loss for the same rows, given dout = dLoss/do (B, n, H, D) and
  // the inputs and outputs of the matching forward: dq (B, n, H, D), dk, dv (B, n, Hkv, D), each
  // overwritten (never accumulated). With keep_kv, backwards pair with forwards last in, first
  // out (as the layers of a model run them).
  void backward(const float* q, const float* k, const float* v, const float* o, const float* lse,
                const float* dout, float* dq, float* dk, float* dv);
  void backward(const bf16* q, const bf16* k, const bf16* v, const bf16* o, const float* lse,
                const bf16* dout, bf16* dq, bf16* dk, bf16* dv);

  // Collective. The documents of the following forwards and backwards (docs/documents.md): the
  // `count` document lengths of every sequence, in order, positive and summing to seq (count 0:
  // one document); replaces AttnConfig::doc_lengths, so that a trainer can change them every
  // batch without building a new DistAttention (its schedules are rebuilt, no memory or
  // communicator is). With Layout::Strategy the rows of each rank stay where they are; with
  // Layout::Balanced they follow the documents: the rows of the following calls are at
  // local_positions() (the balanced layout of these documents), which the caller asks after each
  // call. It needs no forward awaiting its backward (keep_kv). Every rank passes the same
  // lengths. The lengths are copied.
  void set_documents(const int64_t* lengths, int count);

  // The global token positions of this rank's rows, in local row order, under the documents of
  // the latest set_documents (seqpar::local_positions of the config with those documents).
  std::vector<int64_t> local_positions() const;

  const AttnStats& stats() const;

  // While transfers are pending, the kernels run on sub-blocks of this many query rows and MPI is
  // driven between them (default 256; 0: whole blocks, MPI progresses only in the waits). Local:
  // every rank may choose its own.
  void set_progress_rows(int64_t rows);

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

// The memory a DistAttention of `cfg` holds on `rank` of P ranks, without building it (for memory
// checks before allocating): `scratch`, the bytes of the buffers it allocates when built, and
// `kept_per_forward`, the bytes keep_kv holds per forward awaiting its backward (0 without).
// Documents do not change either. Validates cfg (UsageError).
struct DistAttentionMemory {
  int64_t scratch = 0, kept_per_forward = 0;
};
DistAttentionMemory dist_attention_memory(const AttnConfig& cfg, int P, int rank);

}  // namespace wallfacer::seqpar
