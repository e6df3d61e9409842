#pragma once
// wallfacer bench gemm: the dense products of a Transformer layer, bf16 (kernels/dense_bf16.h)
// against fp32 (kernels/ops.h, cblas_sgemm), in the same rounds.

#include <CLI/CLI.hpp>

#include "command.h"

namespace wallfacer::cli {

// Adds `gemm` under `bench`; the action runs it (returns 1 when the spot check fails).
Action setup_bench_gemm(CLI::App& bench, CLI::App*& gemm);

}  // namespace wallfacer::cli
