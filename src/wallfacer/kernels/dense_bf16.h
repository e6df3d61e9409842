#pragma once
// bf16 dense layers (the matrix products of QKV, projection, MLP and LM head) with fp32
// accumulation, and the element-wise bf16 ops around them. Same conventions as kernels/ops.h
// (N token rows, C in, OC out, weight (OC, C)); activations and weights are bf16, every sum is
// fp32, and an output is rounded to bf16 once, at the end. The caller keeps fp32 master weights
// and passes a bf16 copy (fp32_to_bf16); weight and bias gradients accumulate in fp32.
//
// Two code paths, chosen at each call like the bf16 attention (kernels/attention_bf16.h,
// bf16_path()): WALLFACER_BF16_PATH unset or auto takes the oneDNN path where the CPU has AMX or
// AVX512-BF16, `portable` forces the portable path, `avx512` or `amx` requires the other.
//   avx512, amx  oneDNN's matmul primitive (bf16 inputs, fp32 accumulation; oneDNN picks its AMX
//             or AVX512-BF16 kernels by the CPU), one primitive per shape, created at its first
//             use and kept;
//   portable  the bf16 inputs widened to fp32 (exactly) in blocks of rows, then the fp32 kernels
//             of kernels/ops.h (kernels/sgemm.h).
// Both compute every product exactly and sum in fp32, in orders of their own: results agree to
// the tolerances of docs/numerics.md, not bit for bit.

#include <cstdint>

#include "wallfacer/core/bf16.h"

namespace wallfacer::kernels {

// out (N, OC) = bf16(inp (N, C) @ weight (OC, C)^T [+ bias (OC)])   (bias fp32, may be null)
void matmul_fwd_bf16(bf16* out, const bf16* inp, const bf16* weight, const float* bias, int64_t N,
                     int C, int OC);

// dinp (N, C) = bf16(dout (N, OC) @ weight (OC, C) [+ dinp when accumulate_dinp]) (skipped when
// dinp is null); dweight (OC, C) += dout^T @ inp and dbias (OC) += column sums of dout (if set),
// both fp32.
void matmul_bwd_bf16(bf16* dinp, float* dweight, float* dbias, const bf16* dout, const bf16* inp,
                     const bf16* weight, int64_t N, int C, int OC, bool accumulate_dinp);

// out = bf16(gelu(inp)) and dinp = bf16(dout * gelu'(inp)) over n elements: the tanh GELU of
// kernels/ops.h computed in fp32 on the widened inputs, rounded once (dinp may alias dout).
void gelu_fwd_bf16(bf16* out, const bf16* inp, int64_t n);
void gelu_bwd_bf16(bf16* dinp, const bf16* inp, const bf16* dout, int64_t n);

// The library behind the avx512 path of the dense products, e.g. "oneDNN 2.6.3".
const char* dense_bf16_backend();

}  // namespace wallfacer::kernels
