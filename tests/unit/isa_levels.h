#pragma once
// The kernels of each instruction-set level (kernels/isa.h), callable directly: the tests run
// every level this CPU supports in one process (the dispatcher runs one level per process).

#include <string>
#include <vector>

#include "wallfacer/kernels/attention.h"
#include "wallfacer/kernels/attention_bf16.h"
#include "wallfacer/kernels/isa.h"
#include "wallfacer/kernels/ops.h"

namespace wallfacer::kernels {

WALLFACER_ISA_DECLARE(attn_fwd)
WALLFACER_ISA_DECLARE(attn_bwd_preprocess)
WALLFACER_ISA_DECLARE(attn_bwd)
WALLFACER_ISA_DECLARE(attn_fwd_bf16)
WALLFACER_ISA_DECLARE(attn_bwd_preprocess_bf16)
WALLFACER_ISA_DECLARE(attn_bwd_bf16)
WALLFACER_ISA_DECLARE(layernorm_fwd)
WALLFACER_ISA_DECLARE(layernorm_bwd)
WALLFACER_ISA_DECLARE(gelu_fwd)
WALLFACER_ISA_DECLARE(gelu_bwd)
WALLFACER_ISA_DECLARE(adamw)
WALLFACER_ISA_DECLARE(widen_bf16)
WALLFACER_ISA_DECLARE(round_bf16)

struct LevelKernels {
  isa::Level level;
  decltype(&kernels::attn_fwd) attn_fwd;
  decltype(&kernels::attn_bwd_preprocess) attn_bwd_preprocess;
  decltype(&kernels::attn_bwd) attn_bwd;
  decltype(&kernels::attn_fwd_bf16) attn_fwd_bf16;
  decltype(&kernels::attn_bwd_preprocess_bf16) attn_bwd_preprocess_bf16;
  decltype(&kernels::attn_bwd_bf16) attn_bwd_bf16;
  decltype(&kernels::layernorm_fwd) layernorm_fwd;
  decltype(&kernels::layernorm_bwd) layernorm_bwd;
  decltype(&kernels::gelu_fwd) gelu_fwd;
  decltype(&kernels::gelu_bwd) gelu_bwd;
  decltype(&kernels::adamw) adamw;
  decltype(&kernels::widen_bf16) widen_bf16;
  decltype(&kernels::round_bf16) round_bf16;
  std::string name() const { return std::string(isa::name(level)); }
};

// The levels this CPU runs, narrowest first.
inline std::vector<LevelKernels> levels_this_cpu_runs() {
#define WALLFACER_LEVEL_KERNELS(ns, level)                                                         \
  LevelKernels {                                                                                   \
    level, &ns::attn_fwd, &ns::attn_bwd_preprocess, &ns::attn_bwd, &ns::attn_fwd_bf16,             \
        &ns::attn_bwd_preprocess_bf16, &ns::attn_bwd_bf16, &ns::layernorm_fwd, &ns::layernorm_bwd, \
        &ns::gelu_fwd, &ns::gelu_bwd, &ns::adamw, &ns::widen_bf16, &ns::round_bf16                \
  }
  const std::vector<LevelKernels> all = {WALLFACER_LEVEL_KERNELS(baseline, isa::Level::Baseline),
                                         WALLFACER_LEVEL_KERNELS(avx2, isa::Level::Avx2),
                                         WALLFACER_LEVEL_KERNELS(avx512, isa::Level::Avx512)};
#undef WALLFACER_LEVEL_KERNELS
  std::vector<LevelKernels> here;
  for (const auto& k : all)
    if (k.level <= isa::widest_supported()) here.push_back(k);
  return here;
}

}  // namespace wallfacer::kernels
