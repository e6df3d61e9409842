// wallfacer bench kernel (and gemm, bench_gemm.cpp): flash-attention forward/backward GFLOP/s (fp32
// and/or bf16 kernels) against OpenBLAS sgemm measured in the same run, one row per case and dtype
// (nccl-tests style), or one JSON object per case and dtype. With --docs or --docs-random: the
// kernels (fp32, bf16 or both) on a packed sequence of documents against the same sequence without
// documents (the speedup of skipped tiles).

#include <cblas.h>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "bench_gemm.h"
#include "command.h"
#include "wallfacer/core/bf16.h"
#include "wallfacer/core/error.h"
#include "wallfacer/core/memory.h"
#include "wallfacer/core/threads.h"
#include "wallfacer/core/timer.h"
#include "wallfacer/kernels/attention.h"
#include "wallfacer/kernels/attention_bf16.h"
#include "wallfacer/kernels/attention_params.h"
#include "wallfacer/kernels/doc_mask.h"
#include "wallfacer/kernels/isa.h"
#include "wallfacer/kernels/reference/attention_ref.h"
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

double now_s() {
  using namespace std::chrono;
  return duration<double>(steady_clock::now().time_since_epoch()).count();
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

// The inputs of one case (fp32, uniform in [-1, 1]); the bf16 kernels get them rounded.
struct CaseInputs {
  kernels::AttnDims d;
  kernels::Strides3 qs, ks;
  kernels::Strides2 ls;
  float scale = 1.0f;
  bool causal = false;
  std::vector<float> q, k, v, dout;
  CaseInputs(const KernelBenchOptions& opt, int seq, bool is_causal) : causal(is_causal) {
    const int hkv = opt.kv_heads > 0 ? opt.kv_heads : opt.heads;
    d = {opt.batch, seq, seq, opt.heads, hkv, opt.head_dim};
    qs = kernels::Strides3::contiguous(seq, opt.heads, opt.head_dim);
    ks = kernels::Strides3::contiguous(seq, hkv, opt.head_dim);
    ls = kernels::Strides2::contiguous(opt.heads, seq);
    scale = 1.0f / std::sqrt(float(opt.head_dim));
    q.resize(size_t(opt.batch) * seq * opt.heads * opt.head_dim);
    k.resize(size_t(opt.batch) * seq * hkv * opt.head_dim);
    v.resize(k.size());
    dout.resize(q.size());
    fill_random(q, 11);
    fill_random(k, 12);
    fill_random(v, 13);
    fill_random(dout, 14);
  }
};

// Largest relative error of a few query rows of the first and last head (O and LSE) against the
// fp64 reference; q, k, v, o, lse are the kernel's inputs and outputs as fp32.
// doc_of_pos: the documents of the call (nullptr: none).
double spot_check(const CaseInputs& in, const float* q, const float* k, const float* v,
                  const float* o, const float* lse, const int32_t* doc_of_pos = nullptr) {
  const kernels::AttnDims& d = in.d;
  const kernels::reference::AttnRefProblem pr{d, double(in.scale), in.causal, 0, 0, doc_of_pos};
  std::vector<double> ref_row(d.head_dim);
  double max_ref = 0, max_err = 0;
  for (int h : {0, d.heads - 1})
    for (int i : {0, d.seq_q / 3, d.seq_q - 1}) {
      const double l =
          kernels::reference::attn_fwd_ref_row(pr, q, k, v, d.batch - 1, h, i, ref_row.data());
      const size_t row = ((size_t(d.batch - 1) * d.seq_q + i) * d.heads + h) * d.head_dim;
      for (int c = 0; c < d.head_dim; ++c) {
        max_ref = std::max(max_ref, std::fabs(ref_row[c]));
        max_err = std::max(max_err, std::fabs(double(o[row + c]) - ref_row[c]));
      }
      const double lk = lse[(size_t(d.batch - 1) * d.heads + h) * d.seq_q + i];
      max_err = std::max(max_err, std::fabs(lk - l) / std::max(1.0, std::fabs(l)) * max_ref);
    }
  return max_ref > 0 ? max_err / max_ref : max_err;
}

// The inputs of a case's kernel calls (of either element type).
template <typename T>
kernels::AttnInputs<T> call_inputs(const CaseInputs& in, const T* q, const T* k, const T* v,
                                   const int32_t* doc_of_pos = nullptr) {
  kernels::AttnInputs<T> t;
  t.dims = in.d;
  t.q = q;
  t.q_stride = in.qs;
  t.k = k;
  t.v = v;
  t.kv_stride = in.ks;
  t.stat_stride = in.ls;
  t.scale = in.scale;
  t.causal = in.causal;
  t.doc_of_pos = doc_of_pos;
  return t;
}

// One dtype's kernels on a case: buffers, the timed calls and the spot check.
class KernelRun {
 public:
  virtual ~KernelRun() = default;
  virtual const char* dtype() const = 0;
  virtual void forward() = 0;
  virtual void backward() = 0;  // delta, then the backward
  virtual int64_t workspace_bytes(int threads) const = 0;
  virtual double check_err() const = 0;
  // Bound of the spot check (docs/numerics.md).
  virtual double check_tol(int seq_k) const = 0;
};

class Fp32Run : public KernelRun {
 public:
  // doc_of_pos: documents of the packed sequence (kernels/attention.h); nullptr: none.
  explicit Fp32Run(const CaseInputs& in, const int32_t* doc_of_pos = nullptr)
      : in_(in),
        o_(in.q.size()),
        dq_(in.q.size()),
        dk_(in.k.size()),
        dv_(in.k.size()),
        lse_(size_t(in.d.batch) * in.d.heads * in.d.seq_q),
        delta_(lse_.size()) {
    const auto t = call_inputs(in, in.q.data(), in.k.data(), in.v.data(), doc_of_pos);
    fp_ = kernels::fwd_params(t, o_.data(), lse_.data());
    bp_ = kernels::bwd_params(
        t, {in.dout.data(), lse_.data(), delta_.data(), dq_.data(), dk_.data(), dv_.data()});
  }
  const char* dtype() const override { return "fp32"; }
  void forward() override { kernels::attn_fwd(fp_); }
  void backward() override {
    kernels::attn_bwd_preprocess(in_.d, o_.data(), in_.qs, in_.dout.data(), in_.qs, delta_.data(),
                                 in_.ls);
    kernels::attn_bwd(bp_);
  }
  int64_t workspace_bytes(int threads) const override {
    return std::max(kernels::attn_fwd_workspace_bytes(in_.d, threads),
                    kernels::attn_bwd_workspace_bytes(in_.d, threads));
  }
  double check_err() const override {
    return spot_check(in_, in_.q.data(), in_.k.data(), in_.v.data(), o_.data(), lse_.data(),
                      fp_.doc_of_pos);
  }
  // 32 fp32 epsilons for O up to 1000 keys, growing like sqrt(keys) beyond (full attention
  // averages O down like 1 / sqrt(keys) while its absolute error does not shrink).
  double check_tol(int seq_k) const override {
    return 32 * 1.1920928955078125e-7 * std::sqrt(std::max(1.0, seq_k / 1000.0));
  }

 private:
  const CaseInputs& in_;
  std::vector<float> o_, dq_, dk_, dv_, lse_, delta_;
  kernels::AttnFwdParams fp_;
  kernels::AttnBwdParams bp_;
};

// bf16 inputs and outputs (the inputs rounded from the fp32 ones).
class Bf16Run : public KernelRun {
 public:
  // doc_of_pos: documents of the packed sequence (kernels/attention.h); nullptr: none.
  explicit Bf16Run(const CaseInputs& in, const int32_t* doc_of_pos = nullptr)
      : in_(in),
        q_(to_bf16(in.q)),
        k_(to_bf16(in.k)),
        v_(to_bf16(in.v)),
        dout_(to_bf16(in.dout)),
        o_(q_.size()),
        dq_(q_.size()),
        dk_(k_.size()),
        dv_(k_.size()),
        lse_(size_t(in.d.batch) * in.d.heads * in.d.seq_q),
        delta_(lse_.size()) {
    const auto t = call_inputs(in, q_.data(), k_.data(), v_.data());
    fp_ = kernels::fwd_params(t, o_.data(), lse_.data());
    bp_ = kernels::bwd_params(
        t, kernels::AttnGrads<bf16, bf16>{dout_.data(), lse_.data(), delta_.data(), dq_.data(),
                                          dk_.data(), dv_.data()});
    fp_.doc_of_pos = bp_.doc_of_pos = doc_of_pos;
  }
  const char* dtype() const override { return "bf16"; }
  void forward() override { kernels::attn_fwd_bf16(fp_); }
  void backward() override {
    kernels::attn_bwd_preprocess_bf16(in_.d, o_.data(), in_.qs, dout_.data(), in_.qs, delta_.data(),
                                      in_.ls);
    kernels::attn_bwd_bf16(bp_);
  }
  int64_t workspace_bytes(int threads) const override {
    return std::max(kernels::attn_fwd_bf16_workspace_bytes(in_.d, threads),
                    kernels::attn_bwd_bf16_workspace_bytes(in_.d, threads, true));
  }
  // Against the fp64 reference of the rounded inputs.
  double check_err() const override {
    return spot_check(in_, to_fp32(q_).data(), to_fp32(k_).data(), to_fp32(v_).data(),
                      to_fp32(o_).data(), lse_.data(), fp_.doc_of_pos);
  }
  // 3 bf16 unit roundoffs (2^-8), as the unit tests.
  double check_tol(int) const override { return 3.0 / 256; }

 private:
  const CaseInputs& in_;
  std::vector<bf16> q_, k_, v_, dout_, o_, dq_, dk_, dv_;
  std::vector<float> lse_, delta_;
  kernels::AttnFwdBf16Params fp_;
  kernels::AttnBwdBf16Params bp_;
};

struct DtypeResult {
  std::string dtype;
  double fwd_s = 1e30, bwd_s = 1e30, fwd_gflops = 0, bwd_gflops = 0;
  int64_t workspace_bytes = 0;
  double check_err = 0, check_tol = 0;
};

struct CaseResult {
  int seq = 0;
  bool causal = false;
  int iters = 0;
  int sgemm_n = 0;
  double sgemm_gflops = 0;
  int64_t peak_rss_bytes = 0;
  std::vector<DtypeResult> runs;  // in the order of --dtype (fp32 first for both)
};

std::vector<std::string> dtypes_of(const std::string& dtype) {
  if (dtype == "both") return {"fp32", "bf16"};
  return {dtype};
}

// The kernels of one dtype (fp32 or bf16) on a case, with documents when doc_of_pos is set.
std::unique_ptr<KernelRun> make_run(const std::string& dtype, const CaseInputs& in,
                                    const int32_t* doc_of_pos = nullptr) {
  if (dtype == "fp32") return std::make_unique<Fp32Run>(in, doc_of_pos);
  return std::make_unique<Bf16Run>(in, doc_of_pos);
}

CaseResult run_case(const KernelBenchOptions& opt, int seq, bool causal) {
  CaseResult r;
  r.seq = seq;
  r.causal = causal;
  const CaseInputs in(opt, seq, causal);
  std::vector<std::unique_ptr<KernelRun>> runs;
  for (const std::string& dt : dtypes_of(opt.dtype)) runs.push_back(make_run(dt, in));
  const double fwd_flops =
      4.0 * opt.batch * opt.heads * double(seq) * seq * opt.head_dim * (causal ? 0.5 : 1.0);
  const double bwd_flops = 2.5 * fwd_flops;
  r.iters = opt.iters > 0 ? opt.iters : std::clamp(int(std::lround(1e11 / fwd_flops)), 1, 10);
  if (fwd_flops < 5e10)
    for (auto& run : runs) run->forward();  // warm-up when it is cheap

  // Rounds of (sgemm, then forward and backward of each dtype), interleaved so that all see the
  // same machine load; each rate comes from its best round.
  SgemmProbe gemm(seq, opt.head_dim);
  // As many products per round as make up the forward's FLOPs (up to 30 GFLOP), so that both are
  // timed over similar stretches of time.
  const int gemm_reps =
      std::clamp(int(std::ceil(std::min(fwd_flops, 3e10) / gemm.flops())), 1, 1000);
  double gemm_s = 1e30;
  r.runs.resize(runs.size());
  for (int it = 0; it < r.iters; ++it) {
    gemm_s = std::min(gemm_s, gemm.seconds(gemm_reps));
    for (size_t x = 0; x < runs.size(); ++x) {
      double t0 = now_s();
      runs[x]->forward();
      r.runs[x].fwd_s = std::min(r.runs[x].fwd_s, now_s() - t0);
      t0 = now_s();
      runs[x]->backward();
      r.runs[x].bwd_s = std::min(r.runs[x].bwd_s, now_s() - t0);
    }
  }
  r.sgemm_n = gemm.n();
  r.sgemm_gflops = gemm.flops() / gemm_s / 1e9;
  for (size_t x = 0; x < runs.size(); ++x) {
    DtypeResult& d = r.runs[x];
    d.dtype = runs[x]->dtype();
    d.fwd_gflops = fwd_flops / d.fwd_s / 1e9;
    d.bwd_gflops = bwd_flops / d.bwd_s / 1e9;
    d.workspace_bytes = runs[x]->workspace_bytes(num_threads());
    d.check_err = runs[x]->check_err();
    d.check_tol = runs[x]->check_tol(seq);
  }
  r.peak_rss_bytes = peak_rss_bytes();
  return r;
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
    for (bool causal : masks) {
      const std::vector<int64_t> lengths = bench_doc_lengths(opt, s);
      const kernels::DocBounds docs = kernels::doc_bounds_from_lengths(lengths, s);
      const std::vector<int32_t> ids = kernels::doc_of_pos(docs);
      const kernels::PosRun all{0, s};
      const double kept = double(kernels::kept_pairs(docs, all, all, causal)) /
                          kernels::kept_pairs(all, all, causal);
      const CaseInputs in(opt, s, causal);
      for (const std::string& dt : dtypes_of(opt.dtype)) {
        const std::unique_ptr<KernelRun> plain = make_run(dt, in),
                                         packed = make_run(dt, in, ids.data());
        const double fwd_flops =
            4.0 * opt.batch * opt.heads * double(s) * s * opt.head_dim * (causal ? 0.5 : 1.0);
        const int iters =
            opt.iters > 0 ? opt.iters : std::clamp(int(std::lround(1e11 / fwd_flops)), 1, 10);
        double t[4] = {1e30, 1e30, 1e30, 1e30};  // fwd, fwd with docs, bwd, bwd with docs
        for (int it = 0; it < iters; ++it)
          for (int x = 0; x < 4; ++x) {
            KernelRun& run = x % 2 == 0 ? *plain : *packed;
            const double t0 = now_s();
            if (x < 2)
              run.forward();
            else
              run.backward();
            t[x] = std::min(t[x], now_s() - t0);
          }
        const double err = packed->check_err(), tol = packed->check_tol(s);
        ok = ok && err <= tol;
        const int64_t longest = *std::max_element(lengths.begin(), lengths.end());
        if (opt.json) {
          const nlohmann::json j = {{"seq", s},
                                    {"heads", opt.heads},
                                    {"head_dim", opt.head_dim},
                                    {"batch", opt.batch},
                                    {"causal", causal},
                                    {"dtype", dt},
                                    {"docs", docs.count()},
                                    {"longest_doc", longest},
                                    {"kept_fraction", kept},
                                    {"threads", num_threads()},
                                    {"iters", iters},
                                    {"fwd_ms", t[0] * 1e3},
                                    {"fwd_docs_ms", t[1] * 1e3},
                                    {"bwd_ms", t[2] * 1e3},
                                    {"bwd_docs_ms", t[3] * 1e3},
                                    {"fwd_speedup", t[0] / t[1]},
                                    {"bwd_speedup", t[2] / t[3]},
                                    {"check_err", err},
                                    {"check_tol", tol}};
          fmt::print("{}\n", j.dump());
        } else {
          fmt::print(
              " {:>7} {:>6} {:>5} {:>6} {:>8} {:>8.4f} {:>10.1f} {:>10.1f} {:>7.2f} {:>10.1f} "
              "{:>10.1f} {:>7.2f} {:>9.1e}\n",
              s, causal ? "causal" : "full", dt, docs.count(), longest, kept, t[0] * 1e3,
              t[1] * 1e3, t[0] / t[1], t[2] * 1e3, t[3] * 1e3, t[2] / t[3], err);
        }
        std::fflush(stdout);
      }
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
  const bool fp32 = opt.dtype != "bf16", bf16 = opt.dtype != "fp32";
  const kernels::Bf16Path path = bf16 ? kernels::bf16_path() : kernels::Bf16Path::portable;
  for (int s : opt.seqs) {
    // One fp32 tensor of the heads and one of the kv heads: the inputs are two of those, the fp32
    // outputs two more; the bf16 run holds eight bf16 tensors, the spot check's fp32 copies and
    // its workspace (packed copies, fp32 dQ).
    const int hkv = opt.kv_heads > 0 ? opt.kv_heads : opt.heads;
    const double set = 4.0 * opt.batch * s * (double(opt.heads) + hkv) * opt.head_dim;
    const kernels::AttnDims d{opt.batch, s, s, opt.heads, hkv, opt.head_dim};
    double bytes = 2 * set;
    if (fp32) bytes += 2 * set;
    if (bf16)
      bytes += 4 * set +
               double(std::max(kernels::attn_fwd_bf16_workspace_bytes(d, num_threads()),
                               kernels::attn_bwd_bf16_workspace_bytes(d, num_threads(), true)));
    check_memory(bytes, fmt::format("the kernel benchmark at --seq {}", s));
  }

  std::vector<bool> masks;
  if (!opt.causal_only) masks.push_back(false);
  if (!opt.full_only) masks.push_back(true);
  if (with_docs) return run_doc_bench(opt, masks);
  const int threads = num_threads();
  const char* core = blas_core_name();
  const std::string_view isa = kernels::isa::name(kernels::isa::active());
  if (!opt.json) {
    fmt::print(
        "# wallfacer bench kernel: flash attention {}, threads {}, OpenBLAS core {}, kernels "
        "{}{}\n",
        opt.dtype == "both" ? "fp32 and bf16" : opt.dtype, threads, core, isa,
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
      const CaseResult r = run_case(opt, s, causal);
      const DtypeResult* base = r.runs.size() == 2 ? &r.runs[0] : nullptr;  // fp32 beside bf16
      for (const DtypeResult& x : r.runs) {
        ok = ok && x.check_err <= x.check_tol;
        const double fr = x.fwd_gflops / r.sgemm_gflops, br = x.bwd_gflops / r.sgemm_gflops;
        if (opt.json) {
          nlohmann::json j = {{"seq", r.seq},
                              {"heads", opt.heads},
                              {"kv_heads", opt.kv_heads > 0 ? opt.kv_heads : opt.heads},
                              {"head_dim", opt.head_dim},
                              {"batch", opt.batch},
                              {"causal", r.causal},
                              {"dtype", x.dtype},
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
                              {"isa", isa},
                              {"check_err", x.check_err},
                              {"check_tol", x.check_tol}};
          if (x.dtype == "bf16") {
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
              r.seq, opt.heads, opt.head_dim, opt.batch, r.causal ? "causal" : "full", x.dtype,
              r.iters, x.fwd_s * 1e3, x.fwd_gflops, x.bwd_s * 1e3, x.bwd_gflops, r.sgemm_n,
              r.sgemm_gflops, fr, br, x.workspace_bytes / 1048576.0, r.peak_rss_bytes / 1048576.0,
              x.check_err);
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
      "kernel", "Flash-attention forward/backward GFLOP/s against OpenBLAS sgemm, same threads");
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
