// wallfacer bench kernel (and gemm, bench_gemm.cpp): the options and the output of the kernel
// benchmark (bench/kernel_bench.h): flash-attention forward/backward GFLOP/s (fp32 and/or bf16
// kernels) against the kernels' sgemm (kernels/sgemm.h) measured in the same run, one row per case
// and dtype (nccl-tests style), or one JSON object per case and dtype. With --docs or
// --docs-random: the kernels of
// --dtype on a packed sequence of documents against the same sequence without documents (the
// speedup of skipped tiles).

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench_gemm.h"
#include "command.h"
#include "wallfacer/bench/kernel_bench.h"
#include "wallfacer/core/dtype.h"
#include "wallfacer/core/error.h"
#include "wallfacer/core/memory.h"
#include "wallfacer/core/threads.h"
#include "wallfacer/kernels/attention.h"
#include "wallfacer/kernels/attention_bf16.h"
#include "wallfacer/kernels/doc_mask.h"
#include "wallfacer/kernels/isa.h"
#include "wallfacer/kernels/sgemm.h"
#include "wallfacer/seqpar/doc_layout.h"

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
  int iters = 0;               // 0: chosen per case
  std::string dtype = "fp32";  // fp32, bf16 or both
  std::vector<int64_t> docs;   // document lengths (--docs)
  int docs_random = 0;         // number of random documents (--docs-random)
  uint64_t seed = 1;           // of the random documents
  bool seq_given = false;      // --seq on the command line
};

bench::AttnShape shape_of(const KernelBenchOptions& opt) {
  return {opt.heads, opt.kv_heads, opt.head_dim, opt.batch};
}

// --dtype: fp32, bf16 or both.
std::vector<Dtype> dtypes_of(const std::string& dtype) {
  if (dtype == "both") return {Dtype::fp32, Dtype::bf16};
  return {parse_dtype(dtype)};
}

// Document lengths of a --docs / --docs-random case of seq positions.
std::vector<int64_t> bench_doc_lengths(const KernelBenchOptions& opt, int seq) {
  if (!opt.docs.empty()) return opt.docs;
  WF_USAGE_CHECK(opt.docs_random <= seq,
                 "--docs-random {} exceeds --seq {}: at most one document "
                 "per position",
                 opt.docs_random, seq);
  return seqpar::random_doc_lengths_count(seq, opt.docs_random, opt.seed);
}

// The kernels of each dtype with documents against the same case without, rounds interleaved.
int run_doc_bench(const KernelBenchOptions& opt, const std::vector<bool>& masks) {
  if (!opt.json) {
    fmt::print(
        "# wallfacer bench kernel, packed documents: flash attention {}, threads {}, kernels {}\n",
        opt.dtype == "both" ? "fp32 and bf16" : opt.dtype, num_threads(),
        kernels::isa::name(kernels::isa::active()));
    fmt::print(
        "# kept = pairs kept with documents / without; speedup = time without / with; "
        "best of the interleaved rounds\n");
    fmt::print(
        "#{:>7} {:>6} {:>5} {:>6} {:>8} {:>8} {:>10} {:>10} {:>7} {:>10} {:>10} {:>7} {:>9}\n",
        "seq", "mask", "dtype", "docs", "longest", "kept", "fwd_ms", "fwd_docs", "fwd_x", "bwd_ms",
        "bwd_docs", "bwd_x", "check");
  }
  bool ok = true;
  for (int s : opt.seqs)
    for (bool causal : masks)
      for (const Dtype dt : dtypes_of(opt.dtype)) {
        const bench::DocCaseResult r =
            bench::run_doc_case(shape_of(opt), s, causal, bench_doc_lengths(opt, s), dt, opt.iters);
        ok = ok && r.check_err <= r.check_tol;
        if (opt.json) {
          const nlohmann::json j = {{"seq", s},
                                    {"heads", opt.heads},
                                    {"head_dim", opt.head_dim},
                                    {"batch", opt.batch},
                                    {"causal", causal},
                                    {"dtype", dtype_name(r.dtype)},
                                    {"docs", r.docs},
                                    {"longest_doc", r.longest},
                                    {"kept_fraction", r.kept},
                                    {"threads", num_threads()},
                                    {"iters", r.iters},
                                    {"fwd_ms", r.fwd_s * 1e3},
                                    {"fwd_docs_ms", r.fwd_docs_s * 1e3},
                                    {"bwd_ms", r.bwd_s * 1e3},
                                    {"bwd_docs_ms", r.bwd_docs_s * 1e3},
                                    {"fwd_speedup", r.fwd_s / r.fwd_docs_s},
                                    {"bwd_speedup", r.bwd_s / r.bwd_docs_s},
                                    {"check_err", r.check_err},
                                    {"check_tol", r.check_tol}};
          fmt::print("{}\n", j.dump());
        } else {
          fmt::print(
              " {:>7} {:>6} {:>5} {:>6} {:>8} {:>8.4f} {:>10.1f} {:>10.1f} {:>7.2f} {:>10.1f} "
              "{:>10.1f} {:>7.2f} {:>9.1e}\n",
              s, causal ? "causal" : "full", dtype_name(r.dtype), r.docs, r.longest, r.kept,
              r.fwd_s * 1e3, r.fwd_docs_s * 1e3, r.fwd_s / r.fwd_docs_s, r.bwd_s * 1e3,
              r.bwd_docs_s * 1e3, r.bwd_s / r.bwd_docs_s, r.check_err);
        }
        std::fflush(stdout);
      }
  if (!opt.json)
    fmt::print("# check: spot rows with documents vs fp64 reference, relative error {}\n",
               ok ? "ok" : "FAILED");
  return ok ? 0 : 1;
}

int run_kernel_bench(KernelBenchOptions opt) {
  WF_USAGE_CHECK(opt.docs_random >= 0, "--docs-random must be >= 1, got {}", opt.docs_random);
  const bool with_docs = !opt.docs.empty() || opt.docs_random > 0;
  if (with_docs) {
    WF_USAGE_CHECK(opt.docs.empty() || opt.docs_random == 0,
                   "--docs and --docs-random exclude each other; give one");
    if (!opt.docs.empty()) {
      int64_t sum = 0;
      for (int64_t len : opt.docs) sum += len;
      if (!opt.seq_given && sum > 0 && sum <= std::numeric_limits<int>::max())
        opt.seqs = {int(sum)};
      for (int s : opt.seqs)
        WF_USAGE_CHECK(sum == s,
                       "--docs lengths sum to {}, not to --seq {}; drop --seq (it defaults to the "
                       "sum) or fix the lengths",
                       sum, s);
    }
    for (int s : opt.seqs) kernels::doc_bounds_from_lengths(bench_doc_lengths(opt, s), s);
  }
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
  const std::vector<Dtype> dtypes = dtypes_of(opt.dtype);
  const bool fp32 = std::count(dtypes.begin(), dtypes.end(), Dtype::fp32) > 0,
             bf16 = std::count(dtypes.begin(), dtypes.end(), Dtype::bf16) > 0;
  const kernels::Bf16Path path = bf16 ? kernels::bf16_path() : kernels::Bf16Path::portable;
  for (int s : opt.seqs)
    check_memory(bench::case_bytes(shape_of(opt), s, fp32, bf16),
                 fmt::format("the kernel benchmark at --seq {}", s));

  std::vector<bool> masks;
  if (!opt.causal_only) masks.push_back(false);
  if (!opt.full_only) masks.push_back(true);
  if (with_docs) return run_doc_bench(opt, masks);
  const int threads = num_threads();
  const char* core = blas_core_name();
  const std::string_view isa = kernels::isa::name(kernels::isa::active());
  if (!opt.json) {
    fmt::print(
        "# wallfacer bench kernel: flash attention {}, threads {}, sgemm {}, kernels "
        "{}{}\n",
        opt.dtype == "both" ? "fp32 and bf16" : opt.dtype, threads, kernels::sgemm_backend(), isa,
        bf16 ? fmt::format(", bf16 tile products {}", kernels::bf16_path_name(path)) : "");
    fmt::print(
        "# FLOPs: fwd 4*B*H*S*S*D, bwd 2.5x fwd, halved when causal; sgemm: (n x D)(D x n);\n"
        "# rounds of sgemm, fwd, bwd interleaved, best round reported; ratios = kernel / sgemm\n");
    fmt::print(
        "#{:>7} {:>5} {:>4} {:>5} {:>6} {:>5} {:>5} {:>10} {:>9} {:>10} {:>9} {:>6} {:>9} {:>6} "
        "{:>6} {:>10} {:>10} {:>9}\n",
        "seq", "heads", "hd", "batch", "mask", "dtype", "iters", "fwd_ms", "fwd_GF/s", "bwd_ms",
        "bwd_GF/s", "gemm_n", "sgemm_GF", "fwd_r", "bwd_r", "ws_MiB", "rss_MiB", "check");
  }
  bool ok = true;
  for (int s : opt.seqs)
    for (bool causal : masks) {
      const bench::CaseResult r = bench::run_case(shape_of(opt), s, causal, dtypes, opt.iters);
      const bench::DtypeResult* base =
          r.runs.size() == 2 ? &r.runs[0] : nullptr;  // fp32 beside bf16
      for (const bench::DtypeResult& x : r.runs) {
        ok = ok && x.check_err <= x.check_tol;
        const double fr = x.fwd_gflops / r.sgemm_gflops, br = x.bwd_gflops / r.sgemm_gflops;
        if (opt.json) {
          nlohmann::json j = {{"seq", r.seq},
                              {"heads", opt.heads},
                              {"kv_heads", opt.kv_heads > 0 ? opt.kv_heads : opt.heads},
                              {"head_dim", opt.head_dim},
                              {"batch", opt.batch},
                              {"causal", r.causal},
                              {"dtype", dtype_name(x.dtype)},
                              {"threads", threads},
                              {"iters", r.iters},
                              {"fwd_ms", x.fwd_s * 1e3},
                              {"bwd_ms", x.bwd_s * 1e3},
                              {"fwd_gflops", x.fwd_gflops},
                              {"bwd_gflops", x.bwd_gflops},
                              {"sgemm_n", r.sgemm_n},
                              {"sgemm_gflops", r.sgemm_gflops},
                              {"fwd_ratio", fr},
                              {"bwd_ratio", br},
                              {"workspace_bytes", x.workspace_bytes},
                              {"peak_rss_bytes", r.peak_rss_bytes},
                              {"blas_core", core},
                              {"sgemm", kernels::sgemm_backend()},
                              {"isa", isa},
                              {"check_err", x.check_err},
                              {"check_tol", x.check_tol}};
          if (x.dtype == Dtype::bf16) {
            j["bf16_path"] = kernels::bf16_path_name(path);
            if (base) {
              j["fwd_vs_fp32"] = x.fwd_gflops / base->fwd_gflops;
              j["bwd_vs_fp32"] = x.bwd_gflops / base->bwd_gflops;
            }
          }
          fmt::print("{}\n", j.dump());
        } else {
          fmt::print(
              " {:>7} {:>5} {:>4} {:>5} {:>6} {:>5} {:>5} {:>10.1f} {:>9.1f} {:>10.1f} {:>9.1f} "
              "{:>6} {:>9.1f} {:>6.2f} {:>6.2f} {:>10.2f} {:>10.1f} {:>9.1e}\n",
              r.seq, opt.heads, opt.head_dim, opt.batch, r.causal ? "causal" : "full",
              dtype_name(x.dtype), r.iters, x.fwd_s * 1e3, x.fwd_gflops, x.bwd_s * 1e3,
              x.bwd_gflops, r.sgemm_n, r.sgemm_gflops, fr, br, x.workspace_bytes / 1048576.0,
              r.peak_rss_bytes / 1048576.0, x.check_err);
        }
      }
      if (base && !opt.json)
        fmt::print("# bf16 / fp32 at seq {} {}: fwd {:.2f}x, bwd {:.2f}x\n", r.seq,
                   r.causal ? "causal" : "full", r.runs[1].fwd_gflops / base->fwd_gflops,
                   r.runs[1].bwd_gflops / base->bwd_gflops);
      std::fflush(stdout);
    }
  if (!opt.json)
    fmt::print(
        "# check: spot rows vs fp64 reference, relative error {} (bound fp32 3.8e-6 * "
        "sqrt(max(1, seq / 1000)), bf16 1.2e-2 against the rounded inputs)\n",
        ok ? "ok" : "FAILED");
  return ok ? 0 : 1;
}

Action setup_bench(CLI::App& root) {
  CLI::App* bench = root.add_subcommand(
      "bench", "Benchmarks (kernel: flash attention vs sgemm; gemm: bf16 vs fp32 dense products)");
  auto opt = std::make_shared<KernelBenchOptions>();
  CLI::App* kernel = bench->add_subcommand(
      "kernel", "Flash-attention forward/backward GFLOP/s against sgemm, same threads");
  kernel->add_option("--seq", opt->seqs, "Sequence lengths (one case each)")
      ->expected(1, 64)
      ->capture_default_str();
  kernel->add_option("--heads", opt->heads, "Query heads")->capture_default_str();
  kernel->add_option("--kv-heads", opt->kv_heads, "Key/value heads (default: --heads)")
      ->check(CLI::PositiveNumber);
  kernel->add_option("--head-dim", opt->head_dim, "Head dimension (1..256)")->capture_default_str();
  kernel->add_option("--batch", opt->batch, "Batch size")->capture_default_str();
  kernel->add_flag("--causal", opt->causal_only, "Causal mask only (default: full and causal)");
  kernel->add_flag("--full", opt->full_only, "Full mask only");
  kernel->add_flag("--json", opt->json, "One JSON object per case and line");
  kernel
      ->add_option("--dtype", opt->dtype,
                   "fp32, bf16 (bf16 storage, fp32 arithmetic) or both (each case timed for "
                   "both in the same rounds, with the bf16 / fp32 ratio)")
      ->check(CLI::IsMember({"fp32", "bf16", "both"}))
      ->capture_default_str();
  kernel
      ->add_option(
          "--iters", opt->iters,
          "Timed rounds per case, best round reported (default: 1 to 10 by the case's FLOPs)")
      ->check(CLI::PositiveNumber);
  kernel
      ->add_option("--docs", opt->docs,
                   "Packed documents: their lengths, summing to the sequence (--seq defaults to "
                   "the sum); times the kernels of --dtype with and without the documents")
      ->delimiter(',');
  kernel->add_option("--docs-random", opt->docs_random,
                     "Packed documents: this many, of random long-tailed lengths (log-normal, "
                     "sigma 2) filling each --seq; as --docs otherwise");
  kernel->add_option("--seed", opt->seed, "Seed of --docs-random")->capture_default_str();
  CLI::App* gemm = nullptr;
  const Action run_gemm = setup_bench_gemm(*bench, gemm);
  return [opt, kernel, gemm, run_gemm]() -> int {
    opt->seq_given = kernel->count("--seq") > 0;
    if (kernel->parsed()) return run_kernel_bench(*opt);
    if (gemm->parsed()) return run_gemm();
    throw UsageError("bench: choose a benchmark, e.g. 'wallfacer bench kernel' or 'bench gemm'");
  };
}

WALLFACER_COMMAND(60, "bench", setup_bench);

}  // namespace
}  // namespace wallfacer::cli
