#include "wallfacer/model/parts.h"

#include <algorithm>

#include "wallfacer/core/error.h"
#include "wallfacer/kernels/dense_bf16.h"
#include "wallfacer/kernels/llama_ops.h"
#include "wallfacer/kernels/ops.h"

namespace wallfacer::model {

namespace {
// Conversions in blocks over the threads, each block by the kernels' instruction-set level.
constexpr int64_t kConvertBlock = int64_t(1) << 14;
}  // namespace

void round_to_bf16(const float* in, bf16* out, int64_t n) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; i += kConvertBlock)
    kernels::round_bf16(in + i, out + i, std::min(kConvertBlock, n - i));
}

void widen_to_fp32(const bf16* in, float* out, int64_t n) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; i += kConvertBlock)
    kernels::widen_bf16(in + i, out + i, std::min(kConvertBlock, n - i));
}

void check_element_types(bool first, std::initializer_list<bool> bf) {
  for (const bool b : bf)
    WF_CHECK(b == first, "tensors of one call in {} and {}: pass every one in the model's dtype",
             first ? "bf16" : "fp32", b ? "bf16" : "fp32");
}

Act in_dtype(bool bf, float* x, bf16* scratch16, int64_t n) {
  if (!bf) return {x, nullptr};
  round_to_bf16(x, scratch16, n);
  return {nullptr, scratch16};
}

const float* as_fp32(const Act& t, float* scratch, int64_t n) {
  if (t.f32) return t.f32;
  widen_to_fp32(t.b16, scratch, n);
  return scratch;
}

void dense_fwd(const Act& out, const Act& in, const float* w, const bf16* w16, const float* bias,
               int64_t N, int C, int OC) {
  if (out.b16) {
    kernels::matmul_fwd_bf16(out.b16, in.b16, w16, bias, N, C, OC);
  } else {
    kernels::matmul_fwd(out.f32, in.f32, w, bias, N, C, OC);
  }
}

void dense_bwd(const Act& din, float* dw, float* dbias, const Act& dout, const Act& in,
               const float* w, const bf16* w16, int64_t N, int C, int OC) {
  if (din.b16) {
    kernels::matmul_bwd_bf16(din.b16, dw, dbias, dout.b16, in.b16, w16, N, C, OC, false);
  } else {
    kernels::matmul_bwd(din.f32, dw, dbias, dout.f32, in.f32, w, N, C, OC, false);
  }
}

void gelu_fwd(const Act& out, const Act& in, int64_t n) {
  if (out.b16) {
    kernels::gelu_fwd_bf16(out.b16, in.b16, n);
  } else {
    kernels::gelu_fwd(out.f32, in.f32, n);
  }
}

void gelu_bwd(const Act& din, const Act& in, const Act& dout, int64_t n) {
  if (din.b16) {
    kernels::gelu_bwd_bf16(din.b16, in.b16, dout.b16, n);
  } else {
    kernels::gelu_bwd(din.f32, in.f32, dout.f32, n);
  }
}

void swiglu_fwd(const Act& out, const Act& in, int64_t N, int I) {
  if (out.b16) {
    kernels::swiglu_fwd_bf16(out.b16, in.b16, N, I);
  } else {
    kernels::swiglu_fwd(out.f32, in.f32, N, I);
  }
}

void swiglu_bwd(const Act& din, const Act& in, const Act& dout, int64_t N, int I) {
  if (din.b16) {
    kernels::swiglu_bwd_bf16(din.b16, in.b16, dout.b16, N, I);
  } else {
    kernels::swiglu_bwd(din.f32, in.f32, dout.f32, N, I);
  }
}

void AttentionOp::set_documents(const std::vector<std::vector<int64_t>>& lengths) {
  for (const auto& l : lengths) {
    WF_USAGE_CHECK(l.size() <= 1,
                   "this attention masks no documents ({} in a sequence): use train.packing = "
                   "'none'",
                   l.size());
  }
}

std::vector<int64_t> AttentionOp::row_positions(int) const { return {}; }

void AttentionOp::set_window(int64_t window) {
  WF_USAGE_CHECK(window == 0, "this attention takes no sliding window (asked for {})", window);
}

}  // namespace wallfacer::model
