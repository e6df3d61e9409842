// Flash attention (fp32) against the naive fp64 reference, under the tolerance policy of
// docs/numerics.md: max |kernel - reference| <= tol * max |reference|, per quantity.

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "isa_levels.h"
#include "wallfacer/core/error.h"
#include "wallfacer/kernels/attention.h"
#include "wallfacer/kernels/reference/attention_ref.h"

namespace wallfacer::kernels {
namespace {

using reference::AttnRefProblem;

// Tolerances relative to the largest reference magnitude of each quantity (docs/numerics.md).
constexpr double kEps = 1.1920928955078125e-7;  // fp32 machine epsilon
constexpr double kTolO = 32 * kEps;
constexpr double kTolLse = 8 * kEps;
constexpr double kTolGrad = 32 * kEps;

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

struct Case {
  int batch = 1, seq_q = 0, seq_k = 0, heads = 1, kv_heads = 1, head_dim = 0;
  bool causal = false;
  int64_t q_pos0 = 0, k_pos0 = 0;
  std::string name;
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

std::vector<float> random_floats(size_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> x(n);
  for (auto& v : x) v = dist(gen);
  return x;
}

std::vector<double> to_double(const std::vector<float>& x) { return {x.begin(), x.end()}; }

// Relative error max |x - ref| / max |ref|; rows where ref is -inf must be -inf in x as well
// (and count as error 1e30 otherwise). When ref is all zero the absolute error is returned.
double rel_err(const std::vector<float>& x, const std::vector<double>& ref) {
  EXPECT_EQ(x.size(), ref.size());
  double max_ref = 0, max_err = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    if (std::isinf(ref[i])) {
      if (x[i] != ref[i]) max_err = 1e30;
      continue;
    }
    if (!std::isfinite(x[i])) return 1e30;
    max_ref = std::max(max_ref, std::fabs(ref[i]));
    max_err = std::max(max_err, std::fabs(double(x[i]) - ref[i]));
  }
  return max_ref > 0 ? max_err / max_ref : max_err;
}

AttnDims dims_of(const Case& c) {
  return {c.batch, c.seq_q, c.seq_k, c.heads, c.kv_heads, c.head_dim};
}

AttnRefProblem ref_problem(const Case& c) {
  return {dims_of(c), 1.0 / std::sqrt(double(c.head_dim)), c.causal, c.q_pos0, c.k_pos0};
}

// Inputs, kernel outputs and reference outputs of one problem (contiguous tensors).
struct Problem {
  Case c;
  AttnDims d;
  std::vector<float> q, k, v, dout;
  std::vector<float> o, lse, delta, dq, dk, dv;

  explicit Problem(const Case& cs, uint32_t seed = 1) : c(cs), d(dims_of(cs)) {
    const size_t nq = size_t(d.batch) * d.seq_q * d.heads * d.head_dim;
    const size_t nk = size_t(d.batch) * d.seq_k * d.kv_heads * d.head_dim;
    q = random_floats(nq, seed);
    k = random_floats(nk, seed + 1);
    v = random_floats(nk, seed + 2);
    dout = random_floats(nq, seed + 3);
    o.assign(nq, 0);
    dq.assign(nq, 0);
    dk.assign(nk, 0);
    dv.assign(nk, 0);
    lse.assign(size_t(d.batch) * d.heads * d.seq_q, 0);
    delta.assign(lse.size(), 0);
  }
  float scale() const { return 1.0f / std::sqrt(float(d.head_dim)); }
  Strides3 qs() const { return Strides3::contiguous(d.seq_q, d.heads, d.head_dim); }
  Strides3 ks() const { return Strides3::contiguous(d.seq_k, d.kv_heads, d.head_dim); }
  Strides2 ls() const { return Strides2::contiguous(d.heads, d.seq_q); }

  AttnFwdParams fwd_params() {
    AttnFwdParams p;
    p.dims = d;
    p.q = q.data(), p.q_stride = qs();
    p.k = k.data(), p.k_stride = ks();
    p.v = v.data(), p.v_stride = ks();
    p.o = o.data(), p.o_stride = qs();
    p.lse = lse.data(), p.lse_stride = ls();
    p.scale = scale();
    p.causal = c.causal;
    p.q_pos0 = c.q_pos0;
    p.k_pos0 = c.k_pos0;
    return p;
  }
  AttnBwdParams bwd_params() {
    AttnBwdParams p;
    p.dims = d;
    p.q = q.data(), p.q_stride = qs();
    p.k = k.data(), p.k_stride = ks();
    p.v = v.data(), p.v_stride = ks();
    p.dout = dout.data(), p.dout_stride = qs();
    p.lse = lse.data(), p.lse_stride = ls();
    p.delta = delta.data(), p.delta_stride = ls();
    p.dq = dq.data(), p.dq_stride = qs();
    p.dk = dk.data(), p.dk_stride = ks();
    p.dv = dv.data(), p.dv_stride = ks();
    p.scale = scale();
    p.causal = c.causal;
    p.q_pos0 = c.q_pos0;
    p.k_pos0 = c.k_pos0;
    return p;
  }
  void forward() { attn_fwd(fwd_params()); }
  void backward() {
    attn_bwd_preprocess(d, o.data(), qs(), dout.data(), qs(), delta.data(), ls());
    attn_bwd(bwd_params());
  }
};

struct Reference {
  std::vector<double> o, lse, dq, dk, dv;
  explicit Reference(const Problem& pb, bool with_bwd = true) {
    const AttnRefProblem pr = ref_problem(pb.c);
    const auto q = to_double(pb.q), k = to_double(pb.k), v = to_double(pb.v);
    reference::attn_fwd_ref(pr, q, k, v, o, lse);
    if (with_bwd) reference::attn_bwd_ref(pr, q, k, v, to_double(pb.dout), dq, dk, dv);
  }
};

void expect_matches_reference(Problem& pb, const Reference& ref) {
  EXPECT_LE(rel_err(pb.o, ref.o), kTolO) << pb.c.name << " O";
  EXPECT_LE(rel_err(pb.lse, ref.lse), kTolLse) << pb.c.name << " LSE";
  EXPECT_LE(rel_err(pb.dq, ref.dq), kTolGrad) << pb.c.name << " dQ";
  EXPECT_LE(rel_err(pb.dk, ref.dk), kTolGrad) << pb.c.name << " dK";
  EXPECT_LE(rel_err(pb.dv, ref.dv), kTolGrad) << pb.c.name << " dV";
}

class AttnVsReference : public ::testing::TestWithParam<Case> {};

TEST_P(AttnVsReference, ForwardAndBackward) {
  Problem pb(GetParam());
  pb.forward();
  pb.backward();
  expect_matches_reference(pb, Reference(pb));
}

std::vector<Case> reference_cases() {
  std::vector<Case> cs;
  auto add = [&](Case c) { cs.push_back(c); };
  // Awkward sequence lengths (not multiples of any tile), full and causal.
  for (int s : {1, 7, 97, 1000})
    for (bool causal : {false, true})
      add({1, s, s, 1, 1, 16, causal, 0, 0, fmt::format("S{}{}", s, causal ? "_causal" : "")});
  // head_dim 1, 3, 64, 80, 128, 256.
  for (int hd : {1, 3, 80, 128})
    add({2, 33, 41, 2, 2, hd, hd % 2 == 0, 0, 0, fmt::format("D{}", hd)});
  add({1, 20, 300, 1, 1, 256, false, 0, 0, "D256"});
  // Sq != Sk, both ways.
  add({1, 5, 300, 4, 2, 16, false, 0, 0, "Sq5_Sk300"});
  add({1, 300, 5, 4, 2, 16, false, 0, 0, "Sq300_Sk5"});
  // Causal by global position: key block in the past, straddling the diagonal, in the future,
  // and rows fully masked at the start of a block.
  add({1, 70, 90, 2, 1, 32, true, 1000, 100, "keys_in_past"});
  add({1, 130, 130, 2, 1, 32, true, 500, 500, "diagonal"});
  add({1, 70, 90, 2, 1, 32, true, 100, 1000, "keys_in_future"});
  add({1, 70, 300, 2, 1, 32, true, 100, 150, "first_rows_masked"});
  add({1, 300, 70, 2, 1, 32, true, 250, 120, "long_q_short_k"});
  // GQA ratios 1, 2, 8 and MQA.
  add({2, 65, 65, 8, 8, 32, true, 0, 0, "gqa1"});
  add({2, 65, 65, 8, 4, 32, true, 0, 0, "gqa2"});
  add({1, 65, 80, 8, 1, 32, false, 0, 0, "gqa8"});
  add({1, 65, 80, 16, 1, 24, true, 3, 0, "mqa16"});
  return cs;
}

INSTANTIATE_TEST_SUITE_P(Cases, AttnVsReference, ::testing::ValuesIn(reference_cases()),
                         [](const ::testing::TestParamInfo<Case>& i) { return i.param.name; });

// The reference backward against central finite differences of the reference forward, in fp64.
TEST(AttnReference, GradientMatchesFiniteDifferences) {
  Case c{1, 3, 5, 2, 1, 3, true, 2, 0, "fd"};
  Problem pb(c, 7);
  const AttnRefProblem pr = ref_problem(c);
  auto q = to_double(pb.q), k = to_double(pb.k), v = to_double(pb.v);
  const auto dout = to_double(pb.dout);
  std::vector<double> dq, dk, dv;
  reference::attn_bwd_ref(pr, q, k, v, dout, dq, dk, dv);
  auto loss = [&]() {
    std::vector<double> o, lse;
    reference::attn_fwd_ref(pr, q, k, v, o, lse);
    double s = 0;
    for (size_t i = 0; i < o.size(); ++i) s += o[i] * dout[i];
    return s;
  };
  const double h = 1e-6;
  auto check = [&](std::vector<double>& x, const std::vector<double>& g, const char* what) {
    for (size_t i = 0; i < x.size(); ++i) {
      const double x0 = x[i];
      x[i] = x0 + h;
      const double lp = loss();
      x[i] = x0 - h;
      const double lm = loss();
      x[i] = x0;
      EXPECT_NEAR((lp - lm) / (2 * h), g[i], 1e-8) << what << "[" << i << "]";
    }
  };
  check(q, dq, "dq");
  check(k, dk, "dk");
  check(v, dv, "dv");
  // And the fp32 kernel on the same tiny case.
  pb.forward();
  pb.backward();
  expect_matches_reference(pb, Reference(pb));
}

// Keys split into parts, each part run with its global k_pos0: running merge with
// accumulate=true and separate results merged with lse_merge both equal the whole.
TEST(Attn, KeySplitsMergeToWhole) {
  Case c{2, 77, 150, 4, 2, 16, true, 100, 0, "split"};
  Problem whole(c);
  const Reference ref(whole);
  const int cuts[] = {0, 37, 64, 150};
  const auto qs = whole.qs();
  const auto ls = whole.ls();
  std::vector<float> o_acc(whole.o.size()), lse_acc(whole.lse.size());
  std::vector<float> o_m(whole.o.size()), lse_m(whole.lse.size());
  std::vector<float> dq_acc(whole.dq.size(), 0.0f);
  attn_fwd_init_output(whole.d, o_acc.data(), qs, lse_acc.data(), ls);
  attn_fwd_init_output(whole.d, o_m.data(), qs, lse_m.data(), ls);
  for (int part = 0; part < 3; ++part) {
    Case pc = c;
    pc.seq_k = cuts[part + 1] - cuts[part];
    pc.k_pos0 = cuts[part];
    Problem pp(pc);
    const size_t row = size_t(c.kv_heads) * c.head_dim;
    for (int b = 0; b < c.batch; ++b)
      for (int j = 0; j < pc.seq_k; ++j) {
        const size_t src = (size_t(b) * c.seq_k + cuts[part] + j) * row;
        const size_t dst = (size_t(b) * pc.seq_k + j) * row;
        std::copy_n(whole.k.begin() + src, row, pp.k.begin() + dst);
        std::copy_n(whole.v.begin() + src, row, pp.v.begin() + dst);
      }
    pp.q = whole.q;
    pp.dout = whole.dout;
    // Running result.
    AttnFwdParams fp = pp.fwd_params();
    fp.o = o_acc.data();
    fp.lse = lse_acc.data();
    fp.accumulate = true;
    attn_fwd(fp);
    // Separate result, merged afterwards.
    pp.forward();
    lse_merge(whole.d, o_m.data(), qs, lse_m.data(), ls, pp.o.data(), qs, pp.lse.data(), ls);
  }
  EXPECT_LE(rel_err(o_acc, ref.o), kTolO);
  EXPECT_LE(rel_err(lse_acc, ref.lse), kTolLse);
  EXPECT_LE(rel_err(o_m, ref.o), kTolO);
  EXPECT_LE(rel_err(lse_m, ref.lse), kTolLse);

  // Backward by parts with the final LSE: dq accumulates, dk and dv are the parts' rows.
  whole.o = o_acc;
  whole.lse = lse_acc;
  attn_bwd_preprocess(whole.d, whole.o.data(), qs, whole.dout.data(), qs, whole.delta.data(), ls);
  std::vector<float> dk(whole.dk.size()), dv(whole.dv.size());
  for (int part = 0; part < 3; ++part) {
    Case pc = c;
    pc.seq_k = cuts[part + 1] - cuts[part];
    pc.k_pos0 = cuts[part];
    AttnBwdParams bp = whole.bwd_params();
    bp.dims.seq_k = pc.seq_k;
    bp.k_pos0 = pc.k_pos0;
    const int64_t off = int64_t(cuts[part]) * bp.k_stride.seq;
    bp.k = whole.k.data() + off;
    bp.v = whole.v.data() + off;
    bp.dk = dk.data() + off;
    bp.dv = dv.data() + off;
    bp.dq = dq_acc.data();
    bp.accumulate = part > 0;
    attn_bwd(bp);
  }
  EXPECT_LE(rel_err(dq_acc, ref.dq), kTolGrad);
  EXPECT_LE(rel_err(dk, ref.dk), kTolGrad);
  EXPECT_LE(rel_err(dv, ref.dv), kTolGrad);
}

TEST(Attn, BackwardAccumulateAdds) {
  Case c{1, 50, 60, 4, 2, 16, false, 0, 0, "acc"};
  Problem pb(c);
  const Reference ref(pb);
  pb.forward();
  const auto g0q = random_floats(pb.dq.size(), 11), g0k = random_floats(pb.dk.size(), 12),
             g0v = random_floats(pb.dv.size(), 13);
  pb.dq = g0q, pb.dk = g0k, pb.dv = g0v;
  attn_bwd_preprocess(pb.d, pb.o.data(), pb.qs(), pb.dout.data(), pb.qs(), pb.delta.data(),
                      pb.ls());
  AttnBwdParams bp = pb.bwd_params();
  bp.accumulate = true;
  attn_bwd(bp);
  auto added = [](const std::vector<double>& r, const std::vector<float>& g0) {
    std::vector<double> s(r.size());
    for (size_t i = 0; i < r.size(); ++i) s[i] = r[i] + g0[i];
    return s;
  };
  EXPECT_LE(rel_err(pb.dq, added(ref.dq, g0q)), kTolGrad);
  EXPECT_LE(rel_err(pb.dk, added(ref.dk, g0k)), kTolGrad);
  EXPECT_LE(rel_err(pb.dv, added(ref.dv, g0v)), kTolGrad);
}

TEST(Attn, TwoRunsBitIdentical) {
  Case c{2, 300, 280, 4, 2, 40, true, 20, 0, "det"};
  Problem a(c), b(c);
  a.forward();
  a.backward();
  b.forward();
  b.backward();
  auto same = [](const std::vector<float>& x, const std::vector<float>& y) {
    return x.size() == y.size() && std::memcmp(x.data(), y.data(), x.size() * sizeof(float)) == 0;
  };
  EXPECT_TRUE(same(a.o, b.o));
  EXPECT_TRUE(same(a.lse, b.lse));
  EXPECT_TRUE(same(a.dq, b.dq));
  EXPECT_TRUE(same(a.dk, b.dk));
  EXPECT_TRUE(same(a.dv, b.dv));
}

// Sets OMP_NUM_THREADS for the lifetime of the object (wallfacer::num_threads() reads it per call).
class ScopedThreads {
 public:
  explicit ScopedThreads(int n) {
    if (const char* old = std::getenv("OMP_NUM_THREADS")) saved_ = old, had_ = true;
    setenv("OMP_NUM_THREADS", std::to_string(n).c_str(), 1);
  }
  ~ScopedThreads() {
    if (had_)
      setenv("OMP_NUM_THREADS", saved_.c_str(), 1);
    else
      unsetenv("OMP_NUM_THREADS");
  }

 private:
  std::string saved_;
  bool had_ = false;
};

// One (batch, kv head) task and 4 threads: the backward splits the keys into parts with private dQ
// buffers. Still exact, deterministic, and accumulating.
TEST(Attn, BackwardSplitsKeysWhenFewTasks) {
  ScopedThreads threads(4);
  Case c{1, 300, 700, 4, 1, 16, true, 400, 0, "mqa_split"};
  Problem a(c), b(c);
  const Reference ref(a);
  a.forward();
  a.backward();
  expect_matches_reference(a, ref);
  b.forward();
  b.backward();
  EXPECT_EQ(std::memcmp(a.dq.data(), b.dq.data(), a.dq.size() * sizeof(float)), 0);
  EXPECT_EQ(std::memcmp(a.dk.data(), b.dk.data(), a.dk.size() * sizeof(float)), 0);
  // Key tiles of 256 rows: 3 tiles, so 3 parts and 2 private dQ copies of (B, H, Sq, D).
  const AttnTiling t = attn_bwd_tiling(a.d);
  ASSERT_EQ(t.block_k, 256);
  EXPECT_EQ(attn_bwd_workspace_bytes(a.d, 4),
            4 * (4 * 2 * int64_t(t.block_q) * t.block_k + 2 * int64_t(1) * 4 * 300 * 16));
  // accumulate=true adds the split result to what dq, dk, dv held.
  AttnBwdParams bp = b.bwd_params();
  bp.accumulate = true;
  attn_bwd(bp);
  for (size_t x = 0; x < a.dq.size(); ++x) ASSERT_NEAR(b.dq[x], 2 * a.dq[x], 1e-6) << x;
  for (size_t x = 0; x < a.dk.size(); ++x) ASSERT_NEAR(b.dk[x], 2 * a.dk[x], 1e-6) << x;
}

TEST(Attn, FullyMaskedRowsAreZeroAndFinite) {
  // Query rows at positions 0..39 against keys at 20..119: rows 0..19 see nothing;
  // keys beyond position 39 are seen by no query.
  Case c{1, 40, 100, 2, 1, 8, true, 0, 20, "masked"};
  Problem pb(c);
  std::fill(pb.o.begin(), pb.o.end(), 123.0f);  // must be overwritten
  pb.forward();
  pb.backward();
  const int D = c.head_dim;
  for (int h = 0; h < c.heads; ++h)
    for (int i = 0; i < c.seq_q; ++i) {
      const float l = pb.lse[size_t(h) * c.seq_q + i];
      for (int x = 0; x < D; ++x) {
        const size_t at = (size_t(i) * c.heads + h) * D + x;
        ASSERT_TRUE(std::isfinite(pb.o[at]) && std::isfinite(pb.dq[at]));
        if (i < 20) {
          EXPECT_EQ(pb.o[at], 0.0f);
          EXPECT_EQ(pb.dq[at], 0.0f);
        }
      }
      if (i < 20)
        EXPECT_EQ(l, kNegInf);
      else
        EXPECT_TRUE(std::isfinite(l));
    }
  for (size_t x = 0; x < pb.dk.size(); ++x) {
    ASSERT_TRUE(std::isfinite(pb.dk[x]) && std::isfinite(pb.dv[x]));
    if (x / D >= 20) {  // key row 20 and later: position >= 40, unseen
      EXPECT_EQ(pb.dk[x], 0.0f);
      EXPECT_EQ(pb.dv[x], 0.0f);
    }
  }
  expect_matches_reference(pb, Reference(pb));
}

TEST(Attn, KeyBlockEntirelyInFuture) {
  Case c{1, 30, 30, 2, 2, 8, true, 0, 30, "future"};
  Problem pb(c);
  pb.forward();
  pb.backward();
  for (float x : pb.o) EXPECT_EQ(x, 0.0f);
  for (float x : pb.lse) EXPECT_EQ(x, kNegInf);
  for (float x : pb.dq) EXPECT_EQ(x, 0.0f);
  for (float x : pb.dk) EXPECT_EQ(x, 0.0f);
  for (float x : pb.dv) EXPECT_EQ(x, 0.0f);
}

// q, k, v are slices of one packed (B, S, 3, H, D) buffer; o, dq, dk, dv live in padded rows;
// lse and delta have padded (B, H) strides.
TEST(Attn, NonContiguousStrides) {
  Case c{2, 45, 45, 3, 3, 20, true, 0, 0, "strided"};
  Problem pb(c);
  const Reference ref(pb);
  const int B = c.batch, S = c.seq_q, H = c.heads, D = c.head_dim;
  std::vector<float> qkv(size_t(B) * S * 3 * H * D);
  const Strides3 packed{int64_t(S) * 3 * H * D, int64_t(3) * H * D, D};
  for (int b = 0; b < B; ++b)
    for (int s = 0; s < S; ++s)
      for (int h = 0; h < H; ++h)
        for (int x = 0; x < D; ++x) {
          const size_t src = ((size_t(b) * S + s) * H + h) * D + x;
          const size_t dst = b * packed.batch + s * packed.seq + h * packed.head + x;
          qkv[dst] = pb.q[src];
          qkv[dst + H * D] = pb.k[src];
          qkv[dst + 2 * H * D] = pb.v[src];
        }
  const int pad = 5;
  const Strides3 padded{int64_t(S) * (H * D + pad), H * D + pad, D};
  const Strides2 lpad{int64_t(H) * (S + 3), S + 3};
  const size_t big = size_t(B) * padded.batch;
  std::vector<float> o(big, 7.0f), dq(big), dk(big), dv(big), dout(big);
  std::vector<float> lse(size_t(B) * lpad.batch), delta(lse.size());
  for (int b = 0; b < B; ++b)
    for (int s = 0; s < S; ++s)
      for (int h = 0; h < H; ++h)
        for (int x = 0; x < D; ++x)
          dout[b * padded.batch + s * padded.seq + h * padded.head + x] =
              pb.dout[((size_t(b) * S + s) * H + h) * D + x];
  AttnFwdParams fp;
  fp.dims = pb.d;
  fp.q = qkv.data(), fp.q_stride = packed;
  fp.k = qkv.data() + H * D, fp.k_stride = packed;
  fp.v = qkv.data() + 2 * H * D, fp.v_stride = packed;
  fp.o = o.data(), fp.o_stride = padded;
  fp.lse = lse.data(), fp.lse_stride = lpad;
  fp.scale = pb.scale();
  fp.causal = true;
  attn_fwd(fp);
  attn_bwd_preprocess(pb.d, o.data(), padded, dout.data(), padded, delta.data(), lpad);
  AttnBwdParams bp;
  bp.dims = pb.d;
  bp.q = fp.q, bp.q_stride = packed;
  bp.k = fp.k, bp.k_stride = packed;
  bp.v = fp.v, bp.v_stride = packed;
  bp.dout = dout.data(), bp.dout_stride = padded;
  bp.lse = lse.data(), bp.lse_stride = lpad;
  bp.delta = delta.data(), bp.delta_stride = lpad;
  bp.dq = dq.data(), bp.dq_stride = padded;
  bp.dk = dk.data(), bp.dk_stride = padded;
  bp.dv = dv.data(), bp.dv_stride = padded;
  bp.scale = pb.scale();
  bp.causal = true;
  attn_bwd(bp);
  // Gather back into contiguous layout.
  auto gather = [&](const std::vector<float>& x) {
    std::vector<float> y(size_t(B) * S * H * D);
    for (int b = 0; b < B; ++b)
      for (int s = 0; s < S; ++s)
        for (int h = 0; h < H; ++h)
          for (int e = 0; e < D; ++e)
            y[((size_t(b) * S + s) * H + h) * D + e] =
                x[b * padded.batch + s * padded.seq + h * padded.head + e];
    return y;
  };
  std::vector<float> l2(size_t(B) * H * S);
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < H; ++h)
      for (int s = 0; s < S; ++s)
        l2[(size_t(b) * H + h) * S + s] = lse[b * lpad.batch + h * lpad.head + s];
  EXPECT_LE(rel_err(gather(o), ref.o), kTolO);
  EXPECT_LE(rel_err(l2, ref.lse), kTolLse);
  EXPECT_LE(rel_err(gather(dq), ref.dq), kTolGrad);
  EXPECT_LE(rel_err(gather(dk), ref.dk), kTolGrad);
  EXPECT_LE(rel_err(gather(dv), ref.dv), kTolGrad);
  // The padding was left alone.
  for (int b = 0; b < B; ++b)
    for (int s = 0; s < S; ++s)
      for (int x = H * D; x < H * D + pad; ++x)
        EXPECT_EQ(o[b * padded.batch + s * padded.seq + x], 7.0f);
}

TEST(LseMerge, Rows) {
  const int D = 3;
  // Row 0: both -inf -> stays (0, -inf). Row 1: identity on the left. Row 2: equal weights.
  std::vector<float> o = {0, 0, 0, 0, 0, 0, 1, 2, 3};
  std::vector<float> lse = {kNegInf, kNegInf, std::log(2.0f)};
  const std::vector<float> o2 = {5, 5, 5, 4, 5, 6, 3, 2, 1};
  const std::vector<float> lse2 = {kNegInf, 1.5f, std::log(2.0f)};
  lse_merge_rows(3, D, o.data(), D, lse.data(), 1, o2.data(), D, lse2.data(), 1);
  EXPECT_EQ(lse[0], kNegInf);
  for (int x = 0; x < D; ++x) EXPECT_EQ(o[x], 0.0f);
  EXPECT_EQ(lse[1], 1.5f);
  EXPECT_EQ(o[3], 4.0f);
  EXPECT_EQ(o[5], 6.0f);
  EXPECT_NEAR(lse[2], std::log(4.0f), 1e-6);
  for (int x = 0; x < D; ++x) EXPECT_NEAR(o[6 + x], 2.0f, 1e-6);
  // Unequal weights: exp(0) and exp(log 3) -> weights 1/4, 3/4.
  std::vector<float> oa = {4}, la = {0}, ob = {8}, lb = {std::log(3.0f)};
  lse_merge_rows(1, 1, oa.data(), 1, la.data(), 1, ob.data(), 1, lb.data(), 1);
  EXPECT_NEAR(oa[0], 7.0f, 1e-5);
  EXPECT_NEAR(la[0], std::log(4.0f), 1e-6);
}

TEST(Attn, ChecksArguments) {
  Case c{1, 4, 4, 4, 2, 8, false, 0, 0, "args"};
  Problem pb(c);
  AttnFwdParams p = pb.fwd_params();
  p.q = nullptr;
  EXPECT_THROW(attn_fwd(p), Error);
  p = pb.fwd_params();
  p.dims.kv_heads = 3;
  EXPECT_THROW(attn_fwd(p), Error);
  p = pb.fwd_params();
  p.dims.head_dim = 0;
  EXPECT_THROW(attn_fwd(p), Error);
  p = pb.fwd_params();
  p.dims.head_dim = 257;
  EXPECT_THROW(attn_fwd(p), Error);
  p = pb.fwd_params();
  p.dims.batch = 0;
  EXPECT_THROW(attn_fwd(p), Error);
  AttnBwdParams bp = pb.bwd_params();
  bp.delta = nullptr;
  EXPECT_THROW(attn_bwd(bp), Error);
  bp = pb.bwd_params();
  bp.dims.heads = 5;
  EXPECT_THROW(attn_bwd(bp), Error);
}

// Scratch memory does not grow with the sequence: the long-sequence target fits in 1 GiB.
TEST(Attn, WorkspaceIndependentOfSequence) {
  AttnDims small{1, 128, 128, 8, 8, 64}, huge{1, 131072, 131072, 8, 8, 64};
  EXPECT_EQ(attn_fwd_workspace_bytes(small, 2), attn_fwd_workspace_bytes(huge, 2));
  EXPECT_EQ(attn_bwd_workspace_bytes(small, 2), attn_bwd_workspace_bytes(huge, 2));
  const AttnTiling f = attn_fwd_tiling(huge), b = attn_bwd_tiling(huge);
  EXPECT_EQ(attn_fwd_workspace_bytes(huge, 2),
            2 * 4 * (int64_t(f.block_q) * f.block_k + int64_t(f.block_q) * 64 + 2 * f.block_q));
  EXPECT_EQ(attn_bwd_workspace_bytes(huge, 2), 2 * 4 * (2 * int64_t(b.block_q) * b.block_k));
  EXPECT_LT(attn_fwd_workspace_bytes(huge, 2) + attn_bwd_workspace_bytes(huge, 2), int64_t(1)
                                                                                       << 30);
}

// Every instruction-set level this CPU runs (kernels/isa.h), called directly, on every reference
// case.
TEST(Attn, EveryLevelMatchesTheReference) {
  for (const Case& c : reference_cases()) {
    const Reference ref(Problem{c});
    for (const LevelKernels& lk : levels_this_cpu_runs()) {
      SCOPED_TRACE(lk.name());
      Problem pb(c);
      lk.attn_fwd(pb.fwd_params());
      lk.attn_bwd_preprocess(pb.d, pb.o.data(), pb.qs(), pb.dout.data(), pb.qs(), pb.delta.data(),
                             pb.ls());
      lk.attn_bwd(pb.bwd_params());
      expect_matches_reference(pb, ref);
    }
  }
}

}  // namespace
}  // namespace wallfacer::kernels
