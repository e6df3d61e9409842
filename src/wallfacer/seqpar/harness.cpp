#include "wallfacer/seqpar/harness.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "wallfacer/core/bf16.h"
#include "wallfacer/core/error.h"
#include "wallfacer/kernels/attention.h"
#include "wallfacer/kernels/attention_params.h"
#include "wallfacer/kernels/reference/attention_ref.h"

namespace wallfacer::seqpar {
namespace {

uint64_t mix(uint64_t x) {  // splitmix64 finaliser
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

std::vector<int64_t> natural(int64_t seq) {
  std::vector<int64_t> p(size_t(seq), 0);
  std::iota(p.begin(), p.end(), int64_t(0));
  return p;
}

// Scatters gathered rank blocks (P blocks of (B, n, width)) into (B, S, width) by position.
std::vector<float> to_natural_rows(const AttnConfig& cfg, int P, const std::vector<float>& blocks,
                                   int64_t width) {
  const int64_t n = cfg.seq / P, B = cfg.batch;
  std::vector<float> out(size_t(B * cfg.seq * width));
  for (int r = 0; r < P; ++r) {
    const auto pos = local_positions(cfg, P, r);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t i = 0; i < n; ++i)
        std::copy_n(blocks.data() + ((r * B + b) * n + i) * width, width,
                    out.data() + (b * cfg.seq + pos[i]) * width);
  }
  return out;
}

}  // namespace

void fill_inputs(uint64_t seed, InputTensor tensor, const std::vector<int64_t>& positions,
                 int batch, int heads, int head_dim, float* out) {
  const int64_t n = int64_t(positions.size()), row = int64_t(heads) * head_dim;
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t i = 0; i < n; ++i) {
      const uint64_t base = mix(mix(mix(seed) ^ uint64_t(tensor)) ^ uint64_t(b)) ^
                            uint64_t(positions[size_t(i)]) * 0x100000001b3ull;
      for (int64_t e = 0; e < row; ++e) {
        const uint64_t x = mix(base + uint64_t(e));
        out[(b * n + i) * row + e] = float(double(x >> 40) * 0x1.0p-23 - 1.0);
      }
    }
}

AttnTensors make_inputs(const AttnConfig& cfg, uint64_t seed) {
  AttnTensors t;
  const auto pos = natural(cfg.seq);
  const int64_t B = cfg.batch, D = cfg.head_dim;
  t.q.resize(size_t(B * cfg.seq * cfg.heads * D));
  t.dout.resize(t.q.size());
  t.k.resize(size_t(B * cfg.seq * cfg.kv_heads * D));
  t.v.resize(t.k.size());
  fill_inputs(seed, InputTensor::Q, pos, cfg.batch, cfg.heads, cfg.head_dim, t.q.data());
  fill_inputs(seed, InputTensor::K, pos, cfg.batch, cfg.kv_heads, cfg.head_dim, t.k.data());
  fill_inputs(seed, InputTensor::V, pos, cfg.batch, cfg.kv_heads, cfg.head_dim, t.v.data());
  fill_inputs(seed, InputTensor::Dout, pos, cfg.batch, cfg.heads, cfg.head_dim, t.dout.data());
  if (cfg.dtype == Dtype::bf16)
    for (auto* x : {&t.q, &t.k, &t.v, &t.dout}) *x = to_fp32(to_bf16(*x));
  return t;
}

AttnTolerance attn_tolerance(Dtype dtype) {
  if (dtype == Dtype::fp32) return {};
  const double u = 1.0 / 256;
  return {3 * u, u / 2, 3 * u};
}

std::vector<float> gather_rows(comm::Communicator& group, const AttnConfig& cfg, const float* local,
                               int heads) {
  const int P = group.size();
  const int64_t width = int64_t(heads) * cfg.head_dim;
  const int64_t count = cfg.batch * (cfg.seq / P) * width;
  std::vector<float> blocks(size_t(count * P));
  group.all_gather(local, count, blocks.data());
  return to_natural_rows(cfg, P, blocks, width);
}

std::vector<float> gather_stat(comm::Communicator& group, const AttnConfig& cfg, const float* local,
                               int heads) {
  const int P = group.size();
  const int64_t n = cfg.seq / P, B = cfg.batch;
  const int64_t count = B * heads * n;
  std::vector<float> blocks(size_t(count * P));
  group.all_gather(local, count, blocks.data());
  std::vector<float> out(size_t(B * heads * cfg.seq));
  for (int r = 0; r < P; ++r) {
    const auto pos = local_positions(cfg, P, r);
    for (int64_t bh = 0; bh < B * heads; ++bh)
      for (int64_t i = 0; i < n; ++i)
        out[size_t(bh * cfg.seq + pos[size_t(i)])] = blocks[size_t((r * B * heads + bh) * n + i)];
  }
  return out;
}

AttnTensors reference_attention(const AttnConfig& cfg, const AttnTensors& in, bool fp64) {
  WF_CHECK(cfg.seq <= INT32_MAX, "sequence of {} tokens too long for a reference", cfg.seq);
  const int S = int(cfg.seq);
  kernels::AttnDims dims{cfg.batch, S, S, cfg.heads, cfg.kv_heads, cfg.head_dim};
  AttnTensors out;
  if (fp64) {
    kernels::reference::AttnRefProblem pr;
    pr.dims = dims;
    pr.scale = 1.0 / std::sqrt(double(cfg.head_dim));
    pr.causal = cfg.causal;
    auto d = [](const std::vector<float>& x) { return std::vector<double>(x.begin(), x.end()); };
    auto f = [](const std::vector<double>& x) { return std::vector<float>(x.begin(), x.end()); };
    std::vector<double> o, lse, dq, dk, dv;
    const auto q = d(in.q), k = d(in.k), v = d(in.v);
    kernels::reference::attn_fwd_ref(pr, q, k, v, o, lse);
    kernels::reference::attn_bwd_ref(pr, q, k, v, d(in.dout), dq, dk, dv);
    out.o = f(o);
    out.lse = f(lse);
    out.dq = f(dq);
    out.dk = f(dk);
    out.dv = f(dv);
    return out;
  }
  out.o.resize(in.q.size());
  out.lse.resize(size_t(cfg.batch) * cfg.heads * S);
  out.dq.resize(in.q.size());
  out.dk.resize(in.k.size());
  out.dv.resize(in.v.size());
  const auto qs = kernels::Strides3::contiguous(S, cfg.heads, cfg.head_dim);
  const auto ks = kernels::Strides3::contiguous(S, cfg.kv_heads, cfg.head_dim);
  const auto ls = kernels::Strides2::contiguous(cfg.heads, S);
  const float scale = 1.0f / std::sqrt(float(cfg.head_dim));
  kernels::AttnInputs<float> t;
  t.dims = dims;
  t.q = in.q.data();
  t.q_stride = qs;
  t.k = in.k.data();
  t.v = in.v.data();
  t.kv_stride = ks;
  t.stat_stride = ls;
  t.scale = scale;
  t.causal = cfg.causal;
  kernels::attn_fwd(kernels::fwd_params(t, out.o.data(), out.lse.data()));
  std::vector<float> delta(out.lse.size());
  kernels::attn_bwd_preprocess(dims, out.o.data(), qs, in.dout.data(), qs, delta.data(), ls);
  kernels::attn_bwd(kernels::bwd_params(t, {in.dout.data(), out.lse.data(), delta.data(),
                                            out.dq.data(), out.dk.data(), out.dv.data()}));
  return out;
}

namespace {
double rel_err(const std::vector<float>& x, const std::vector<float>& ref) {
  WF_CHECK(x.size() == ref.size(), "comparing {} values with {}", x.size(), ref.size());
  double num = 0, den = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    if (!std::isfinite(ref[i])) {
      if (x[i] != ref[i]) num = INFINITY;
      continue;
    }
    const double e = std::abs(double(x[i]) - double(ref[i]));
    num = std::isnan(e) ? INFINITY : std::max(num, e);
    den = std::max(den, std::abs(double(ref[i])));
  }
  return den > 0 ? num / den : num;
}
}  // namespace

AttnErrors attention_errors(const AttnTensors& got, const AttnTensors& ref) {
  return {rel_err(got.o, ref.o), rel_err(got.lse, ref.lse), rel_err(got.dq, ref.dq),
          rel_err(got.dk, ref.dk), rel_err(got.dv, ref.dv)};
}

}  // namespace wallfacer::seqpar
