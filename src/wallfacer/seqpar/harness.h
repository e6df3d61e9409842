#pragma once
// Checking a distributed attention against a single-process computation of the whole sequence:
// seeded inputs that do not depend on the layout, gathering the ranks' rows back into natural token
// order, and the errors against the reference. Used by `wallfacer attn --check` and the MPI tests.

#include <cstdint>
#include <vector>

#include "wallfacer/comm/communicator.h"
#include "wallfacer/seqpar/attention.h"
#include "wallfacer/seqpar/config.h"
#include "wallfacer/seqpar/schedule.h"

namespace wallfacer::seqpar {

// Tolerances of docs/numerics.md for fp32 attention, relative to the largest reference magnitude.
struct AttnTolerance {
  double out = 32 * 1.1920929e-7;
  double lse = 8 * 1.1920929e-7;
  double grad = 32 * 1.1920929e-7;
};

// The tolerances of a distributed attention in `dtype` against the fp64 reference of its inputs:
// fp32 as above; bf16 those of the bf16 kernels' bf16 outputs (u = 2^-8): o, dq, dk, dv 3u, lse
// u/2 (docs/numerics.md, "Distributed attention in bf16").
AttnTolerance attn_tolerance(Dtype dtype);

// Input tensors, numbered for the generator.
enum class InputTensor : int { Q = 1, K = 2, V = 3, Dout = 4 };

// out (B, positions.size(), heads, D): uniform values in [-1, 1) that depend only on (seed,
// tensor, batch, global position, head, d), so every layout sees the same global tensor.
void fill_inputs(uint64_t seed, InputTensor tensor, const std::vector<int64_t>& positions,
                 int batch, int heads, int head_dim, float* out);

// Whole-sequence tensors in natural token order.
struct AttnTensors {
  std::vector<float> q, k, v, dout;  // inputs (B, S, H or Hkv, D)
  std::vector<float> o, lse;         // (B, S, H, D), (B, H, S)
  std::vector<float> dq, dk, dv;     // like q, k, v
};

// The seeded inputs of the whole sequence (q, k, v, dout), rounded to bf16 when cfg.dtype is bf16
// (the values a bf16 run holds, exactly: the reference then sees the same inputs).
AttnTensors make_inputs(const AttnConfig& cfg, uint64_t seed);

// Rank `rank`'s rows (B, n, heads, D), in its local_positions order, of a whole-sequence tensor
// (B, S, heads, D) in natural order.
std::vector<float> local_rows(const std::vector<float>& full, const AttnConfig& cfg, int P,
                              int rank, int heads);

// All-gathers every rank's local rows (B, n, heads, D) into (B, S, heads, D), natural order.
std::vector<float> gather_rows(comm::Communicator& group, const AttnConfig& cfg, const float* local,
                               int heads);
// All-gathers every rank's (B, heads, n) statistics into (B, heads, S), natural order.
std::vector<float> gather_stat(comm::Communicator& group, const AttnConfig& cfg, const float* local,
                               int heads);

// Single-process o, lse, dq, dk, dv of the whole sequence from t's inputs, with cfg's documents:
// fp32 flash kernels, or the naive fp64 reference (kernels/reference) when `fp64`.
AttnTensors reference_attention(const AttnConfig& cfg, const AttnTensors& inputs, bool fp64);

struct AttnErrors {
  double out = 0, lse = 0, dq = 0, dk = 0, dv = 0;
  bool within(const AttnTolerance& tol) const {
    return out <= tol.out && lse <= tol.lse && dq <= tol.grad && dk <= tol.grad && dv <= tol.grad;
  }
};

// max |x - ref| / max |ref| for each of o, lse, dq, dk, dv.
AttnErrors attention_errors(const AttnTensors& got, const AttnTensors& ref);

// All-gathers the outputs of every rank (o, lse, dq, dk, dv of its rows) in natural order.
AttnTensors gather_outputs(comm::Communicator& group, const AttnConfig& cfg, const float* o,
                           const float* lse, const float* dq, const float* dk, const float* dv);

// The schedules of all P ranks summed without running them (no MPI): per field the largest
// rank's bytes and steps, and the work imbalance, max / mean over ranks of the forward FLOPs (the
// kept pairs: with documents, the document-masked work).
struct ScheduleSummary {
  ScheduleTotals worst;
  std::vector<double> flops_fwd;  // per rank
  double work_imbalance = 1.0;
};
ScheduleSummary summarize_schedules(const AttnConfig& cfg, int P);

// Ops of one rank's schedules (both of a hybrid) per forward and backward.
int64_t schedule_ops(const AttnConfig& cfg, int P, int rank);

// Several iterations of a DistAttention summed over the group (collective): bytes and steps of
// the latest iteration, the largest over ranks; times, the median over iterations on each rank,
// then the slowest rank; the work imbalance and total FLOPs of the forward.
struct RunSummary {
  int64_t p2p_bytes_fwd = 0, p2p_bytes_bwd = 0, coll_bytes_fwd = 0, coll_bytes_bwd = 0;
  int64_t coll_formula_bytes_fwd = 0, coll_formula_bytes_bwd = 0;
  int64_t p2p_steps_fwd = 0, p2p_steps_bwd = 0;
  double fwd_ms = 0, bwd_ms = 0, exposed_fwd_ms = 0, exposed_bwd_ms = 0;
  // The slowest rank's forward + backward (median over the iterations): the iteration's time.
  // fwd_ms + bwd_ms can exceed it: no barrier separates the phases, so a rank whose forward ends
  // early starts its backward early and waits there for the others (a causal contiguous ring).
  double iteration_ms = 0;
  double work_imbalance = 1.0, flops_fwd = 0;
};
RunSummary summarize_run(comm::Communicator& group, const std::vector<AttnStats>& iterations);

// max / mean of per-rank work (1.0 when it is all zero).
double work_imbalance(const std::vector<double>& work);

}  // namespace wallfacer::seqpar
