// wallfacer bench kernel: flash-attention forward/backward GFLOP/s against OpenBLAS sgemm measured
// in the same run, one row per case (nccl-tests style), or one JSON object per case.

#include <cblas.h>
#include <fmt/format.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <vector>

#include "command.h"
#include "wallfacer/core/error.h"
#include "wallfacer/core/memory.h"
#include "wallfacer/core/threads.h"
#include "wallfacer/kernels/attention.h"
#include "wallfacer/kernels/isa.h"
#include "wallfacer/kernels/reference/attention_ref.h"

namespace wallfacer::cli {
namespace {

struct KernelBenchOptions {
  std::vector<int> seqs{1024, 4096, 16384};
  int heads = 8;
  int kv_heads = 0;  // 0: same as heads
  int head_dim = 64;
  int batch = 1;
  bool causal_only = false;
  bool full_only = false;
  bool json = false;
  int iters = 0;  // 0: chosen per case
};

struct CaseResult {
  int seq = 0;
  bool causal = false;
  int iters = 0;
  double fwd_s = 0, bwd_s = 0, fwd_gflops = 0, bwd_gflops = 0;
  int sgemm_n = 0;
  double sgemm_gflops = 0;
  int64_t workspace_bytes = 0, peak_rss_bytes = 0;
  double check_err = 0;
};

double now_s() {
  using namespace std::chrono;
  return duration<double>(steady_clock::now().time_since_epoch()).count();
}

int64_t peak_rss_bytes() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return int64_t(ru.ru_maxrss) * 1024;
}

void fill_random(std::vector<float>& x, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (auto& v : x) v = dist(gen);
}

// C = A B with A (n x d), B (d x n), all threads given to OpenBLAS. n is capped so that C stays at
// most 64 MiB; the FLOP rate of this shape no longer changes at that size.
class SgemmProbe {
 public:
  SgemmProbe(int n, int d)
      : n_(std::min(n, 4096)), d_(d), a_(size_t(n_) * d), b_(size_t(d) * n_), c_(size_t(n_) * n_) {
    fill_random(a_, 1);
    fill_random(b_, 2);
    run();  // warm-up
  }
  int n() const { return n_; }
  double flops() const { return 2.0 * n_ * n_ * d_; }
  // Seconds per product, averaged over `reps` back-to-back products.
  double seconds(int reps) {
    const double t0 = now_s();
    for (int r = 0; r < reps; ++r) run();
    return (now_s() - t0) / reps;
  }

 private:
  void run() {
    set_blas_threads(num_threads());
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n_, n_, d_, 1.0f, a_.data(), d_,
                b_.data(), n_, 0.0f, c_.data(), n_);
  }
  int n_, d_;
  std::vector<float> a_, b_, c_;
};

CaseResult run_case(const KernelBenchOptions& opt, int seq, bool causal) {
  using namespace kernels;
  CaseResult r;
  r.seq = seq;
  r.causal = causal;
  const int hkv = opt.kv_heads > 0 ? opt.kv_heads : opt.heads;
  const AttnDims d{opt.batch, seq, seq, opt.heads, hkv, opt.head_dim};
  const Strides3 qs = Strides3::contiguous(seq, opt.heads, opt.head_dim);
  const Strides3 ks = Strides3::contiguous(seq, hkv, opt.head_dim);
  const Strides2 ls = Strides2::contiguous(opt.heads, seq);
  const size_t nq = size_t(opt.batch) * seq * opt.heads * opt.head_dim;
  const size_t nk = size_t(opt.batch) * seq * hkv * opt.head_dim;
  std::vector<float> q(nq), k(nk), v(nk), o(nq), dout(nq), dq(nq), dk(nk), dv(nk);
  std::vector<float> lse(size_t(opt.batch) * opt.heads * seq), delta(lse.size());
  fill_random(q, 11);
  fill_random(k, 12);
  fill_random(v, 13);
  fill_random(dout, 14);

  const float scale = 1.0f / std::sqrt(float(opt.head_dim));
  AttnFwdParams fp;
  fp.dims = d;
  fp.q = q.data(), fp.q_stride = qs;
  fp.k = k.data(), fp.k_stride = ks;
  fp.v = v.data(), fp.v_stride = ks;
  fp.o = o.data(), fp.o_stride = qs;
  fp.lse = lse.data(), fp.lse_stride = ls;
  fp.scale = scale;
  fp.causal = causal;
  AttnBwdParams bp;
  bp.dims = d;
  bp.q = q.data(), bp.q_stride = qs;
  bp.k = k.data(), bp.k_stride = ks;
  bp.v = v.data(), bp.v_stride = ks;
  bp.dout = dout.data(), bp.dout_stride = qs;
  bp.lse = lse.data(), bp.lse_stride = ls;
  bp.delta = delta.data(), bp.delta_stride = ls;
  bp.dq = dq.data(), bp.dq_stride = qs;
  bp.dk = dk.data(), bp.dk_stride = ks;
  bp.dv = dv.data(), bp.dv_stride = ks;
  bp.scale = scale;
  bp.causal = causal;

  const double fwd_flops =
      4.0 * opt.batch * opt.heads * double(seq) * seq * opt.head_dim * (causal ? 0.5 : 1.0);
  const double bwd_flops = 2.5 * fwd_flops;
  r.iters = opt.iters > 0 ? opt.iters : std::clamp(int(std::lround(1e11 / fwd_flops)), 1, 10);
  if (fwd_flops < 5e10) attn_fwd(fp);  // warm-up when it is cheap

  // Rounds of (sgemm, forward, backward), interleaved so that all three see the same machine
  // load; each rate comes from its best round.
  SgemmProbe gemm(seq, opt.head_dim);
  // As many products per round as make up the forward's FLOPs (up to 30 GFLOP), so that both are
  // timed over similar stretches of time.
  const int gemm_reps =
      std::clamp(int(std::ceil(std::min(fwd_flops, 3e10) / gemm.flops())), 1, 1000);
  double gemm_s = 1e30;
  r.fwd_s = r.bwd_s = 1e30;
  for (int it = 0; it < r.iters; ++it) {
    gemm_s = std::min(gemm_s, gemm.seconds(gemm_reps));
    double t0 = now_s();
    attn_fwd(fp);
    r.fwd_s = std::min(r.fwd_s, now_s() - t0);
    t0 = now_s();
    attn_bwd_preprocess(d, o.data(), qs, dout.data(), qs, delta.data(), ls);
    attn_bwd(bp);
    r.bwd_s = std::min(r.bwd_s, now_s() - t0);
  }
  r.sgemm_n = gemm.n();
  r.sgemm_gflops = gemm.flops() / gemm_s / 1e9;
  r.fwd_gflops = fwd_flops / r.fwd_s / 1e9;
  r.bwd_gflops = bwd_flops / r.bwd_s / 1e9;
  const int threads = num_threads();
  r.workspace_bytes =
      std::max(attn_fwd_workspace_bytes(d, threads), attn_bwd_workspace_bytes(d, threads));

  // Spot check: a few query rows of the first and last head against the fp64 reference.
  const reference::AttnRefProblem pr{d, double(scale), causal, 0, 0};
  std::vector<double> ref_row(opt.head_dim);
  double max_ref = 0, max_err = 0;
  for (int h : {0, opt.heads - 1})
    for (int i : {0, seq / 3, seq - 1}) {
      const double l = reference::attn_fwd_ref_row(pr, q.data(), k.data(), v.data(), opt.batch - 1,
                                                   h, i, ref_row.data());
      const size_t row = ((size_t(opt.batch - 1) * seq + i) * opt.heads + h) * opt.head_dim;
      for (int c = 0; c < opt.head_dim; ++c) {
        max_ref = std::max(max_ref, std::fabs(ref_row[c]));
        max_err = std::max(max_err, std::fabs(double(o[row + c]) - ref_row[c]));
      }
      const double lk = lse[(size_t(opt.batch - 1) * opt.heads + h) * seq + i];
      max_err = std::max(max_err, std::fabs(lk - l) / std::max(1.0, std::fabs(l)) * max_ref);
    }
  r.check_err = max_ref > 0 ? max_err / max_ref : max_err;

  r.peak_rss_bytes = peak_rss_bytes();
  return r;
}

// Relative error bound of the spot check (docs/numerics.md): 32 fp32 epsilons for O up to 1000
// keys, growing like sqrt(keys) beyond (full attention averages O down like 1 / sqrt(keys) while
// its absolute error does not shrink).
double check_tolerance(int seq_k) {
  return 32 * 1.1920928955078125e-7 * std::sqrt(std::max(1.0, seq_k / 1000.0));
}

int run_kernel_bench(const KernelBenchOptions& opt) {
  for (int s : opt.seqs) WF_USAGE_CHECK(s >= 1, "--seq must be >= 1, got {}", s);
  WF_USAGE_CHECK(opt.heads >= 1, "--heads must be >= 1, got {}", opt.heads);
  WF_USAGE_CHECK(opt.kv_heads >= 0, "--kv-heads must be >= 1, got {}", opt.kv_heads);
  WF_USAGE_CHECK(opt.kv_heads == 0 || opt.heads % opt.kv_heads == 0,
                 "--heads {} must be a multiple of --kv-heads {}", opt.heads, opt.kv_heads);
  WF_USAGE_CHECK(opt.head_dim >= 1 && opt.head_dim <= kernels::kMaxHeadDim,
                 "--head-dim must be in [1, {}], got {}", kernels::kMaxHeadDim, opt.head_dim);
  WF_USAGE_CHECK(opt.batch >= 1, "--batch must be >= 1, got {}", opt.batch);
  WF_USAGE_CHECK(opt.iters >= 0, "--iters must be >= 1, got {}", opt.iters);
  WF_USAGE_CHECK(!(opt.causal_only && opt.full_only), "--causal and --full exclude each other");
  for (int s : opt.seqs) {
    // q, o, dout, dq of the heads and k, v, dk, dv of the kv heads.
    const double kv = opt.kv_heads > 0 ? opt.kv_heads : opt.heads;
    check_memory(16.0 * opt.batch * double(s) * (opt.heads + kv) * opt.head_dim,
                 fmt::format("the kernel benchmark at --seq {}", s));
  }

  std::vector<bool> masks;
  if (!opt.causal_only) masks.push_back(false);
  if (!opt.full_only) masks.push_back(true);
  const int threads = num_threads();
  const char* core = blas_core_name();
  const std::string_view isa = kernels::isa::name(kernels::isa::active());
  if (!opt.json) {
    fmt::print(
        "# wallfacer bench kernel: flash attention fp32, threads {}, OpenBLAS core {}, kernels "
        "{}\n",
        threads, core, isa);
    fmt::print(
        "# FLOPs: fwd 4*B*H*S*S*D, bwd 2.5x fwd, halved when causal; sgemm: (n x D)(D x n);\n"
        "# rounds of sgemm, fwd, bwd interleaved, best round reported; ratios = kernel / sgemm\n");
    fmt::print(
        "#{:>7} {:>5} {:>4} {:>5} {:>6} {:>5} {:>10} {:>9} {:>10} {:>9} {:>6} {:>9} {:>6} "
        "{:>6} {:>10} {:>10} {:>9}\n",
        "seq", "heads", "hd", "batch", "mask", "iters", "fwd_ms", "fwd_GF/s", "bwd_ms", "bwd_GF/s",
        "gemm_n", "sgemm_GF", "fwd_r", "bwd_r", "ws_MiB", "rss_MiB", "check");
  }
  bool ok = true;
  for (int s : opt.seqs)
    for (bool causal : masks) {
      const CaseResult r = run_case(opt, s, causal);
      ok = ok && r.check_err <= check_tolerance(s);
      const double fr = r.fwd_gflops / r.sgemm_gflops, br = r.bwd_gflops / r.sgemm_gflops;
      if (opt.json) {
        nlohmann::json j = {{"seq", r.seq},
                            {"heads", opt.heads},
                            {"kv_heads", opt.kv_heads > 0 ? opt.kv_heads : opt.heads},
                            {"head_dim", opt.head_dim},
                            {"batch", opt.batch},
                            {"causal", r.causal},
                            {"threads", threads},
                            {"iters", r.iters},
                            {"fwd_ms", r.fwd_s * 1e3},
                            {"bwd_ms", r.bwd_s * 1e3},
                            {"fwd_gflops", r.fwd_gflops},
                            {"bwd_gflops", r.bwd_gflops},
                            {"sgemm_n", r.sgemm_n},
                            {"sgemm_gflops", r.sgemm_gflops},
                            {"fwd_ratio", fr},
                            {"bwd_ratio", br},
                            {"workspace_bytes", r.workspace_bytes},
                            {"peak_rss_bytes", r.peak_rss_bytes},
                            {"blas_core", core},
                            {"isa", isa},
                            {"check_err", r.check_err},
                            {"check_tol", check_tolerance(s)}};
        fmt::print("{}\n", j.dump());
      } else {
        fmt::print(
            " {:>7} {:>5} {:>4} {:>5} {:>6} {:>5} {:>10.1f} {:>9.1f} {:>10.1f} {:>9.1f} "
            "{:>6} {:>9.1f} {:>6.2f} {:>6.2f} {:>10.2f} {:>10.1f} {:>9.1e}\n",
            r.seq, opt.heads, opt.head_dim, opt.batch, r.causal ? "causal" : "full", r.iters,
            r.fwd_s * 1e3, r.fwd_gflops, r.bwd_s * 1e3, r.bwd_gflops, r.sgemm_n, r.sgemm_gflops, fr,
            br, r.workspace_bytes / 1048576.0, r.peak_rss_bytes / 1048576.0, r.check_err);
      }
      std::fflush(stdout);
    }
  if (!opt.json)
    fmt::print(
        "# check: spot rows vs fp64 reference, relative error {} (bound 3.8e-6 * "
        "sqrt(max(1, seq / 1000)))\n",
        ok ? "ok" : "FAILED");
  return ok ? 0 : 1;
}

Action setup_bench(CLI::App& root) {
  CLI::App* bench = root.add_subcommand("bench", "Benchmarks (kernel: flash attention vs sgemm)");
  auto opt = std::make_shared<KernelBenchOptions>();
  CLI::App* kernel = bench->add_subcommand(
      "kernel", "Flash-attention forward/backward GFLOP/s against OpenBLAS sgemm, same threads");
  kernel->add_option("--seq", opt->seqs, "Sequence lengths (one case each)")
      ->expected(1, 64)
      ->capture_default_str();
  kernel->add_option("--heads", opt->heads, "Query heads")->capture_default_str();
  kernel->add_option("--kv-heads", opt->kv_heads, "Key/value heads (default: --heads)");
  kernel->add_option("--head-dim", opt->head_dim, "Head dimension (1..256)")->capture_default_str();
  kernel->add_option("--batch", opt->batch, "Batch size")->capture_default_str();
  kernel->add_flag("--causal", opt->causal_only, "Causal mask only (default: full and causal)");
  kernel->add_flag("--full", opt->full_only, "Full mask only");
  kernel->add_flag("--json", opt->json, "One JSON object per case and line");
  kernel->add_option(
      "--iters", opt->iters,
      "Timed rounds per case, best round reported (default: 1 to 10 by the case's FLOPs)");
  return [opt, kernel]() -> int {
    if (kernel->parsed()) return run_kernel_bench(*opt);
    throw UsageError("bench: choose a benchmark, e.g. 'wallfacer bench kernel'");
  };
}

WALLFACER_COMMAND(60, "bench", setup_bench);

}  // namespace
}  // namespace wallfacer::cli
