// The model kernels against their naive fp64 twins (kernels/reference/ops_ref.h), and the
// references themselves against finite differences where they are derived by hand.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <random>
#include <vector>

#include "isa_levels.h"
#include "ops_testing.h"
#include "wallfacer/core/error.h"
#include "wallfacer/kernels/ops.h"
#include "wallfacer/kernels/reference/ops_ref.h"
#include "wallfacer/kernels/vec_math.h"

namespace wallfacer::kernels {
namespace {

using ref::Vec;

using testing::expect_close;
using testing::randn;
using testing::to_d;

TEST(Ops, MatmulForwardBackward) {
  const int64_t N = 37;
  const int C = 24, OC = 19;
  auto x = randn(N * C, 1), w = randn(OC * C, 2), b = randn(OC, 3), dy = randn(N * OC, 4);
  std::vector<float> y(N * OC);
  matmul_fwd(y.data(), x.data(), w.data(), b.data(), N, C, OC);
  Vec want = ref::matmul(to_d(x), to_d(w), N, C, OC);
  for (int64_t n = 0; n < N; ++n)
    for (int o = 0; o < OC; ++o) want[n * OC + o] += b[o];
  expect_close(y, want, 1e-4, 1e-5);

  std::vector<float> dx(N * C, 1.0f), dw(OC * C, 0.5f), db(OC, 0.25f);
  matmul_bwd(dx.data(), dw.data(), db.data(), dy.data(), x.data(), w.data(), N, C, OC, true);
  Vec rdx, rdw;
  ref::matmul_bwd(rdx, rdw, to_d(dy), to_d(x), to_d(w), N, C, OC);
  for (auto& v : rdx) v += 1.0;
  for (auto& v : rdw) v += 0.5;
  expect_close(dx, rdx, 1e-4, 1e-5);
  expect_close(dw, rdw, 1e-4, 1e-5);
  for (int o = 0; o < OC; ++o) {
    double s = 0.25;
    for (int64_t n = 0; n < N; ++n) s += dy[n * OC + o];
    EXPECT_NEAR(db[o], s, 1e-4);
  }
  // Overwrite mode ignores what dinp held.
  std::fill(dx.begin(), dx.end(), 7.0f);
  matmul_bwd(dx.data(), nullptr, nullptr, dy.data(), x.data(), w.data(), N, C, OC, false);
  for (auto& v : rdx) v -= 1.0;
  expect_close(dx, rdx, 1e-4, 1e-5);
}

// One row (a decode step's product, a matrix-vector product), with and without the bias.
TEST(Ops, MatmulForwardOneRow) {
  const int C = 33, OC = 21;
  auto x = randn(C, 11), w = randn(OC * C, 12), b = randn(OC, 13);
  Vec want = ref::matmul(to_d(x), to_d(w), 1, C, OC);
  std::vector<float> y(OC, 9.0f);
  matmul_fwd(y.data(), x.data(), w.data(), nullptr, 1, C, OC);  // overwrites what y held
  expect_close(y, want, 1e-4, 1e-5);
  matmul_fwd(y.data(), x.data(), w.data(), b.data(), 1, C, OC);
  for (int o = 0; o < OC; ++o) want[size_t(o)] += b[size_t(o)];
  expect_close(y, want, 1e-4, 1e-5);
  // The rows are shared among the threads, each output one dot product: the same bits with one
  // thread as with several (here an LM head's shape, rows not a multiple of the threads' blocks).
  const int C2 = 512, OC2 = 1003;
  auto x2 = randn(C2, 14), w2 = randn(int64_t(OC2) * C2, 15);
  std::vector<float> one(OC2), several(OC2);
  const int before = omp_get_max_threads();
  omp_set_num_threads(1);
  matmul_fwd(one.data(), x2.data(), w2.data(), nullptr, 1, C2, OC2);
  omp_set_num_threads(3);
  matmul_fwd(several.data(), x2.data(), w2.data(), nullptr, 1, C2, OC2);
  omp_set_num_threads(before);
  EXPECT_EQ(one, several);
  expect_close(several, ref::matmul(to_d(x2), to_d(w2), 1, C2, OC2), 1e-4, 1e-5);
}

TEST(Ops, LayerNormForwardBackward) {
  const int64_t N = 13;
  const int C = 40;
  auto x = randn(N * C, 5, 2.0f), w = randn(C, 6), b = randn(C, 7), dy = randn(N * C, 8);
  std::vector<float> y(N * C), mean(N), rstd(N);
  layernorm_fwd(y.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C);
  expect_close(y, ref::layernorm(to_d(x), to_d(w), to_d(b), N, C, kLayerNormEps), 1e-5, 1e-5);

  std::vector<float> dx(N * C, 0.5f), dw(C, 0.0f), db(C, 0.0f);
  layernorm_bwd(dx.data(), dw.data(), db.data(), dy.data(), x.data(), w.data(), mean.data(),
                rstd.data(), N, C);
  Vec rdx, rdw, rdb;
  ref::layernorm_bwd(rdx, rdw, rdb, to_d(dy), to_d(x), to_d(w), N, C, kLayerNormEps);
  for (auto& v : rdx) v += 0.5;
  expect_close(dx, rdx, 1e-4, 1e-4);
  expect_close(dw, rdw, 1e-4, 1e-4);
  expect_close(db, rdb, 1e-4, 1e-4);

  // The hand-derived reference backward agrees with central differences of sum(dy * ln(x)).
  auto f = [&](const Vec& xx) { return ref::layernorm(xx, to_d(w), to_d(b), N, C, kLayerNormEps); };
  for (size_t i : {size_t(0), size_t(77), size_t(N * C - 1)})
    EXPECT_NEAR(testing::central_difference(f, dy, to_d(x), i), rdx[i] - 0.5, 1e-5);
}

TEST(Ops, Gelu) {
  auto x = randn(1000, 9, 3.0f), dy = randn(1000, 10);
  std::vector<float> y(1000), dx(1000);
  gelu_fwd(y.data(), x.data(), 1000);
  gelu_bwd(dx.data(), x.data(), dy.data(), 1000);
  for (size_t i = 0; i < 1000; ++i) {
    EXPECT_NEAR(y[i], ref::gelu(x[i]), 1e-5);
    EXPECT_NEAR(dx[i], dy[i] * ref::gelu_grad(x[i]), 1e-5);
    const double fd = (ref::gelu(x[i] + 1e-6) - ref::gelu(x[i] - 1e-6)) / 2e-6;
    EXPECT_NEAR(ref::gelu_grad(x[i]), fd, 1e-6);
  }
}

// GELU far into both tails (where tanh saturates) and the vectorised tanh against std::tanh over
// its whole range, infinities and signed zero included.
TEST(Ops, GeluTailsAndTanh) {
  std::vector<float> x = {-1e30f, -200.0f, -50.0f, -9.0f, -1e-3f, -0.0f,
                          0.0f,   1e-3f,   9.0f,   50.0f, 200.0f, 1e30f};
  std::vector<float> y(x.size()), dx(x.size()), dy(x.size(), 1.0f);
  gelu_fwd(y.data(), x.data(), int64_t(x.size()));
  gelu_bwd(dx.data(), x.data(), dy.data(), int64_t(x.size()));
  for (size_t i = 0; i < x.size(); ++i) {
    if (std::fabs(x[i]) < 1e6f) {
      EXPECT_NEAR(y[i], ref::gelu(x[i]), 1e-6 * std::max(1.0, std::fabs(double(x[i])))) << x[i];
      EXPECT_NEAR(dx[i], ref::gelu_grad(x[i]), 1e-6) << x[i];
    } else {
      EXPECT_TRUE(std::isfinite(y[i]) || x[i] > 0) << x[i];
    }
  }
  double worst = 0;
  for (int i = -400000; i <= 400000; ++i) {
    const float u = float(i) * 5e-5f;  // [-20, 20]
    worst = std::max(worst, std::fabs(double(detail::tanh_approx(u)) - std::tanh(double(u))));
  }
  EXPECT_LT(worst, 2e-7);
  EXPECT_EQ(detail::tanh_approx(INFINITY), 1.0f);
  EXPECT_EQ(detail::tanh_approx(-INFINITY), -1.0f);
  EXPECT_EQ(detail::tanh_approx(0.0f), 0.0f);
  EXPECT_TRUE(std::signbit(detail::tanh_approx(-0.0f)));
}

// The kernels' exp and 2^x (kernels/vec_math.h) against fp64 on a grid of step 1e-5 over the
// ranges the softmax uses (x <= 0): a few fp32 roundings at most, and exactly 0 at -inf.
TEST(Ops, ExpApproxAgainstFp64) {
  double worst = 0, worst2 = 0;
  for (int i = 0; i <= 8700000; ++i) {  // [-87, 0]
    const float x = -float(i) * 1e-5f;
    const double e = std::exp(double(x));
    worst = std::max(worst, std::fabs(double(detail::exp_approx(x)) - e) / e);
  }
  for (int i = 0; i <= 12600000; ++i) {  // [-126, 0]
    const float x = -float(i) * 1e-5f;
    const double e = std::exp2(double(x));
    worst2 = std::max(worst2, std::fabs(double(detail::exp2_approx(x)) - e) / e);
  }
  EXPECT_LT(worst, 2e-7);
  EXPECT_LT(worst2, 4e-7);
  EXPECT_EQ(detail::exp_approx(-INFINITY), 0.0f);
  EXPECT_EQ(detail::exp2_approx(-INFINITY), 0.0f);
  EXPECT_EQ(detail::exp_approx(0.0f), 1.0f);
}

TEST(Ops, RopeByGlobalPosition) {
  const int B = 2, T = 5, H = 3, D = 8;
  const std::vector<int64_t> pos = {0, 7, 3, 4096, 123456};
  const int64_t stride = 40;  // rows read from a wider (N, 40) buffer, like a fused QKV output
  auto wide = randn(size_t(B * T) * stride, 11);
  std::vector<float> cs(T * D / 2), sn(T * D / 2), y(size_t(B * T * H * D));
  rope_tables(pos.data(), T, D, 10000.0, cs.data(), sn.data());
  rope_fwd(y.data(), wide.data() + 4, stride, cs.data(), sn.data(), B, T, H, D);
  Vec x(y.size());
  for (int r = 0; r < B * T; ++r)
    for (int j = 0; j < H * D; ++j) x[size_t(r * H * D + j)] = wide[size_t(r * stride + 4 + j)];
  expect_close(y, ref::rope(x, pos, B, T, H, D, 10000.0, false), 2e-5, 1e-5);

  // Backward is the inverse rotation, written into the strided buffer.
  auto dy = randn(y.size(), 12);
  std::vector<float> dwide(wide.size(), -3.0f);
  rope_bwd(dwide.data() + 4, stride, dy.data(), cs.data(), sn.data(), B, T, H, D);
  Vec want = ref::rope(to_d(dy), pos, B, T, H, D, 10000.0, true);
  for (int r = 0; r < B * T; ++r) {
    for (int j = 0; j < H * D; ++j)
      EXPECT_NEAR(dwide[size_t(r * stride + 4 + j)], want[size_t(r * H * D + j)], 2e-5);
    EXPECT_EQ(dwide[size_t(r * stride)], -3.0f);  // outside the slice: untouched
  }
}

TEST(Ops, Embedding) {
  const int V = 11, C = 6;
  const std::vector<int32_t> tok = {3, 0, 10, 3, 7};
  auto wte = randn(V * C, 13), dy = randn(tok.size() * C, 14);
  std::vector<float> y(tok.size() * C), dw(V * C, 0.0f);
  embedding_fwd(y.data(), tok.data(), wte.data(), int64_t(tok.size()), C, V);
  embedding_bwd(dw.data(), tok.data(), dy.data(), int64_t(tok.size()), C);
  Vec want(size_t(V * C), 0.0);
  for (size_t n = 0; n < tok.size(); ++n)
    for (int c = 0; c < C; ++c) {
      EXPECT_EQ(y[n * C + c], wte[size_t(tok[n] * C + c)]);
      want[size_t(tok[n] * C + c)] += dy[n * C + c];
    }
  expect_close(dw, want, 1e-6, 0);
  const std::vector<int32_t> bad = {11};
  EXPECT_THROW(embedding_fwd(y.data(), bad.data(), wte.data(), 1, C, V), Error);
}

TEST(Ops, SoftmaxCrossEntropy) {
  const int64_t N = 9;
  const int V = 257;
  auto logits = randn(N * V, 15, 4.0f);
  std::vector<int32_t> tgt(N);
  for (int64_t n = 0; n < N; ++n) tgt[n] = int32_t((n * 97) % V);
  std::vector<float> loss(N), d(N * V);
  softmax_xent_fwd(loss.data(), logits.data(), tgt.data(), N, V);
  expect_close(loss, ref::softmax_xent(to_d(logits), tgt, N, V), 1e-4, 1e-5);
  softmax_xent_bwd(d.data(), logits.data(), tgt.data(), 0.125f, N, V);
  expect_close(d, ref::softmax_xent_bwd(to_d(logits), tgt, 0.125, N, V), 1e-6, 1e-4);
  softmax_xent_bwd(logits.data(), logits.data(), tgt.data(), 0.125f, N, V);  // in place
  EXPECT_EQ(logits, d);
}

TEST(Ops, AdamWMatchesReferenceOverSteps) {
  const int64_t n = 500;
  auto p = randn(n, 16), m = std::vector<float>(n, 0.0f), v = std::vector<float>(n, 0.0f);
  Vec rp = to_d(p), rm(n, 0.0), rv(n, 0.0);
  for (int64_t step = 1; step <= 4; ++step) {
    auto g = randn(n, uint32_t(100 + step));
    AdamWParams ap;
    ap.lr = 1e-2f;
    ap.weight_decay = 0.1f;
    ap.step = step;
    adamw(p.data(), g.data(), m.data(), v.data(), n, ap);
    ref::adamw(rp, to_d(g), rm, rv, 1e-2, 0.9, 0.95, 1e-8, 0.1, step);
  }
  expect_close(p, rp, 1e-6, 1e-5);
  expect_close(m, rm, 1e-6, 1e-5);
}

TEST(Ops, SumSquaresAndScale) {
  auto x = randn(100003, 17);
  double want = 0;
  for (float f : x) want += double(f) * f;
  EXPECT_NEAR(sum_squares(x.data(), int64_t(x.size())), want, 1e-9 * want);
  scale(x.data(), 3, 2.0f);
  auto y = randn(3, 17);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(x[size_t(i)], 2.0f * y[size_t(i)]);
}

// Every instruction-set level this CPU runs (kernels/isa.h), called directly: the vectorised
// kernels on lengths that are no multiple of any vector width.
TEST(Ops, EveryLevelMatchesTheReferences) {
  const int64_t N = 7;
  const int C = 100;
  auto x = randn(N * C, 21, 2.0f), w = randn(C, 22), b = randn(C, 23), dy = randn(N * C, 24);
  const Vec ln = ref::layernorm(to_d(x), to_d(w), to_d(b), N, C, kLayerNormEps);
  Vec rdx, rdw, rdb;
  ref::layernorm_bwd(rdx, rdw, rdb, to_d(dy), to_d(x), to_d(w), N, C, kLayerNormEps);
  Vec gelu(x.size()), dgelu(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    gelu[i] = ref::gelu(x[i]);
    dgelu[i] = dy[i] * ref::gelu_grad(x[i]);
  }
  auto g = randn(x.size(), 25);
  Vec rp = to_d(x), rm(x.size(), 0.0), rv(x.size(), 0.0);
  ref::adamw(rp, to_d(g), rm, rv, 1e-2, 0.9, 0.95, 1e-8, 0.1, 1);
  for (const LevelKernels& lk : levels_this_cpu_runs()) {
    SCOPED_TRACE(lk.name());
    std::vector<float> y(x.size()), mean(N), rstd(N), dx(x.size(), 0.0f), dw(C, 0.0f), db(C, 0.0f);
    lk.layernorm_fwd(y.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C);
    expect_close(y, ln, 1e-5, 1e-5);
    lk.layernorm_bwd(dx.data(), dw.data(), db.data(), dy.data(), x.data(), w.data(), mean.data(),
                     rstd.data(), N, C);
    expect_close(dx, rdx, 1e-4, 1e-4);
    expect_close(dw, rdw, 1e-4, 1e-4);
    expect_close(db, rdb, 1e-4, 1e-4);
    lk.gelu_fwd(y.data(), x.data(), int64_t(x.size()));
    expect_close(y, gelu, 1e-5, 0);
    lk.gelu_bwd(dx.data(), x.data(), dy.data(), int64_t(x.size()));
    expect_close(dx, dgelu, 1e-5, 0);
    std::vector<float> p = x, m(x.size(), 0.0f), v(x.size(), 0.0f);
    AdamWParams ap;
    ap.lr = 1e-2f;
    ap.weight_decay = 0.1f;
    ap.step = 1;
    lk.adamw(p.data(), g.data(), m.data(), v.data(), int64_t(p.size()), ap);
    expect_close(p, rp, 1e-6, 1e-5);
  }
}

}  // namespace
}  // namespace wallfacer::kernels
