// model::LocalAttention, the AttentionOp of single-process tools: one forward and one backward
// whose tensors (model::Act) carry their dtype. Each dtype's call gives bit for bit what the flash
// kernels of that dtype give called directly (kernels/attention.h, kernels/attention_bf16.h), with
// GQA, a causal mask and packed documents; tensors of mixed dtypes are refused.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <type_traits>
#include <vector>

#include "attention_testing.h"
#include "wallfacer/core/bf16.h"
#include "wallfacer/core/error.h"
#include "wallfacer/kernels/attention.h"
#include "wallfacer/kernels/attention_bf16.h"
#include "wallfacer/kernels/doc_mask.h"
#include "wallfacer/model/local_attention.h"

namespace wallfacer {
namespace {

using kernels::AttnDims;
using kernels::Strides2;
using kernels::Strides3;
using kernels::attn_testing::random_floats;
using model::Act;

constexpr int B = 2, T = 24, H = 4, Hkv = 2, D = 8;
constexpr int64_t kNq = int64_t(B) * T * H * D, kNk = int64_t(B) * T * Hkv * D,
                  kNs = int64_t(B) * H * T;

// Element type E: an activation of that type.
template <class E>
Act act(std::vector<E>& x) {
  if constexpr (std::is_same_v<E, bf16>) {
    return {nullptr, x.data()};
  } else {
    return {x.data(), nullptr};
  }
}

template <class E>
std::vector<E> inputs(int64_t n, uint32_t seed) {
  const std::vector<float> x = random_floats(size_t(n), seed);
  if constexpr (std::is_same_v<E, bf16>) {
    return to_bf16(x);
  } else {
    return x;
  }
}

// The tensors of one problem in element type E.
template <class E>
struct Tensors {
  std::vector<E> q = inputs<E>(kNq, 1), k = inputs<E>(kNk, 2), v = inputs<E>(kNk, 3),
                 dout = inputs<E>(kNq, 4), o = std::vector<E>(kNq), dq = std::vector<E>(kNq),
                 dk = std::vector<E>(kNk), dv = std::vector<E>(kNk);
  std::vector<float> lse = std::vector<float>(kNs), delta = std::vector<float>(kNs);
};

// One sequence b of the problem through the kernels of element type E directly.
template <class E>
void direct(Tensors<E>& t, int b, const std::vector<int32_t>& docs) {
  const AttnDims d{1, T, T, H, Hkv, D};
  const Strides3 qs = Strides3::contiguous(T, H, D), ks = Strides3::contiguous(T, Hkv, D);
  const Strides2 ls = Strides2::contiguous(H, T);
  const int64_t qo = int64_t(b) * T * H * D, ko = int64_t(b) * T * Hkv * D, so = int64_t(b) * H * T;
  kernels::AttnFwdParamsOf<E> f;
  kernels::AttnBwdParamsOf<E> g;
  for (kernels::AttnArgs<E>* a :
       {static_cast<kernels::AttnArgs<E>*>(&f), static_cast<kernels::AttnArgs<E>*>(&g)}) {
    a->dims = d;
    a->q = t.q.data() + qo, a->q_stride = qs;
    a->k = t.k.data() + ko, a->k_stride = ks;
    a->v = t.v.data() + ko, a->v_stride = ks;
    a->scale = 1.0f / std::sqrt(float(D));
    a->causal = true;
    a->doc_of_pos = docs.data();
  }
  f.lse = t.lse.data() + so, f.lse_stride = ls;
  g.lse = t.lse.data() + so, g.lse_stride = ls;
  g.dout = t.dout.data() + qo, g.dout_stride = qs;
  g.delta = t.delta.data() + so, g.delta_stride = ls;
  f.o_stride = g.dq_stride = qs;
  g.dk_stride = g.dv_stride = ks;
  if constexpr (std::is_same_v<E, bf16>) {
    f.o.bf16_data = t.o.data() + qo;
    kernels::attn_fwd_bf16(f);
    kernels::attn_bwd_preprocess_bf16(d, t.o.data() + qo, qs, g.dout, qs, t.delta.data() + so, ls);
    g.dq.bf16_data = t.dq.data() + qo;
    g.dk.bf16_data = t.dk.data() + ko;
    g.dv.bf16_data = t.dv.data() + ko;
    kernels::attn_bwd_bf16(g);
  } else {
    f.o = t.o.data() + qo;
    kernels::attn_fwd(f);
    kernels::attn_bwd_preprocess(d, t.o.data() + qo, qs, g.dout, qs, t.delta.data() + so, ls);
    g.dq = t.dq.data() + qo;
    g.dk = t.dk.data() + ko;
    g.dv = t.dv.data() + ko;
    kernels::attn_bwd(g);
  }
}

template <class E>
bool same_bytes(const std::vector<E>& a, const std::vector<E>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(E)) == 0;
}

template <class E>
void expect_same_as_kernels() {
  const std::vector<std::vector<int64_t>> lengths{{10, 14}, {5, 7, 12}};
  model::LocalAttention attn(B, T, H, Hkv, D, true);
  attn.set_documents(lengths);
  Tensors<E> a, want;
  attn.forward(act(a.q), act(a.k), act(a.v), act(a.o), a.lse.data());
  attn.backward(act(a.q), act(a.k), act(a.v), act(a.o), a.lse.data(), act(a.dout), act(a.dq),
                act(a.dk), act(a.dv));
  for (int b = 0; b < B; ++b)
    direct(want, b, kernels::doc_of_pos(kernels::doc_bounds_from_lengths(lengths[size_t(b)], T)));
  EXPECT_TRUE(same_bytes(a.o, want.o));
  EXPECT_TRUE(same_bytes(a.lse, want.lse));
  EXPECT_TRUE(same_bytes(a.dq, want.dq));
  EXPECT_TRUE(same_bytes(a.dk, want.dk));
  EXPECT_TRUE(same_bytes(a.dv, want.dv));
  // Not all zero: the calls did run.
  EXPECT_FALSE(same_bytes(a.dq, std::vector<E>(a.dq.size())));
}

TEST(LocalAttention, Fp32ActsRunTheFp32Kernels) { expect_same_as_kernels<float>(); }

TEST(LocalAttention, Bf16ActsRunTheBf16Kernels) { expect_same_as_kernels<bf16>(); }

TEST(LocalAttention, RefusesMixedDtypes) {
  model::LocalAttention attn(B, T, H, Hkv, D, true);
  Tensors<float> f;
  Tensors<bf16> h;
  EXPECT_THROW(attn.forward(act(h.q), act(f.k), act(f.v), act(f.o), f.lse.data()), Error);
  EXPECT_THROW(attn.forward(act(f.q), act(f.k), act(f.v), act(h.o), f.lse.data()), Error);
  EXPECT_THROW(attn.backward(act(f.q), act(f.k), act(f.v), act(f.o), f.lse.data(), act(f.dout),
                             act(f.dq), act(h.dk), act(f.dv)),
               Error);
}

}  // namespace
}  // namespace wallfacer
