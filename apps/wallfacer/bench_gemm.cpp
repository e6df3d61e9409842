#include "bench_gemm.h"

#include <fmt/format.h>

#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <vector>

#include "wallfacer/bench/gemm_bench.h"
#include "wallfacer/core/error.h"
#include "wallfacer/core/memory.h"
#include "wallfacer/core/threads.h"
#include "wallfacer/kernels/attention_bf16.h"
#include "wallfacer/kernels/dense_bf16.h"
#include "wallfacer/kernels/sgemm.h"

namespace wallfacer::cli {
namespace {

struct GemmBenchOptions {
  int64_t rows = 4096;
  int channels = 256;
  std::vector<int> outs{768, 256, 1024, 50304};
  int iters = 0;  // 0: chosen per shape
  bool json = false;
};

int run_gemm_bench(const GemmBenchOptions& opt) {
  WF_USAGE_CHECK(opt.rows >= 1 && opt.rows < (int64_t(1) << 31),
                 "--rows must be in [1, 2^31), got {}", opt.rows);
  WF_USAGE_CHECK(opt.channels >= 1, "--channels must be >= 1, got {}", opt.channels);
  for (int oc : opt.outs) WF_USAGE_CHECK(oc >= 1, "--out must be >= 1, got {}", oc);
  WF_USAGE_CHECK(opt.iters >= 0, "--iters must be >= 1, got {}", opt.iters);
  const kernels::Bf16Path path = kernels::bf16_path();
  for (int oc : opt.outs)
    check_memory(bench::gemm_case_bytes({opt.rows, opt.channels, oc}),
                 fmt::format("the gemm benchmark at --out {}", oc));
  const int threads = num_threads();
  if (!opt.json) {
    fmt::print(
        "# wallfacer bench gemm: dense products bf16 ({} path{}) vs fp32 (sgemm: {}), "
        "threads {}\n",
        kernels::bf16_path_name(path),
        path != kernels::Bf16Path::portable ? fmt::format(", {}", kernels::dense_bf16_backend())
                                            : "",
        kernels::sgemm_backend(), threads);
    fmt::print(
        "# out (N, OC) = inp (N, C) weight (OC, C)^T + bias; dinp = dout weight; dweight += dout^T "
        "inp; FLOPs 2 N C OC each;\n# rounds of all six interleaved, best round reported; ratio = "
        "bf16 / fp32\n");
    fmt::print("#{:>6} {:>5} {:>6} {:>8} {:>5} {:>10} {:>10} {:>10} {:>10} {:>6}\n", "N", "C", "OC",
               "product", "iters", "fp32_ms", "fp32_GF/s", "bf16_ms", "bf16_GF/s", "ratio");
  }
  bool ok = true;
  for (int oc : opt.outs) {
    const bench::GemmShape s{opt.rows, opt.channels, oc};
    const bench::GemmResult r = bench::run_gemm_case(s, opt.iters);
    const double flops = s.flops();
    ok = ok && r.ok();
    for (int p = 0; p < 3; ++p) {
      const double f32 = flops / r.fp32_s[p] * 1e-9, h = flops / r.bf16_s[p] * 1e-9;
      if (opt.json) {
        nlohmann::json j = {{"rows", s.N},
                            {"channels", s.C},
                            {"out", s.OC},
                            {"product", bench::kGemmProducts[p]},
                            {"threads", threads},
                            {"iters", r.iters},
                            {"fp32_ms", r.fp32_s[p] * 1e3},
                            {"fp32_gflops", f32},
                            {"bf16_ms", r.bf16_s[p] * 1e3},
                            {"bf16_gflops", h},
                            {"ratio", h / f32},
                            {"bf16_path", kernels::bf16_path_name(path)},
                            {"check_err_bf16", r.err_bf16},
                            {"check_err_fp32", r.err_fp32}};
        fmt::print("{}\n", j.dump());
      } else {
        fmt::print(
            " {:>6} {:>5} {:>6} {:>8} {:>5} {:>10.2f} {:>10.1f} {:>10.2f} {:>10.1f} {:>6.2f}\n",
            s.N, s.C, s.OC, bench::kGemmProducts[p], r.iters, r.fp32_s[p] * 1e3, f32,
            r.bf16_s[p] * 1e3, h, h / f32);
      }
    }
    if (!opt.json)
      fmt::print(
          "# check OC {}: bf16 outputs {:.1e} (bound 5.9e-3), dweight {:.1e} (bound 1.5e-5)\n", oc,
          r.err_bf16, r.err_fp32);
    std::fflush(stdout);
  }
  if (!opt.json)
    fmt::print("# check: spot rows vs fp64 sums of the bf16 inputs {}\n", ok ? "ok" : "FAILED");
  return ok ? 0 : 1;
}

}  // namespace

Action setup_bench_gemm(CLI::App& bench, CLI::App*& gemm) {
  auto opt = std::make_shared<GemmBenchOptions>();
  gemm = bench.add_subcommand(
      "gemm", "Dense-layer products GFLOP/s: bf16 (fp32 accumulation) against fp32 sgemm");
  gemm->add_option("--rows", opt->rows, "Token rows N")->capture_default_str();
  gemm->add_option("--channels", opt->channels, "Input channels C")->capture_default_str();
  gemm->add_option("--out", opt->outs, "Output channels OC (one shape each)")
      ->expected(1, 64)
      ->capture_default_str();
  gemm->add_option("--iters", opt->iters,
                   "Timed rounds per shape, best round reported (default: 1 to 10 by FLOPs)");
  gemm->add_flag("--json", opt->json, "One JSON object per shape, product and line");
  return [opt]() { return run_gemm_bench(*opt); };
}

}  // namespace wallfacer::cli
