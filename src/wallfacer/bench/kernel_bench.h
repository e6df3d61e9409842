#pragma once
// The flash-attention kernel benchmark (`wallfacer bench kernel`): fp32 and bf16 forward/backward
// timed in rounds interleaved with the kernels' sgemm (kernels/sgemm.h) of the same shape, spot-checked against the fp64
// reference; and the kernels (fp32 or bf16) on a packed sequence of documents against the same
// sequence without documents. The caller validates the options and prints.

#include <cstdint>
#include <string>
#include <vector>

#include "wallfacer/core/dtype.h"

namespace wallfacer::bench {

// A case's shape besides its sequence length (query and key length alike).
struct AttnShape {
  int heads = 8;
  int kv_heads = 0;  // 0: same as heads
  int head_dim = 64;
  int batch = 1;
  int kv() const { return kv_heads > 0 ? kv_heads : heads; }
};

// Forward FLOPs of a case: 4 B H S S D, halved when causal (the backward counts 2.5x this).
double attn_fwd_flops(const AttnShape& shape, int seq, bool causal);

// Timed rounds of a case: `iters` when positive, else 1 to 10 by the forward's FLOPs.
int rounds_for(int iters, double fwd_flops);

// Bytes a case of `seq` holds (inputs, outputs, the bf16 copies and workspace), for check_memory.
double case_bytes(const AttnShape& shape, int seq, bool fp32, bool bf16);

struct DtypeResult {
  Dtype dtype = Dtype::fp32;
  double fwd_s = 1e30, bwd_s = 1e30, fwd_gflops = 0, bwd_gflops = 0;
  int64_t workspace_bytes = 0;
  double check_err = 0, check_tol = 0;  // spot check against fp64, and its bound
};

struct CaseResult {
  int seq = 0;
  bool causal = false;
  int iters = 0;
  int sgemm_n = 0;
  double sgemm_gflops = 0;
  int64_t peak_rss_bytes = 0;
  std::vector<DtypeResult> runs;  // in the order of `dtypes`
};

// Times the kernels of each of `dtypes` on one case, in rounds of (sgemm, then
// forward and backward of each dtype) so that all see the same machine load; each rate comes from
// its best round. iters: as rounds_for.
CaseResult run_case(const AttnShape& shape, int seq, bool causal, const std::vector<Dtype>& dtypes,
                    int iters);

// The kernels of `dtype` on documents of `lengths` (summing to seq) against
// the same case without.
struct DocCaseResult {
  Dtype dtype = Dtype::fp32;
  int docs = 0;
  int64_t longest = 0;
  double kept = 0;  // (query, key) pairs kept with documents / without
  int iters = 0;
  double fwd_s = 0, fwd_docs_s = 0, bwd_s = 0, bwd_docs_s = 0;  // best rounds
  double check_err = 0, check_tol = 0;                          // of the run with documents
};
DocCaseResult run_doc_case(const AttnShape& shape, int seq, bool causal,
                           const std::vector<int64_t>& lengths, Dtype dtype, int iters);

}  // namespace wallfacer::bench
