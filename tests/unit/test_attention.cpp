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

#include "attention_testing.h"
#include "isa_levels.h"
#include "wallfacer/core/error.h"
#include "wallfacer/kernels/attention.h"
#include "wallfacer/kernels/doc_mask.h"
#include "wallfacer/kernels/reference/attention_ref.h"

namespace wallfacer::kernels {
namespace {

using attn_testing::Case;
using attn_testing::dims_of;
using attn_testing::random_floats;
using attn_testing::ref_problem;
using attn_testing::rel_err;
using attn_testing::to_double;
using reference::AttnRefProblem;

// Tolerances relative to the largest reference magnitude of each quantity (docs/numerics.md).
constexpr double kEps = 1.1920928955078125e-7;  // fp32 machine epsilon
constexpr double kTolO = 32 * kEps;
constexpr double kTolLse = 8 * kEps;
constexpr double kTolGrad = 32 * kEps;

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Inputs, kernel outputs and reference outputs of one problem (contiguous tensors).
struct Problem : attn_testing::ProblemShape {
  std::vector<float> q, k, v, dout;
  std::vector<float> o, lse, delta, dq, dk, dv;

  explicit Problem(const Case& cs, uint32_t seed = 1) : ProblemShape(cs) {
    q = random_floats(nq(), seed);
    k = random_floats(nk(), seed + 1);
    v = random_floats(nk(), seed + 2);
    dout = random_floats(nq(), seed + 3);
    o.assign(nq(), 0);
    dq.assign(nq(), 0);
    dk.assign(nk(), 0);
    dv.assign(nk(), 0);
    lse.assign(size_t(d.batch) * d.heads * d.seq_q, 0);
    delta.assign(lse.size(), 0);
  }

  static float* out(std::vector<float>& x) { return x.data(); }
  AttnFwdParams fwd_params() { return attn_testing::fwd_params_of<float>(*this, out); }
  AttnBwdParams bwd_params() { return attn_testing::bwd_params_of<float>(*this, out); }
  void forward() { attn_fwd(fwd_params()); }
  void backward() {
    attn_bwd_preprocess(d, o.data(), qs(), dout.data(), qs(), delta.data(), ls());
    attn_bwd(bwd_params());
  }
};

struct Reference : attn_testing::ReferenceOutputs {
  explicit Reference(const Problem& pb, bool with_bwd = true)
      : ReferenceOutputs(pb, to_double(pb.q), to_double(pb.k), to_double(pb.v),
                         with_bwd ? to_double(pb.dout) : std::vector<double>{}) {}
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

// Sequence lengths that are not multiples of any tile; head_dim 1, 3, 80, 128 (and 256).
std::vector<Case> reference_cases() {
  return attn_testing::reference_cases({1, 7, 97, 1000}, 1, 16, {1, 3, 48, 80, 128});
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
  EXPECT_LE(rel_err(pb.dq, attn_testing::plus(ref.dq, g0q)), kTolGrad);
  EXPECT_LE(rel_err(pb.dk, attn_testing::plus(ref.dk, g0k)), kTolGrad);
  EXPECT_LE(rel_err(pb.dv, attn_testing::plus(ref.dv, g0v)), kTolGrad);
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

// One (batch, kv head) task and 4 threads: the backward splits the keys into parts with private dQ
// buffers. Still exact, deterministic, and accumulating.
TEST(Attn, BackwardSplitsKeysWhenFewTasks) {
  attn_testing::ScopedEnv threads("OMP_NUM_THREADS", "4");
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

// Every row sees no key: O = 0, LSE = -inf and zero gradients.
void expect_all_masked(const Problem& pb) {
  for (float x : pb.o) ASSERT_EQ(x, 0.0f);
  for (float x : pb.lse) ASSERT_EQ(x, kNegInf);
  for (float x : pb.dq) ASSERT_EQ(x, 0.0f);
  for (float x : pb.dk) ASSERT_EQ(x, 0.0f);
  for (float x : pb.dv) ASSERT_EQ(x, 0.0f);
}

TEST(Attn, KeyBlockEntirelyInFuture) {
  Case c{1, 30, 30, 2, 2, 8, true, 0, 30, "future"};
  Problem pb(c);
  pb.forward();
  pb.backward();
  expect_all_masked(pb);
}

// q, k, v, dout, the outputs, lse and delta in the strided layout of attn_testing::StridedLayout.
TEST(Attn, NonContiguousStrides) {
  Case c{2, 45, 45, 3, 3, 20, true, 0, 0, "strided"};
  Problem pb(c);
  const Reference ref(pb);
  attn_testing::StridedLayout<float> lay(pb);
  std::vector<float> o(lay.padded_size(), 7.0f), dq(o.size()), dk(o.size()), dv(o.size());
  AttnFwdParams fp;
  lay.set_inputs(fp, pb.d, pb.scale(), true);
  fp.o = o.data(), fp.o_stride = lay.padded;
  attn_fwd(fp);
  attn_bwd_preprocess(pb.d, o.data(), lay.padded, lay.dout.data(), lay.padded, lay.delta.data(),
                      lay.lpad);
  AttnBwdParams bp;
  lay.set_inputs(bp, pb.d, pb.scale(), true);
  bp.dq = dq.data(), bp.dq_stride = lay.padded;
  bp.dk = dk.data(), bp.dk_stride = lay.padded;
  bp.dv = dv.data(), bp.dv_stride = lay.padded;
  attn_bwd(bp);
  EXPECT_LE(rel_err(lay.gather(o), ref.o), kTolO);
  EXPECT_LE(rel_err(lay.gather_lse(), ref.lse), kTolLse);
  EXPECT_LE(rel_err(lay.gather(dq), ref.dq), kTolGrad);
  EXPECT_LE(rel_err(lay.gather(dk), ref.dk), kTolGrad);
  EXPECT_LE(rel_err(lay.gather(dv), ref.dv), kTolGrad);
  EXPECT_TRUE(lay.padding_is(o, 7.0f));
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
// O(tile) per thread, independent of the sequence, as the formula of the tiled path says; the
// forward's avx512 path (head dim a multiple of 16) instead adds K^T of the call, whole tiles of
// 256 keys, to its own per-thread arrays. A head dim of 24 always takes the tiled path.
TEST(Attn, WorkspaceIndependentOfSequence) {
  AttnDims small{1, 128, 128, 8, 8, 64}, huge{1, 131072, 131072, 8, 8, 64};
  EXPECT_EQ(attn_bwd_workspace_bytes(small, 2), attn_bwd_workspace_bytes(huge, 2));
  const AttnTiling f = attn_fwd_tiling(huge), b = attn_bwd_tiling(huge);
  EXPECT_EQ(attn_bwd_workspace_bytes(huge, 2), 2 * 4 * (2 * int64_t(b.block_q) * b.block_k));
  const int64_t kt_grow = int64_t(131072 - 256) * 8 * 64 * 4;  // K^T of 512 tiles against 1
  const int64_t grow = attn_fwd_workspace_bytes(huge, 2) - attn_fwd_workspace_bytes(small, 2);
  EXPECT_TRUE(grow == 0 || grow == kt_grow) << grow;
  if (grow == 0) {
    EXPECT_EQ(attn_fwd_workspace_bytes(huge, 2),
              2 * 4 * (int64_t(f.block_q) * f.block_k + int64_t(f.block_q) * 64 + 2 * f.block_q));
  }
  AttnDims odd_small{1, 128, 128, 8, 8, 24}, odd_huge{1, 131072, 131072, 8, 8, 24};
  EXPECT_EQ(attn_fwd_workspace_bytes(odd_small, 2), attn_fwd_workspace_bytes(odd_huge, 2));
  EXPECT_EQ(attn_fwd_workspace_bytes(odd_huge, 2),
            2 * 4 * (int64_t(f.block_q) * f.block_k + int64_t(f.block_q) * 24 + 2 * f.block_q));
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

// Packed documents (AttnFwdParams::doc_of_pos).
using attn_testing::DocCase;

// With documents of the given lengths (none when empty).
Problem doc_problem(const Case& c, const std::vector<int64_t>& lengths) {
  Problem pb(c);
  if (!lengths.empty()) pb.doc_ids = attn_testing::doc_ids_of(c, lengths);
  return pb;
}
Problem doc_problem(const DocCase& dc) { return doc_problem(dc.c, dc.lengths); }

// The document cases put boundaries on the tile borders of these kernels: 128 x 256 forward and
// backward.
std::vector<DocCase> doc_cases() {
  const AttnTiling fwd = attn_fwd_tiling({}), bwd = attn_bwd_tiling({});
  EXPECT_EQ(fwd.block_q, 128);
  EXPECT_EQ(fwd.block_k, 256);
  EXPECT_EQ(bwd.block_q, 128);
  EXPECT_EQ(bwd.block_k, 256);
  return attn_testing::doc_cases();
}

class AttnDocsVsReference : public ::testing::TestWithParam<DocCase> {};

TEST_P(AttnDocsVsReference, ForwardAndBackward) {
  Problem pb = doc_problem(GetParam());
  pb.forward();
  pb.backward();
  expect_matches_reference(pb, Reference(pb));
}

INSTANTIATE_TEST_SUITE_P(Cases, AttnDocsVsReference, ::testing::ValuesIn(doc_cases()),
                         [](const ::testing::TestParamInfo<DocCase>& i) { return i.param.c.name; });

// Every instruction-set level, on every document case and every window case.
TEST(AttnDocs, EveryLevelMatchesTheReference) {
  std::vector<DocCase> cases = doc_cases();
  for (const DocCase& dc : attn_testing::window_cases()) cases.push_back(dc);
  for (const DocCase& dc : cases) {
    SCOPED_TRACE(dc.c.name);
    const Reference ref(doc_problem(dc));
    for (const LevelKernels& lk : levels_this_cpu_runs()) {
      SCOPED_TRACE(lk.name());
      Problem pb = doc_problem(dc);
      lk.attn_fwd(pb.fwd_params());
      lk.attn_bwd_preprocess(pb.d, pb.o.data(), pb.qs(), pb.dout.data(), pb.qs(), pb.delta.data(),
                             pb.ls());
      lk.attn_bwd(pb.bwd_params());
      expect_matches_reference(pb, ref);
    }
  }
}

// Keys entirely in other documents: O = 0, LSE = -inf, zero gradients, as documented.
TEST(AttnDocs, KeysInOtherDocumentsGiveEmptyRows) {
  for (bool causal : {false, true}) {
    Problem pb = doc_problem(Case{1, 200, 300, 4, 2, 16, causal, 500, 0, "other"}, {400, 300});
    std::fill(pb.o.begin(), pb.o.end(), 123.0f);  // must be overwritten
    pb.forward();
    pb.backward();
    expect_all_masked(pb);
  }
}

// A tile pair with no document in common is skipped: keys and values of another document that hold
// NaN never reach the rows of the first document (a masked element inside a computed tile would,
// through 0 * NaN).
TEST(AttnDocs, TilesOfOtherDocumentsAreSkipped) {
  for (bool causal : {false, true}) {
    Problem pb = doc_problem(Case{1, 1024, 1024, 2, 1, 16, causal, 0, 0, "skip"}, {512, 512});
    Problem clean = doc_problem(Case{1, 512, 512, 2, 1, 16, causal, 0, 0, "first"}, {512});
    const int row = 1 * 16;  // floats per row of k, v (Hkv = 1, D = 16)
    // The first document's inputs are the clean problem's; the second's keys and values are NaN.
    for (size_t x = 0; x < clean.k.size(); ++x) pb.k[x] = clean.k[x], pb.v[x] = clean.v[x];
    for (size_t x = 0; x < clean.q.size(); ++x) pb.q[x] = clean.q[x], pb.dout[x] = clean.dout[x];
    std::fill(pb.k.begin() + 512 * row, pb.k.end(), std::numeric_limits<float>::quiet_NaN());
    std::fill(pb.v.begin() + 512 * row, pb.v.end(), std::numeric_limits<float>::quiet_NaN());
    pb.forward();
    pb.backward();
    const Reference ref(clean);
    const size_t nq = clean.q.size();
    EXPECT_LE(rel_err({pb.o.begin(), pb.o.begin() + nq}, ref.o), kTolO);
    EXPECT_LE(rel_err({pb.dq.begin(), pb.dq.begin() + nq}, ref.dq), kTolGrad);
    EXPECT_LE(rel_err({pb.dk.begin(), pb.dk.begin() + 512 * row}, ref.dk), kTolGrad);
    EXPECT_LE(rel_err({pb.dv.begin(), pb.dv.begin() + 512 * row}, ref.dv), kTolGrad);
    for (int h = 0; h < 2; ++h)
      for (int i = 0; i < 512; ++i)
        ASSERT_NEAR(pb.lse[h * 1024 + i], ref.lse[h * 512 + i], kTolLse * 10) << h << " " << i;
  }
}

// With one document spanning everything, the results are bit-identical to the call without
// documents (the pinned path).
TEST(AttnDocs, OneDocumentIsBitIdenticalToNoDocuments) {
  for (bool causal : {false, true}) {
    const Case c{1, 700, 700, 4, 2, 32, causal, 0, 0, "one"};
    Problem with = doc_problem(c, {700});
    Problem without(c);
    for (Problem* pb : {&with, &without}) {
      pb->forward();
      pb->backward();
    }
    EXPECT_EQ(with.o, without.o);
    EXPECT_EQ(with.lse, without.lse);
    EXPECT_EQ(with.dq, without.dq);
    EXPECT_EQ(with.dk, without.dk);
    EXPECT_EQ(with.dv, without.dv);
  }
}

TEST(AttnDocs, ChecksArguments) {
  Problem pb = doc_problem(Case{1, 50, 50, 2, 1, 8, true, 0, 0, "bad"}, {20, 30});
  AttnFwdParams p = pb.fwd_params();
  p.q_pos0 = -1;
  EXPECT_THROW(attn_fwd(p), Error);
  std::swap(pb.doc_ids[5], pb.doc_ids[25]);  // ids 0, 1, 0: they go down after position 5
  EXPECT_THROW(attn_bwd(pb.bwd_params()), Error);
  try {
    pb.forward();
    ADD_FAILURE() << "ids that go down were accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("non-decreasing"), std::string::npos) << e.what();
  }
}

// Sliding windows (AttnFwdParams::window) against the reference with the same window.
using attn_testing::window_cases;

class AttnWindowVsReference : public ::testing::TestWithParam<DocCase> {};

TEST_P(AttnWindowVsReference, ForwardAndBackward) {
  Problem pb = doc_problem(GetParam());
  pb.forward();
  pb.backward();
  expect_matches_reference(pb, Reference(pb));
}

INSTANTIATE_TEST_SUITE_P(Cases, AttnWindowVsReference, ::testing::ValuesIn(window_cases()),
                         [](const ::testing::TestParamInfo<DocCase>& i) { return i.param.c.name; });

// A window as long as the sequence is the causal mask: the same bits.
TEST(AttnWindow, WindowOfTheSequenceIsBitIdenticalToCausal) {
  const Case c{1, 700, 700, 4, 2, 32, true, 0, 0, "causal"};
  for (int64_t w : {700, 701, 1 << 20}) {
    Problem with(c), without(c);
    with.c.window = w;
    for (Problem* pb : {&with, &without}) {
      pb->forward();
      pb->backward();
    }
    EXPECT_EQ(with.o, without.o) << w;
    EXPECT_EQ(with.lse, without.lse) << w;
    EXPECT_EQ(with.dq, without.dq) << w;
    EXPECT_EQ(with.dk, without.dk) << w;
    EXPECT_EQ(with.dv, without.dv) << w;
  }
}

// Tiles wholly outside every window are skipped: keys and values older than the window of every
// query that hold NaN never reach a result (a masked element inside a computed tile would, through
// 0 * NaN), and their gradients stay zero.
TEST(AttnWindow, TilesOutsideTheWindowAreSkipped) {
  const int S = 1024, W = 256, row = 16;  // Hkv = 1, D = 16
  Problem pb(Case{1, S, S, 2, 1, 16, true, 0, 0, "skip", W});
  const Reference ref(pb);
  // Query tile [512, 640) sees keys from 257; key tile [0, 256) is older than every window of
  // queries >= 512. Poison keys 0..255 and look at queries 512..: their results must be exact.
  std::fill(pb.k.begin(), pb.k.begin() + 256 * row, std::numeric_limits<float>::quiet_NaN());
  std::fill(pb.v.begin(), pb.v.begin() + 256 * row, std::numeric_limits<float>::quiet_NaN());
  pb.forward();
  for (int h = 0; h < 2; ++h)
    for (int i = 512; i < S; ++i) {
      ASSERT_NEAR(pb.lse[h * S + i], ref.lse[h * S + i], kTolLse * 10) << h << " " << i;
      for (int e = 0; e < 16; ++e) {
        const size_t x = (size_t(i) * 2 + h) * 16 + e;
        ASSERT_NEAR(pb.o[x], ref.o[x], 1e-5) << h << " " << i << " " << e;
      }
    }
}

TEST(AttnWindow, ChecksArguments) {
  Problem pb(Case{1, 50, 50, 2, 1, 8, true, 0, 0, "bad", 10});
  pb.c.window = -1;
  try {
    pb.forward();
    ADD_FAILURE() << "a negative window was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(">= 0"), std::string::npos) << e.what();
  }
  pb.c.window = 10;
  pb.c.causal = false;
  EXPECT_THROW(pb.forward(), Error);
  EXPECT_THROW(attn_bwd(pb.bwd_params()), Error);
}

// One query row (a decode step's attention over a KV cache) takes its own path in the forward:
// against the fp64 reference with thousands of keys (several parts of the key run), GQA and MQA,
// batches, the causal mask cutting the keys or hiding all of them, a window, documents, at every
// instruction-set level; and accumulated over key splits as a sharded cache merges them.
std::vector<DocCase> one_row_cases() {
  std::vector<DocCase> cs;
  auto add = [&](Case c, int64_t window = 0, std::vector<int64_t> lengths = {}) {
    c.window = window;
    cs.push_back({c, std::move(lengths)});
  };
  add({1, 1, 5000, 8, 2, 64, true, 4999, 0, "decode_gqa4"});
  add({2, 1, 4100, 4, 4, 32, false, 0, 0, "full_batch2"});
  add({1, 1, 3000, 8, 1, 16, true, 1700, 0, "causal_cuts_keys"});
  add({1, 1, 3000, 6, 3, 80, true, 2999, 0, "window"}, 1000);
  add({1, 1, 300, 4, 2, 32, true, 10, 100, "keys_in_future"});
  add({1, 1, 2500, 16, 1, 64, true, 2600, 100, "mqa_offset"});
  add({1, 1, 4600, 4, 2, 32, true, 4599, 0, "documents"}, 0, {1000, 2500, 1100});
  add({1, 1, 4600, 4, 2, 32, true, 4599, 0, "documents_window"}, 3000, {1000, 3600});
  return cs;
}

TEST(AttnOneRow, ForwardMatchesTheReference) {
  for (const DocCase& dc : one_row_cases()) {
    SCOPED_TRACE(dc.c.name);
    Problem pb = doc_problem(dc);
    pb.forward();
    const Reference ref(pb, false);
    EXPECT_LE(rel_err(pb.o, ref.o), kTolO) << "O";
    EXPECT_LE(rel_err(pb.lse, ref.lse), kTolLse) << "LSE";
    for (const LevelKernels& lk : levels_this_cpu_runs()) {
      SCOPED_TRACE(lk.name());
      Problem pl = doc_problem(dc);
      lk.attn_fwd(pl.fwd_params());
      EXPECT_LE(rel_err(pl.o, ref.o), kTolO) << "O";
      EXPECT_LE(rel_err(pl.lse, ref.lse), kTolLse) << "LSE";
    }
  }
}

TEST(AttnOneRow, KeySplitsAccumulateToWholeAndThreadsGiveTheSameBits) {
  const Case c{1, 1, 6000, 8, 2, 64, true, 5999, 0, "split"};
  Problem whole(c);
  const Reference ref(whole, false);
  std::vector<float> o(whole.o.size()), lse(whole.lse.size());
  attn_fwd_init_output(whole.d, o.data(), whole.qs(), lse.data(), whole.ls());
  const int cuts[] = {0, 100, 2500, 6000};
  for (int part = 0; part < 3; ++part) {
    AttnFwdParams p = whole.fwd_params();
    p.dims.seq_k = cuts[part + 1] - cuts[part];
    p.k_pos0 = cuts[part];
    p.k = whole.k.data() + int64_t(cuts[part]) * p.k_stride.seq;
    p.v = whole.v.data() + int64_t(cuts[part]) * p.v_stride.seq;
    p.o = o.data();
    p.lse = lse.data();
    p.accumulate = true;
    attn_fwd(p);
  }
  EXPECT_LE(rel_err(o, ref.o), kTolO);
  EXPECT_LE(rel_err(lse, ref.lse), kTolLse);
  // The parts are fixed by the keys, not the threads: one thread gives the bits of several.
  Problem one(c);
  {
    const attn_testing::ScopedEnv threads("OMP_NUM_THREADS", "3");
    whole.forward();
  }
  {
    const attn_testing::ScopedEnv threads("OMP_NUM_THREADS", "1");
    one.forward();
  }
  EXPECT_EQ(one.o, whole.o);
  EXPECT_EQ(one.lse, whole.lse);
}

}  // namespace
}  // namespace wallfacer::kernels
