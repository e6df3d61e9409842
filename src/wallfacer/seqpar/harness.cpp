#include "wallfacer/seqpar/harness.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "wallfacer/core/bf16.h"
#include "wallfacer/core/error.h"
#include "wallfacer/core/stats.h"
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

std::vector<float> local_rows(const std::vector<float>& full, const AttnConfig& c, int P, int rank,
                              int heads) {
  const auto pos = local_positions(c, P, rank);
  const int64_t n = int64_t(pos.size()), w = int64_t(heads) * c.head_dim;
  std::vector<float> out(size_t(c.batch * n * w));
  for (int64_t b = 0; b < c.batch; ++b)
    for (int64_t i = 0; i < n; ++i)
      std::copy_n(full.data() + (b * c.seq + pos[size_t(i)]) * w, w, out.data() + (b * n + i) * w);
  return out;
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
  const std::vector<int32_t> doc_of_pos =
      cfg.doc_lengths.empty() ? std::vector<int32_t>{} : kernels::doc_of_pos(doc_bounds(cfg));
  const int32_t* docs = doc_of_pos.empty() ? nullptr : doc_of_pos.data();
  if (fp64) {
    kernels::reference::AttnRefProblem pr;
    pr.dims = dims;
    pr.scale = 1.0 / std::sqrt(double(cfg.head_dim));
    pr.causal = cfg.causal;
    pr.doc_of_pos = docs;
    pr.window = cfg.window;
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
  t.doc_of_pos = docs;
  t.window = cfg.window;
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

AttnTensors gather_outputs(comm::Communicator& group, const AttnConfig& cfg, const float* o,
                           const float* lse, const float* dq, const float* dk, const float* dv) {
  AttnTensors got;
  got.o = gather_rows(group, cfg, o, cfg.heads);
  got.lse = gather_stat(group, cfg, lse, cfg.heads);
  got.dq = gather_rows(group, cfg, dq, cfg.heads);
  got.dk = gather_rows(group, cfg, dk, cfg.kv_heads);
  got.dv = gather_rows(group, cfg, dv, cfg.kv_heads);
  return got;
}

double work_imbalance(const std::vector<double>& work) {
  double sum = 0, mx = 0;
  for (double w : work) sum += w, mx = std::max(mx, w);
  return sum > 0 ? mx / (sum / double(work.size())) : 1.0;
}

ScheduleSummary summarize_schedules(const AttnConfig& cfg, int P) {
  validate(cfg, P);
  ScheduleSummary out;
  auto& w = out.worst;
  for (int r = 0; r < P; ++r) {
    const auto t = schedule_totals(make_schedule(cfg, P, r));
    for (auto m : {&ScheduleTotals::p2p_bytes_fwd, &ScheduleTotals::p2p_bytes_bwd,
                   &ScheduleTotals::coll_bytes_fwd, &ScheduleTotals::coll_bytes_bwd,
                   &ScheduleTotals::p2p_steps_fwd, &ScheduleTotals::p2p_steps_bwd,
                   &ScheduleTotals::p2p_sends_fwd, &ScheduleTotals::p2p_sends_bwd})
      w.*m = std::max(w.*m, t.*m);
    w.flops_fwd = std::max(w.flops_fwd, t.flops_fwd);
    w.flops_bwd = std::max(w.flops_bwd, t.flops_bwd);
    out.flops_fwd.push_back(t.flops_fwd);
  }
  out.work_imbalance = work_imbalance(out.flops_fwd);
  return out;
}

int64_t schedule_ops(const AttnConfig& cfg, int P, int rank) {
  const Schedule s = make_schedule(cfg, P, rank);
  return int64_t(s.fwd.size() + s.bwd.size());
}

RunSummary summarize_run(comm::Communicator& group, const std::vector<AttnStats>& iterations) {
  WF_CHECK(!iterations.empty(), "no iterations to summarize");
  const int P = group.size(), me = group.rank();
  const AttnStats& last = iterations.back();
  std::vector<double> fwd, bwd, efwd, ebwd, both;
  for (const auto& it : iterations) {
    fwd.push_back(it.fwd_ms);
    bwd.push_back(it.bwd_ms);
    both.push_back(it.fwd_ms + it.bwd_ms);
    efwd.push_back(it.exposed_comm_fwd_ms);
    ebwd.push_back(it.exposed_comm_bwd_ms);
  }
  // Every rank's figures, on every rank: row f of the table is field f.
  const std::vector<double> mine = {double(last.p2p_bytes_fwd),
                                    double(last.p2p_bytes_bwd),
                                    double(last.coll_bytes_fwd),
                                    double(last.coll_bytes_bwd),
                                    double(last.p2p_steps_fwd),
                                    double(last.p2p_steps_bwd),
                                    median(fwd),
                                    median(bwd),
                                    median(efwd),
                                    median(ebwd),
                                    last.attn_flops,
                                    double(last.coll_formula_bytes_fwd),
                                    double(last.coll_formula_bytes_bwd),
                                    median(both)};
  const size_t F = mine.size();
  std::vector<double> all(F * size_t(P), 0.0);
  for (size_t f = 0; f < F; ++f) all[f * size_t(P) + size_t(me)] = mine[f];
  group.all_reduce_sum(all.data(), int64_t(all.size()));
  auto row = [&](size_t f) {
    return std::vector<double>(all.begin() + long(f * P), all.begin() + long((f + 1) * P));
  };
  auto mx = [&](size_t f) {
    const auto r = row(f);
    return *std::max_element(r.begin(), r.end());
  };
  RunSummary s;
  s.p2p_bytes_fwd = int64_t(mx(0));
  s.p2p_bytes_bwd = int64_t(mx(1));
  s.coll_bytes_fwd = int64_t(mx(2));
  s.coll_bytes_bwd = int64_t(mx(3));
  s.coll_formula_bytes_fwd = int64_t(mx(11));
  s.coll_formula_bytes_bwd = int64_t(mx(12));
  s.p2p_steps_fwd = int64_t(mx(4));
  s.p2p_steps_bwd = int64_t(mx(5));
  s.fwd_ms = mx(6);
  s.bwd_ms = mx(7);
  s.exposed_fwd_ms = mx(8);
  s.exposed_bwd_ms = mx(9);
  s.iteration_ms = mx(13);
  const auto flops = row(10);
  s.work_imbalance = work_imbalance(flops);
  for (double f : flops) s.flops_fwd += f;
  return s;
}

}  // namespace wallfacer::seqpar
