#pragma once
// The fp32 matrix products of the kernels (the attention kernels' tile products, the dense layers'
// products and their widened bf16 twins on the portable path): one entry point, oneDNN's sgemm.
// oneDNN generates its code for the CPU's widest instruction set at run time (AVX2, AVX-512, ...;
// its own ONEDNN_MAX_CPU_ISA caps it, e.g. ONEDNN_MAX_CPU_ISA=AVX2 to time an AVX2 machine on a
// wider one), so the products are fast on every CPU class whatever BLAS library the system has.
//
// Row-major: C (m x n) = alpha op(A) op(B) + beta C, op(X) = X, or X^T when trans_X. A is m x k
// after op (stored k x m when trans_a), B is k x n after op. Called inside an OpenMP parallel
// region it runs on the calling thread; outside, on the OpenMP threads (core/threads.h).
// Every product is summed in fp32, in an order of oneDNN's.

#include <cstdint>

namespace wallfacer::kernels {

void sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
           int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc);

// What computes sgemm, e.g. "oneDNN 2.6.3 avx512_core_amx" (the library and the instruction set its
// code was generated for).
const char* sgemm_backend();

}  // namespace wallfacer::kernels
