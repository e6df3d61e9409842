#include "wallfacer/bench/gemm_bench.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "wallfacer/bench/inputs.h"
#include "wallfacer/core/bf16.h"
#include "wallfacer/core/timer.h"
#include "wallfacer/kernels/dense_bf16.h"
#include "wallfacer/kernels/ops.h"

namespace wallfacer::bench {
namespace {

// Inputs in [-1, 1] (weight in [-1/2, 1/2]) and their bf16 roundings, the outputs of both dtypes.
struct Buffers {
  std::vector<float> inp, weight, bias, dout, out, dinp, dweight, dbias;
  std::vector<bf16> inp_h, weight_h, dout_h, out_h, dinp_h;
  explicit Buffers(const GemmShape& s)
      : inp(uniform_values(size_t(s.N * s.C), 1)),
        weight(uniform_values(size_t(s.OC) * s.C, 2)),
        bias(uniform_values(size_t(s.OC), 3)),
        dout(uniform_values(size_t(s.N * s.OC), 4)),
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

  void run(bool bf16, int product, const GemmShape& s) {
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

double rows_error(const std::vector<double>& got, const std::vector<double>& ref) {
  double max_ref = 0, max_err = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    max_ref = std::max(max_ref, std::fabs(ref[i]));
    max_err = std::max(max_err, std::fabs(got[i] - ref[i]));
  }
  return max_ref > 0 ? max_err / max_ref : max_err;
}

// Runs the bf16 products once and fills r's errors.
void spot_check(Buffers& b, const GemmShape& s, GemmResult& r) {
  const auto wide = [](bf16 x) { return double(to_float(x)); };
  std::fill(b.dweight.begin(), b.dweight.end(), 0.0f);
  b.run(true, 0, s);
  b.run(true, 1, s);
  b.run(true, 2, s);
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
  r.err_bf16 = rows_error(got, ref);
  got.clear(), ref.clear();
  for (int64_t n : picks)
    for (int k = 0; k < s.C; ++k) {
      double sum = 0;
      for (int o = 0; o < s.OC; ++o)
        sum += wide(b.dout_h[n * s.OC + o]) * wide(b.weight_h[int64_t(o) * s.C + k]);
      got.push_back(wide(b.dinp_h[n * s.C + k]));
      ref.push_back(sum);
    }
  r.err_bf16 = std::max(r.err_bf16, rows_error(got, ref));
  got.clear(), ref.clear();
  for (int64_t o : {int64_t(0), int64_t(s.OC / 2), int64_t(s.OC - 1)})  // dweight rows
    for (int k = 0; k < s.C; ++k) {
      double sum = 0;
      for (int64_t n = 0; n < s.N; ++n)
        sum += wide(b.dout_h[n * s.OC + o]) * wide(b.inp_h[n * s.C + k]);
      got.push_back(b.dweight[o * s.C + k]);
      ref.push_back(sum);
    }
  r.err_fp32 = rows_error(got, ref);
}

}  // namespace

double gemm_case_bytes(const GemmShape& s) {
  // fp32 inp, weight, dout, out, dinp, dweight and their bf16 twins.
  const double elems = double(s.N) * (2.0 * s.C + 2.0 * s.OC) + 2.0 * s.OC * s.C;
  return 6 * elems;
}

GemmResult run_gemm_case(const GemmShape& s, int iters) {
  Buffers b(s);
  GemmResult r;
  r.iters = iters > 0 ? iters : std::clamp(int(20e9 / s.flops()), 1, 10);
  for (int p = 0; p < 3; ++p)  // warm-up: creates the bf16 primitives, touches the buffers
    for (int x = 0; x < 2; ++x) b.run(x == 1, p, s);
  for (int it = 0; it < r.iters; ++it)
    for (int p = 0; p < 3; ++p)
      for (int x = 0; x < 2; ++x) {
        const Timer t;
        b.run(x == 1, p, s);
        double& best = x == 1 ? r.bf16_s[p] : r.fp32_s[p];
        best = std::min(best, t.seconds());
      }
  spot_check(b, s, r);
  return r;
}

}  // namespace wallfacer::bench
