#include "wallfacer/bench/kernel_bench.h"

#include <algorithm>
#include <cmath>
#include <memory>

#include "wallfacer/bench/inputs.h"
#include "wallfacer/core/bf16.h"
#include "wallfacer/core/error.h"
#include "wallfacer/core/threads.h"
#include "wallfacer/core/timer.h"
#include "wallfacer/kernels/attention.h"
#include "wallfacer/kernels/attention_bf16.h"
#include "wallfacer/kernels/attention_params.h"
#include "wallfacer/kernels/doc_mask.h"
#include "wallfacer/kernels/reference/attention_ref.h"
#include "wallfacer/kernels/sgemm.h"

namespace wallfacer::bench {
namespace {

// C = A B with A (n x d), B (d x n), on all threads (kernels/sgemm.h, the kernels' own products). n
// is capped so that C stays at most 64 MiB; the FLOP rate of this shape no longer changes at that
// size.
class SgemmProbe {
 public:
  SgemmProbe(int n, int d)
      : n_(std::min(n, 4096)),
        d_(d),
        a_(uniform_values(size_t(n_) * d, 1)),
        b_(uniform_values(size_t(d) * n_, 2)),
        c_(size_t(n_) * n_) {
    run();  // warm-up
  }
  int n() const { return n_; }
  double flops() const { return 2.0 * n_ * n_ * d_; }
  // Seconds per product, averaged over `reps` back-to-back products.
  double seconds(int reps) {
    const Timer t;
    for (int r = 0; r < reps; ++r) run();
    return t.seconds() / reps;
  }

 private:
  void run() {
    kernels::sgemm(false, false, n_, n_, d_, 1.0f, a_.data(), d_, b_.data(), n_, 0.0f, c_.data(),
                   n_);
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
  CaseInputs(const AttnShape& shape, int seq, bool is_causal) : causal(is_causal) {
    const int hkv = shape.kv();
    d = {shape.batch, seq, seq, shape.heads, hkv, shape.head_dim};
    qs = kernels::Strides3::contiguous(seq, shape.heads, shape.head_dim);
    ks = kernels::Strides3::contiguous(seq, hkv, shape.head_dim);
    ls = kernels::Strides2::contiguous(shape.heads, seq);
    scale = 1.0f / std::sqrt(float(shape.head_dim));
    q = uniform_values(size_t(shape.batch) * seq * shape.heads * shape.head_dim, 11);
    k = uniform_values(size_t(shape.batch) * seq * hkv * shape.head_dim, 12);
    v = uniform_values(k.size(), 13);
    dout = uniform_values(q.size(), 14);
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
                                   const int32_t* doc_of_pos) {
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
    const auto t = call_inputs(in, q_.data(), k_.data(), v_.data(), doc_of_pos);
    fp_ = kernels::fwd_params(t, o_.data(), lse_.data());
    bp_ = kernels::bwd_params(
        t, kernels::AttnGrads<bf16, bf16>{dout_.data(), lse_.data(), delta_.data(), dq_.data(),
                                          dk_.data(), dv_.data()});
  }
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

// The kernels of one dtype on a case, with documents when doc_of_pos is set.
std::unique_ptr<KernelRun> make_run(Dtype dtype, const CaseInputs& in,
                                    const int32_t* doc_of_pos = nullptr) {
  if (dtype == Dtype::fp32) return std::make_unique<Fp32Run>(in, doc_of_pos);
  return std::make_unique<Bf16Run>(in, doc_of_pos);
}

// Seconds of one call of f.
template <class F>
double seconds_of(F&& f) {
  const Timer t;
  f();
  return t.seconds();
}

}  // namespace

double attn_fwd_flops(const AttnShape& shape, int seq, bool causal) {
  return 4.0 * shape.batch * shape.heads * double(seq) * seq * shape.head_dim *
         (causal ? 0.5 : 1.0);
}

int rounds_for(int iters, double fwd_flops) {
  return iters > 0 ? iters : std::clamp(int(std::lround(1e11 / fwd_flops)), 1, 10);
}

double case_bytes(const AttnShape& shape, int seq, bool fp32, bool bf16) {
  // One fp32 tensor of the heads and one of the kv heads: the inputs are two of those, the fp32
  // outputs two more; the bf16 run holds eight bf16 tensors, the spot check's fp32 copies and
  // its workspace (packed copies, fp32 dQ).
  const int hkv = shape.kv();
  const double set = 4.0 * shape.batch * seq * (double(shape.heads) + hkv) * shape.head_dim;
  const kernels::AttnDims d{shape.batch, seq, seq, shape.heads, hkv, shape.head_dim};
  double bytes = 2 * set;
  if (fp32) bytes += 2 * set;
  if (bf16)
    bytes +=
        4 * set + double(std::max(kernels::attn_fwd_bf16_workspace_bytes(d, num_threads()),
                                  kernels::attn_bwd_bf16_workspace_bytes(d, num_threads(), true)));
  return bytes;
}

CaseResult run_case(const AttnShape& shape, int seq, bool causal, const std::vector<Dtype>& dtypes,
                    int iters) {
  CaseResult r;
  r.seq = seq;
  r.causal = causal;
  const CaseInputs in(shape, seq, causal);
  std::vector<std::unique_ptr<KernelRun>> runs;
  for (const Dtype dt : dtypes) runs.push_back(make_run(dt, in));
  const double fwd_flops = attn_fwd_flops(shape, seq, causal);
  const double bwd_flops = 2.5 * fwd_flops;
  r.iters = rounds_for(iters, fwd_flops);
  if (fwd_flops < 5e10)
    for (auto& run : runs) run->forward();  // warm-up when it is cheap

  SgemmProbe gemm(seq, shape.head_dim);
  // As many products per round as make up the forward's FLOPs (up to 30 GFLOP), so that both are
  // timed over similar stretches of time.
  const int gemm_reps =
      std::clamp(int(std::ceil(std::min(fwd_flops, 3e10) / gemm.flops())), 1, 1000);
  double gemm_s = 1e30;
  r.runs.resize(runs.size());
  for (int it = 0; it < r.iters; ++it) {
    gemm_s = std::min(gemm_s, gemm.seconds(gemm_reps));
    for (size_t x = 0; x < runs.size(); ++x) {
      r.runs[x].fwd_s = std::min(r.runs[x].fwd_s, seconds_of([&] { runs[x]->forward(); }));
      r.runs[x].bwd_s = std::min(r.runs[x].bwd_s, seconds_of([&] { runs[x]->backward(); }));
    }
  }
  r.sgemm_n = gemm.n();
  r.sgemm_gflops = gemm.flops() / gemm_s / 1e9;
  for (size_t x = 0; x < runs.size(); ++x) {
    DtypeResult& d = r.runs[x];
    d.dtype = dtypes[x];
    d.fwd_gflops = fwd_flops / d.fwd_s / 1e9;
    d.bwd_gflops = bwd_flops / d.bwd_s / 1e9;
    d.workspace_bytes = runs[x]->workspace_bytes(num_threads());
    d.check_err = runs[x]->check_err();
    d.check_tol = runs[x]->check_tol(seq);
  }
  r.peak_rss_bytes = peak_rss_bytes();
  return r;
}

DocCaseResult run_doc_case(const AttnShape& shape, int seq, bool causal,
                           const std::vector<int64_t>& lengths, Dtype dtype, int iters) {
  const kernels::DocBounds docs = kernels::doc_bounds_from_lengths(lengths, seq);
  const std::vector<int32_t> ids = kernels::doc_of_pos(docs);
  const kernels::PosRun all{0, seq};
  DocCaseResult r;
  r.dtype = dtype;
  r.docs = docs.count();
  r.longest = *std::max_element(lengths.begin(), lengths.end());
  r.kept =
      double(kernels::kept_pairs(docs, all, all, causal)) / kernels::kept_pairs(all, all, causal);
  const CaseInputs in(shape, seq, causal);
  const std::unique_ptr<KernelRun> plain = make_run(dtype, in),
                                   packed = make_run(dtype, in, ids.data());
  r.iters = rounds_for(iters, attn_fwd_flops(shape, seq, causal));
  double t[4] = {1e30, 1e30, 1e30, 1e30};  // fwd, fwd with docs, bwd, bwd with docs
  for (int it = 0; it < r.iters; ++it)
    for (int x = 0; x < 4; ++x) {
      KernelRun& run = x % 2 == 0 ? *plain : *packed;
      t[x] = std::min(t[x], seconds_of([&] {
                        if (x < 2)
                          run.forward();
                        else
                          run.backward();
                      }));
    }
  r.fwd_s = t[0], r.fwd_docs_s = t[1], r.bwd_s = t[2], r.bwd_docs_s = t[3];
  r.check_err = packed->check_err();
  r.check_tol = packed->check_tol(seq);
  return r;
}

}  // namespace wallfacer::bench
