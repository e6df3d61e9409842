#include "wallfacer/seqpar/attention.h"

#include <cstring>
#include <utility>

#include "wallfacer/core/error.h"
#include "wallfacer/seqpar/executor.h"
#include "wallfacer/seqpar/schedule.h"

namespace wallfacer::seqpar {
namespace {

// u blocks, block i at `stride` * i, each of m groups of n rows of w floats (rows `pitch` floats
// apart), against the (m, u*n, w) tensor whose rows [i*n, (i+1)*n) of every group are block i.
struct Blocks {
  int u = 1;
  int64_t stride = 0, m = 0, n = 0, w = 0, pitch = 0;
};

template <class F>
void each_row(const Blocks& g, F&& f) {
  for (int i = 0; i < g.u; ++i)
    for (int64_t mm = 0; mm < g.m; ++mm)
      for (int64_t r = 0; r < g.n; ++r)
        f(i * g.stride + (mm * g.n + r) * g.pitch, ((mm * g.u + i) * g.n + r) * g.w);
}

void blocks_to_rows(const Blocks& g, const float* blocks, float* rows) {
  each_row(g,
           [&](int64_t b, int64_t x) { std::memcpy(rows + x, blocks + b, g.w * sizeof(float)); });
}

void rows_to_blocks(const Blocks& g, const float* rows, float* blocks) {
  each_row(g,
           [&](int64_t b, int64_t x) { std::memcpy(blocks + b, rows + x, g.w * sizeof(float)); });
}

// The executor of `cfg` on `group`; for a hybrid, of its Ulysses schedule inside the team.
Executor make_executor(const AttnConfig& cfg, comm::Communicator& group) {
  const int P = group.size(), r = group.rank();
  if (cfg.ulysses > 1) {
    const auto h = hybrid_configs(cfg, P);
    auto team = group.split(r / h.u, r);
    auto single = team.split(team.rank(), 0);
    return Executor(make_schedule(h.outer, h.u, team.rank()), team, single);
  }
  const int C = cfg.strategy == Strategy::WallFacer ? cfg.teams : 1;
  return Executor(make_schedule(cfg, P, r), group, group.split(r / C, r));
}

}  // namespace

struct DistAttention::Impl {
  Executor exec;
  AttnStats stats;
  PhaseStats last[2];  // of the latest forward, backward
  // Hybrids: the ring over the teams, run by the Ulysses schedule's compute hook on the rows of
  // the team's heads (held here in its (B, u*n, heads/u, D) layout).
  std::unique_ptr<Impl> inner;
  std::vector<float> staging;
  float *q = nullptr, *dout = nullptr, *o = nullptr, *k = nullptr, *v = nullptr, *dk = nullptr,
        *dv = nullptr, *lse = nullptr, *delta = nullptr;  // o also holds dq

  Impl(const AttnConfig& cfg, comm::Communicator& group) : exec(make_executor(cfg, group)) {
    if (cfg.ulysses <= 1) return;
    const auto h = hybrid_configs(cfg, group.size());
    auto ring = group.split(group.rank() % h.u, group.rank());
    inner = std::make_unique<Impl>(h.inner, ring);
    exec.set_trace_label("ulysses");
    inner->exec.set_trace_label("ring");
    const int64_t B = cfg.batch, n = cfg.seq / group.size(), D = cfg.head_dim,
                  hd = int64_t(h.inner.heads) * D, kd = int64_t(h.inner.kv_heads) * D;
    const int u = h.u, H = h.inner.heads;
    const int64_t rows = B * u * n;
    staging.assign(size_t(hybrid_staging_elements(cfg, group.size())), 0.0f);
    float* next = staging.data();
    auto take = [&](int64_t elements) { return std::exchange(next, next + elements); };
    q = take(rows * hd);
    dout = take(rows * hd);
    o = take(rows * hd);
    k = take(rows * kd);
    v = take(rows * kd);
    dk = take(rows * kd);
    dv = take(rows * kd);
    lse = take(rows * H);
    delta = take(rows * H);
    WF_CHECK(next == staging.data() + staging.size(), "hybrid staging miscounted");
    // Ulysses buffers (u blocks of n rows): Rows of H heads, KV of kv heads, Stat, QPack.
    const Blocks rows_g{u, B * n * hd, B, n, hd, hd};
    const Blocks kv_g{u, B * n * 2 * kd, B, n, kd, 2 * kd};
    const Blocks stat_g{u, B * H * n, B * H, n, 1, 1};
    const int64_t qpack = B * n * H * (2 * D + 2);
    const Blocks qp_rows{u, qpack, B, n, hd, hd};
    const Blocks qp_stat{u, qpack, B * H, n, 1, 1};
    exec.set_compute_hook(
        [=, this](const Op& op, const float* src, const float* src2, float* dst, float* dst2) {
          blocks_to_rows(kv_g, src2, k);
          blocks_to_rows(kv_g, src2 + kd, v);
          UserTensors t{};
          t[kInK] = k;
          t[kInV] = v;
          t[kInQ] = q;
          if (!op.backward) {
            blocks_to_rows(rows_g, src, q);
            t[kOutO] = o;
            t[kOutLse] = lse;
            inner->run(false, t);
            rows_to_blocks(rows_g, o, dst);
            rows_to_blocks(stat_g, lse, dst2);
          } else {
            // QPack blocks: q | dout | lse | delta.
            blocks_to_rows(qp_rows, src, q);
            blocks_to_rows(qp_rows, src + B * n * hd, dout);
            blocks_to_rows(qp_stat, src + 2 * B * n * hd, lse);
            blocks_to_rows(qp_stat, src + 2 * B * n * hd + B * H * n, delta);
            t[kInDout] = dout;
            t[kInLse] = lse;
            t[kInDelta] = delta;
            t[kOutDq] = o;
            t[kOutDk] = dk;
            t[kOutDv] = dv;
            inner->run(true, t);
            rows_to_blocks(rows_g, o, dst);
            rows_to_blocks(kv_g, dk, dst2);
            rows_to_blocks(kv_g, dv, dst2 + kd);
          }
        });
  }

  // One phase. A hybrid adds its inner ring's counters (the ring's time is already in the
  // phase's wall time, its waits in neither).
  void run(bool bwd, const UserTensors& t) {
    PhaseStats st = exec.run(bwd ? exec.schedule().bwd : exec.schedule().fwd, t);
    if (inner) {
      const PhaseStats& in = inner->last[bwd];
      st.p2p_bytes += in.p2p_bytes;
      st.p2p_steps += in.p2p_steps;
      st.coll_bytes += in.coll_bytes;
      st.exposed_ms += in.exposed_ms;
      st.flops += in.flops;
    }
    last[bwd] = st;
    auto& s = stats;
    (bwd ? s.p2p_bytes_bwd : s.p2p_bytes_fwd) = st.p2p_bytes;
    (bwd ? s.p2p_steps_bwd : s.p2p_steps_fwd) = st.p2p_steps;
    (bwd ? s.coll_bytes_bwd : s.coll_bytes_fwd) = st.coll_bytes;
    (bwd ? s.bwd_ms : s.fwd_ms) = st.ms;
    (bwd ? s.exposed_comm_bwd_ms : s.exposed_comm_fwd_ms) = st.exposed_ms;
    if (!bwd) s.attn_flops = st.flops;
  }

  void set_progress_rows(int64_t rows) {
    exec.set_progress_rows(rows);
    if (inner) inner->set_progress_rows(rows);
  }
};

DistAttention::DistAttention(const AttnConfig& cfg, comm::Communicator& group) {
  validate(cfg, group.size());
  impl_ = std::make_unique<Impl>(cfg, group);
}

DistAttention::~DistAttention() = default;

void DistAttention::forward(const float* q, const float* k, const float* v, float* o, float* lse) {
  UserTensors t{};
  t[kInQ] = const_cast<float*>(q);
  t[kInK] = const_cast<float*>(k);
  t[kInV] = const_cast<float*>(v);
  t[kOutO] = o;
  t[kOutLse] = lse;
  impl_->run(false, t);
}

void DistAttention::backward(const float* q, const float* k, const float* v, const float* o,
                             const float* lse, const float* dout, float* dq, float* dk, float* dv) {
  UserTensors t{};
  t[kInQ] = const_cast<float*>(q);
  t[kInK] = const_cast<float*>(k);
  t[kInV] = const_cast<float*>(v);
  t[kInO] = const_cast<float*>(o);
  t[kInLse] = const_cast<float*>(lse);
  t[kInDout] = const_cast<float*>(dout);
  t[kOutDq] = dq;
  t[kOutDk] = dk;
  t[kOutDv] = dv;
  impl_->run(true, t);
}

const AttnStats& DistAttention::stats() const { return impl_->stats; }

void DistAttention::set_progress_rows(int64_t rows) { impl_->set_progress_rows(rows); }

}  // namespace wallfacer::seqpar
