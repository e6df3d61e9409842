#pragma once
// wallfacer bench gemm: its options and output; the benchmark itself is bench/gemm_bench.h (the
// dense products of a Transformer layer, bf16 against fp32, in the same rounds).

#include <CLI/CLI.hpp>

#include "command.h"

namespace wallfacer::cli {

// Adds `gemm` under `bench`; the action runs it (returns 1 when the spot check fails).
Action setup_bench_gemm(CLI::App& bench, CLI::App*& gemm);

}  // namespace wallfacer::cli
