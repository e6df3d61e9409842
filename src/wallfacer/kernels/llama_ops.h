#pragma once
// The kernels of the Llama family's blocks beside those of kernels/ops.h: RMSNorm, the SwiGLU
// activation and the rotary frequencies with long-context scaling. Same conventions as
// kernels/ops.h (N token rows, C channels; backward kernels ADD into parameter gradients).
// kernels/reference/ops_ref.h holds their fp64 twins.

#include <cstdint>
#include <string_view>
#include <vector>

#include "wallfacer/core/bf16.h"

namespace wallfacer::kernels {

// out (N, C) = inp * rstd * weight with rstd = 1 / sqrt(mean(inp^2) + eps) per row, computed in
// fp32 (as transformers' LlamaRMSNorm); rstd (N) saved for the backward.
void rmsnorm_fwd(float* out, float* rstd, const float* inp, const float* weight, int64_t N, int C,
                 float eps);
// dinp (N, C) += d/dinp (rstd g - inp rstd^3 mean(g inp), g = dout weight); dweight (C) +=
// sum over rows of dout inp rstd.
void rmsnorm_bwd(float* dinp, float* dweight, const float* dout, const float* inp,
                 const float* weight, const float* rstd, int64_t N, int C);

// SwiGLU: inp (N, 2I) holds each row's gate in columns [0, I) and its up projection in [I, 2I);
// out (N, I) = silu(gate) * up, silu(x) = x / (1 + exp(-x)).
void swiglu_fwd(float* out, const float* inp, int64_t N, int I);
// dinp (N, 2I) = the gradients of gate and up for dout (N, I) (overwrites).
void swiglu_bwd(float* dinp, const float* inp, const float* dout, int64_t N, int I);
// The bf16 twins: bf16 in and out, the same fp32 arithmetic, each output rounded once.
void swiglu_fwd_bf16(bf16* out, const bf16* inp, int64_t N, int I);
void swiglu_bwd_bf16(bf16* dinp, const bf16* inp, const bf16* dout, int64_t N, int I);

// model.rope_scaling: how the rotary frequencies of a model trained at a shorter context are
// stretched (transformers' rope_scaling of the same names).
//   none    inv_freq[i] = theta^(-2i/D)
//   linear  inv_freq[i] / factor (every position divided by factor)
//   llama3  wavelengths 2 pi / inv_freq longer than original / low_freq_factor divided by factor,
//           shorter than original / high_freq_factor kept, those between smoothed:
//           (1 - s) inv_freq / factor + s inv_freq, s = (original / wavelength - low) / (high -
//           low)
enum class RopeScalingType { None, Linear, Llama3 };
struct RopeScaling {
  RopeScalingType type = RopeScalingType::None;
  double factor = 1.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int64_t original_max_position_embeddings = 8192;
};
// "none" | "linear" | "llama3": the type of that name, any other a UsageError naming it.
RopeScalingType parse_rope_scaling_type(std::string_view name);
std::string_view rope_scaling_type_name(RopeScalingType t);

// The D / 2 inverse frequencies of a head of D channels (fp64).
std::vector<double> rope_inv_freq(int D, double theta, const RopeScaling& scaling);
// cos, sin (T, D/2) of the angles pos[t] * inv_freq[i], computed in fp64 (kernels::rope_tables
// with the frequencies given).
void rope_tables_freq(const int64_t* pos, int T, int D, const double* inv_freq, float* cos,
                      float* sin);

}  // namespace wallfacer::kernels
