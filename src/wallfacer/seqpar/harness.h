#pragma once
// Checking a distributed attention against a single-process computation of the whole sequence:
// seeded inputs that do not depend on the layout, gathering the ranks' rows back into natural token
// order, and the errors against the reference. Used by `wallfacer attn --check` and the MPI tests.

#include <cstdint>
#include <vector>

#include "wallfacer/comm/communicator.h"
#include "wallfacer/seqpar/config.h"

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

// All-gathers every rank's local rows (B, n, heads, D) into (B, S, heads, D), natural order.
std::vector<float> gather_rows(comm::Communicator& group, const AttnConfig& cfg, const float* local,
                               int heads);
// All-gathers every rank's (B, heads, n) statistics into (B, heads, S), natural order.
std::vector<float> gather_stat(comm::Communicator& group, const AttnConfig& cfg, const float* local,
                               int heads);

// Single-process o, lse, dq, dk, dv of the whole sequence from t's inputs: fp32 flash kernels, or
// the naive fp64 reference (kernels/reference) when `fp64`.
AttnTensors reference_attention(const AttnConfig& cfg, const AttnTensors& inputs, bool fp64);

struct AttnErrors {
  double out = 0, lse = 0, dq = 0, dk = 0, dv = 0;
  bool within(const AttnTolerance& tol) const {
    return out <= tol.out && lse <= tol.lse && dq <= tol.grad && dk <= tol.grad && dv <= tol.grad;
  }
};

// max |x - ref| / max |ref| for each of o, lse, dq, dk, dv.
AttnErrors attention_errors(const AttnTensors& got, const AttnTensors& ref);

}  // namespace wallfacer::seqpar
