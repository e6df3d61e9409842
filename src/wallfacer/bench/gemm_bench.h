#pragma once
// The dense-product benchmark (`wallfacer bench gemm`): the three products of a Transformer layer
// in bf16 (kernels/dense_bf16.h) against fp32 (kernels/ops.h, kernels/sgemm.h), timed in the same
// rounds and spot-checked against fp64 sums of the bf16 inputs. The caller validates and prints.

#include <cstdint>

namespace wallfacer::bench {

// out (N, OC) = inp (N, C) weight (OC, C)^T + bias.
struct GemmShape {
  int64_t N = 0;
  int C = 0, OC = 0;
  double flops() const { return 2.0 * double(N) * C * OC; }  // of each product
};

// The products, names as in the output: out, dinp = dout weight, dweight += dout^T inp.
inline constexpr const char* kGemmProducts[3] = {"fwd", "dinp", "dweight"};

// Bytes the benchmark holds for a shape (fp32 buffers and their bf16 twins), for check_memory.
double gemm_case_bytes(const GemmShape& s);

struct GemmResult {
  int iters = 0;
  double fp32_s[3] = {1e30, 1e30, 1e30}, bf16_s[3] = {1e30, 1e30, 1e30};  // best round, product
  // Largest error of a few rows of each bf16 product against fp64 sums of the same bf16 inputs,
  // relative to the largest reference magnitude of those rows: out and dinp (bf16 outputs, bound
  // 1.5 u = 5.9e-3, docs/numerics.md) and dweight (fp32 output, bound 2^-16).
  double err_bf16 = 0, err_fp32 = 0;
  bool ok() const { return err_bf16 <= 1.5 / 256 && err_fp32 <= 1.0 / 65536; }
};

// Times the six products in interleaved rounds (`iters` when positive, else 1 to 10 by FLOPs)
// after a warm-up, then spot-checks the bf16 ones.
GemmResult run_gemm_case(const GemmShape& s, int iters);

}  // namespace wallfacer::bench
