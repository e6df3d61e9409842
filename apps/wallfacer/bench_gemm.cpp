#include "bench_gemm.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "wallfacer/core/bf16.h"
#include "wallfacer/core/error.h"
#include "wallfacer/core/memory.h"
#include "wallfacer/core/threads.h"
#include "wallfacer/kernels/attention_bf16.h"
#include "wallfacer/kernels/dense_bf16.h"
#include "wallfacer/kernels/ops.h"

namespace wallfacer::cli {
namespace {

struct GemmBenchOptions {
  int64_t rows = 4096;
  int channels = 256;
  std::vector<int> outs{768, 256, 1024, 50304};
  int iters = 0;  // 0: chosen per shape
  bool json = false;
};

double now_s() {
  using namespace std::chrono;
  return duration<double>(steady_clock::now().time_since_epoch()).count();
}

std::vector<float> random_values(size_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> x(n);
  for (auto& v : x) v = dist(gen);
  return x;
}

// The three products of one dense layer, names as in the output.
constexpr const char* kProducts[3] = {"fwd", "dinp", "dweight"};

struct Shape {
  int64_t N;
  int C, OC;
};

// Inputs in [-1, 1] (weight in [-1/2, 1/2]) and their bf16 roundings, the outputs of both dtypes.
struct Buffers {
  std::vector<float> inp, weight, bias, dout, out, dinp, dweight, dbias;
  std::vector<bf16> inp_h, weight_h, dout_h, out_h, dinp_h;
  explicit Buffers(const Shape& s)
      : inp(random_values(size_t(s.N * s.C), 1)),
        weight(random_values(size_t(s.OC) * s.C, 2)),
        bias(random_values(size_t(s.OC), 3)),
        dout(random_values(size_t(s.N * s.OC), 4)),
        out(size_t(s.N * s.OC)),
        dinp(size_t(s.N * s.C)),
        dweight(size_t(s.OC) * s.C),
        dbias(size_t(s.OC)) {
    for (float& w : weight) w *= 0.5f;
    inp_h = to_bf16(inp);
    weight_h = to_bf16(weight);
    dout_h = to_bf16(dout);
    out_h.resize(out.size());
    dinp_h.resize(dinp.size());
  }

  void run(bool bf16, int product, const Shape& s) {
    using namespace kernels;
    if (product == 0 && bf16)
      matmul_fwd_bf16(out_h.data(), inp_h.data(), weight_h.data(), bias.data(), s.N, s.C, s.OC);
    else if (product == 0)
      matmul_fwd(out.data(), inp.data(), weight.data(), bias.data(), s.N, s.C, s.OC);
    else if (product == 1 && bf16)
      matmul_bwd_bf16(dinp_h.data(), nullptr, nullptr, dout_h.data(), inp_h.data(), weight_h.data(),
                      s.N, s.C, s.OC, false);
    else if (product == 1)
      matmul_bwd(dinp.data(), nullptr, nullptr, dout.data(), inp.data(), weight.data(), s.N, s.C,
                 s.OC, false);
    else if (bf16)
      matmul_bwd_bf16(nullptr, dweight.data(), nullptr, dout_h.data(), inp_h.data(),
                      weight_h.data(), s.N, s.C, s.OC, false);
    else
      matmul_bwd(nullptr, dweight.data(), nullptr, dout.data(), inp.data(), weight.data(), s.N, s.C,
                 s.OC, false);
  }
};

// Largest error of a few rows of each bf16 product against fp64 sums of the same bf16 inputs,
// relative to the largest reference magnitude of those rows: out and dinp (bf16 outputs, bound
// 1.5 u = 5.9e-3, docs/numerics.md) and dweight (fp32 output, bound 2^-16).
struct Check {
  double err_bf16 = 0, err_fp32 = 0;
  bool ok() const { return err_bf16 <= 1.5 / 256 && err_fp32 <= 1.0 / 65536; }
};

double rows_error(const std::vector<double>& got, const std::vector<double>& ref) {
  double max_ref = 0, max_err = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    max_ref = std::max(max_ref, std::fabs(ref[i]));
    max_err = std::max(max_err, std::fabs(got[i] - ref[i]));
  }
  return max_ref > 0 ? max_err / max_ref : max_err;
}

Check spot_check(Buffers& b, const Shape& s) {
  const auto wide = [](bf16 x) { return double(to_float(x)); };
  std::fill(b.dweight.begin(), b.dweight.end(), 0.0f);
  b.run(true, 0, s);
  b.run(true, 1, s);
  b.run(true, 2, s);
  Check c;
  const int64_t picks[3] = {0, s.N / 2, s.N - 1};
  std::vector<double> got, ref;
  for (int64_t n : picks)  // out row n and dinp row n
    for (int o = 0; o < s.OC; ++o) {
      double sum = b.bias[o];
      for (int k = 0; k < s.C; ++k)
        sum += wide(b.inp_h[n * s.C + k]) * wide(b.weight_h[int64_t(o) * s.C + k]);
      got.push_back(wide(b.out_h[n * s.OC + o]));
      ref.push_back(sum);
    }
  c.err_bf16 = rows_error(got, ref);
  got.clear(), ref.clear();
  for (int64_t n : picks)
    for (int k = 0; k < s.C; ++k) {
      double sum = 0;
      for (int o = 0; o < s.OC; ++o)
        sum += wide(b.dout_h[n * s.OC + o]) * wide(b.weight_h[int64_t(o) * s.C + k]);
      got.push_back(wide(b.dinp_h[n * s.C + k]));
      ref.push_back(sum);
    }
  c.err_bf16 = std::max(c.err_bf16, rows_error(got, ref));
  got.clear(), ref.clear();
  for (int64_t o : {int64_t(0), int64_t(s.OC / 2), int64_t(s.OC - 1)})  // dweight rows
    for (int k = 0; k < s.C; ++k) {
      double sum = 0;
      for (int64_t n = 0; n < s.N; ++n)
        sum += wide(b.dout_h[n * s.OC + o]) * wide(b.inp_h[n * s.C + k]);
      got.push_back(b.dweight[o * s.C + k]);
      ref.push_back(sum);
    }
  c.err_fp32 = rows_error(got, ref);
  return c;
}

int run_gemm_bench(const GemmBenchOptions& opt) {
  WF_USAGE_CHECK(opt.rows >= 1 && opt.rows < (int64_t(1) << 31),
                 "--rows must be in [1, 2^31), got {}", opt.rows);
  WF_USAGE_CHECK(opt.channels >= 1, "--channels must be >= 1, got {}", opt.channels);
  for (int oc : opt.outs) WF_USAGE_CHECK(oc >= 1, "--out must be >= 1, got {}", oc);
  WF_USAGE_CHECK(opt.iters >= 0, "--iters must be >= 1, got {}", opt.iters);
  const kernels::Bf16Path path = kernels::bf16_path();
  for (int oc : opt.outs) {
    // fp32 inp, weight, dout, out, dinp, dweight and their bf16 twins.
    const double elems =
        double(opt.rows) * (2.0 * opt.channels + 2.0 * oc) + 2.0 * oc * opt.channels;
    check_memory(6 * elems, fmt::format("the gemm benchmark at --out {}", oc));
  }
  const int threads = num_threads();
  set_blas_threads(threads);
  if (!opt.json) {
    fmt::print(
        "# wallfacer bench gemm: dense products bf16 ({} path{}) vs fp32 (cblas_sgemm, OpenBLAS "
        "core {}), threads {}\n",
        kernels::bf16_path_name(path),
        path == kernels::Bf16Path::avx512 ? fmt::format(", {}", kernels::dense_bf16_backend()) : "",
        blas_core_name(), threads);
    fmt::print(
        "# out (N, OC) = inp (N, C) weight (OC, C)^T + bias; dinp = dout weight; dweight += dout^T "
        "inp; FLOPs 2 N C OC each;\n# rounds of all six interleaved, best round reported; ratio = "
        "bf16 / fp32\n");
    fmt::print("#{:>6} {:>5} {:>6} {:>8} {:>5} {:>10} {:>10} {:>10} {:>10} {:>6}\n", "N", "C", "OC",
               "product", "iters", "fp32_ms", "fp32_GF/s", "bf16_ms", "bf16_GF/s", "ratio");
  }
  bool ok = true;
  for (int oc : opt.outs) {
    const Shape s{opt.rows, opt.channels, oc};
    Buffers b(s);
    const double flops = 2.0 * double(s.N) * s.C * s.OC;
    const int iters = opt.iters > 0 ? opt.iters : std::clamp(int(20e9 / flops), 1, 10);
    double best[2][3];
    std::fill(&best[0][0], &best[0][0] + 6, 1e30);
    for (int p = 0; p < 3; ++p)  // warm-up: creates the bf16 primitives, touches the buffers
      for (int x = 0; x < 2; ++x) b.run(x == 1, p, s);
    for (int it = 0; it < iters; ++it)
      for (int p = 0; p < 3; ++p)
        for (int x = 0; x < 2; ++x) {
          const double t0 = now_s();
          b.run(x == 1, p, s);
          best[x][p] = std::min(best[x][p], now_s() - t0);
        }
    const Check check = spot_check(b, s);
    ok = ok && check.ok();
    for (int p = 0; p < 3; ++p) {
      const double f32 = flops / best[0][p] * 1e-9, h = flops / best[1][p] * 1e-9;
      if (opt.json) {
        nlohmann::json j = {{"rows", s.N},
                            {"channels", s.C},
                            {"out", s.OC},
                            {"product", kProducts[p]},
                            {"threads", threads},
                            {"iters", iters},
                            {"fp32_ms", best[0][p] * 1e3},
                            {"fp32_gflops", f32},
                            {"bf16_ms", best[1][p] * 1e3},
                            {"bf16_gflops", h},
                            {"ratio", h / f32},
                            {"bf16_path", kernels::bf16_path_name(path)},
                            {"check_err_bf16", check.err_bf16},
                            {"check_err_fp32", check.err_fp32}};
        fmt::print("{}\n", j.dump());
      } else {
        fmt::print(
            " {:>6} {:>5} {:>6} {:>8} {:>5} {:>10.2f} {:>10.1f} {:>10.2f} {:>10.1f} {:>6.2f}\n",
            s.N, s.C, s.OC, kProducts[p], iters, best[0][p] * 1e3, f32, best[1][p] * 1e3, h,
            h / f32);
      }
    }
    if (!opt.json)
      fmt::print(
          "# check OC {}: bf16 outputs {:.1e} (bound 5.9e-3), dweight {:.1e} (bound 1.5e-5)\n", oc,
          check.err_bf16, check.err_fp32);
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
