#include "wallfacer/seqpar/attention.h"

#include <cstring>
#include <utility>

#include "wallfacer/core/error.h"
#include "wallfacer/seqpar/executor.h"
#include "wallfacer/seqpar/schedule.h"

namespace wallfacer::seqpar {
namespace {

// u blocks, block i at `stride` bytes * i, each of m groups of n rows of w elements (rows `pitch`
// elements apart), against the (m, u*n, w) tensor whose rows [i*n, (i+1)*n) of every group are
// block i.
struct Blocks {
  int u = 1;
  int64_t stride = 0, m = 0, n = 0, w = 0, pitch = 0;
};

// Copies between the blocks (elements of type bt) and the rows (type rt), converting the types.
void move_rows(const Blocks& g, bool to_rows, std::byte* blocks, Dtype bt, std::byte* rows,
               Dtype rt) {
  const int64_t be = dtype_bytes(bt), re = dtype_bytes(rt);
  for (int i = 0; i < g.u; ++i)
    for (int64_t mm = 0; mm < g.m; ++mm)
      for (int64_t r = 0; r < g.n; ++r) {
        std::byte* b = blocks + i * g.stride + (mm * g.n + r) * g.pitch * be;
        std::byte* x = rows + ((mm * g.u + i) * g.n + r) * g.w * re;
        if (to_rows)
          copy_elements(b, bt, x, rt, g.w);
        else
          copy_elements(x, rt, b, bt, g.w);
      }
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
  Dtype dtype = Dtype::fp32;
  // Hybrids: the ring over the teams, run by the Ulysses schedule's compute hook on the rows of
  // the team's heads (held here in its (B, u*n, heads/u, D) layout: q, dout, o (also dq), k, v,
  // dk, dv of the dtype, lse and delta fp32).
  std::unique_ptr<Impl> inner;
  std::vector<float> staging;
  std::byte *q = nullptr, *dout = nullptr, *o = nullptr, *k = nullptr, *v = nullptr, *dk = nullptr,
            *dv = nullptr, *lse = nullptr, *delta = nullptr;

  AttnConfig cfg;  // as built, with the documents of set_documents
  int P = 1, rank = 0;

  Impl(const AttnConfig& cfg_in, comm::Communicator& group)
      : exec(make_executor(cfg_in, group)),
        dtype(cfg_in.dtype),
        cfg(cfg_in),
        P(group.size()),
        rank(group.rank()) {
    if (cfg.ulysses <= 1) return;
    const auto h = hybrid_configs(cfg, group.size());
    auto ring = group.split(group.rank() % h.u, group.rank());
    inner = std::make_unique<Impl>(h.inner, ring);
    exec.set_trace_label("ulysses");
    inner->exec.set_trace_label("ring");
    const int64_t B = cfg.batch, n = cfg.seq / group.size(), D = cfg.head_dim,
                  hd = int64_t(h.inner.heads) * D, kd = int64_t(h.inner.kv_heads) * D;
    const int u = h.u, H = h.inner.heads;
    const int64_t rows = B * u * n, e = dtype_bytes(cfg.dtype), f = 4;
    const int64_t bytes = rows * (3 * hd + 4 * kd) * e + rows * 2 * H * f;
    staging.assign(size_t(bytes / 4 + 1), 0.0f);
    std::byte* next = reinterpret_cast<std::byte*>(staging.data());
    auto take = [&](int64_t b) { return std::exchange(next, next + b); };
    lse = take(rows * H * f);  // the fp32 ones first: aligned
    delta = take(rows * H * f);
    q = take(rows * hd * e);
    dout = take(rows * hd * e);
    o = take(rows * hd * e);
    k = take(rows * kd * e);
    v = take(rows * kd * e);
    dk = take(rows * kd * e);
    dv = take(rows * kd * e);
    WF_CHECK(next == reinterpret_cast<std::byte*>(staging.data()) + bytes,
             "hybrid staging miscounted");
    // Ulysses buffers (u blocks of n rows): Rows of H heads, KV of kv heads, Stat, QPack (q and
    // dout of the dtype, lse and delta fp32); strides in bytes.
    const Dtype w = cfg.dtype, fp32 = Dtype::fp32;
    const Blocks rows_g{u, B * n * hd * e, B, n, hd, hd};
    const Blocks acc_g{u, B * n * hd * f, B, n, hd, hd};  // Rows of fp32 accumulators
    const Blocks kv_g{u, B * n * 2 * kd * e, B, n, kd, 2 * kd};
    const Blocks dkv_g{u, B * n * 2 * kd * f, B, n, kd, 2 * kd};
    const Blocks stat_g{u, B * H * n * f, B * H, n, 1, 1};
    const int64_t qpack = B * n * H * (2 * D * e + 2 * f), qpart = B * n * hd * e;
    const Blocks qp_rows{u, qpack, B, n, hd, hd};
    const Blocks qp_stat{u, qpack, B * H, n, 1, 1};
    exec.set_compute_hook([=, this](const Op& op, const void* src_in, const void* src2_in,
                                    void* dst_in, void* dst2_in) {
      auto* src = static_cast<std::byte*>(const_cast<void*>(src_in));
      auto* src2 = static_cast<std::byte*>(const_cast<void*>(src2_in));
      auto* dst = static_cast<std::byte*>(dst_in);
      auto* dst2 = static_cast<std::byte*>(dst2_in);
      move_rows(kv_g, true, src2, w, k, w);
      move_rows(kv_g, true, src2 + kd * e, w, v, w);
      UserTensors t{};
      t[kInK] = k;
      t[kInV] = v;
      t[kInQ] = q;
      if (!op.backward) {
        move_rows(rows_g, true, src, w, q, w);
        t[kOutO] = o;
        t[kOutLse] = lse;
        inner->run(false, t);
        move_rows(acc_g, false, dst, fp32, o, w);
        move_rows(stat_g, false, dst2, fp32, lse, fp32);
      } else {
        // QPack blocks: q | dout | lse | delta.
        move_rows(qp_rows, true, src, w, q, w);
        move_rows(qp_rows, true, src + qpart, w, dout, w);
        move_rows(qp_stat, true, src + 2 * qpart, fp32, lse, fp32);
        move_rows(qp_stat, true, src + 2 * qpart + B * H * n * f, fp32, delta, fp32);
        t[kInDout] = dout;
        t[kInLse] = lse;
        t[kInDelta] = delta;
        t[kOutDq] = o;
        t[kOutDk] = dk;
        t[kOutDv] = dv;
        inner->run(true, t);
        move_rows(acc_g, false, dst, fp32, o, w);
        move_rows(dkv_g, false, dst2, fp32, dk, w);
        move_rows(dkv_g, false, dst2 + kd * f, fp32, dv, w);
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

  // The documents of the next calls: the ring's schedules (a hybrid's inner ring) are rebuilt.
  void set_documents(std::vector<int64_t> lengths) {
    cfg.doc_lengths = std::move(lengths);
    validate(cfg, P);
    if (inner) {
      inner->set_documents(cfg.doc_lengths);
      return;
    }
    exec.replace_schedule(make_schedule(cfg, P, rank));
  }
};

DistAttention::DistAttention(const AttnConfig& cfg, comm::Communicator& group) {
  validate(cfg, group.size());
  impl_ = std::make_unique<Impl>(cfg, group);
}

DistAttention::~DistAttention() = default;

namespace {

template <class T>
UserTensors forward_tensors(const T* q, const T* k, const T* v, T* o, float* lse) {
  UserTensors t{};
  t[kInQ] = const_cast<T*>(q);
  t[kInK] = const_cast<T*>(k);
  t[kInV] = const_cast<T*>(v);
  t[kOutO] = o;
  t[kOutLse] = lse;
  return t;
}

template <class T>
UserTensors backward_tensors(const T* q, const T* k, const T* v, const T* o, const float* lse,
                             const T* dout, T* dq, T* dk, T* dv) {
  UserTensors t{};
  t[kInQ] = const_cast<T*>(q);
  t[kInK] = const_cast<T*>(k);
  t[kInV] = const_cast<T*>(v);
  t[kInO] = const_cast<T*>(o);
  t[kInLse] = const_cast<float*>(lse);
  t[kInDout] = const_cast<T*>(dout);
  t[kOutDq] = dq;
  t[kOutDk] = dk;
  t[kOutDv] = dv;
  return t;
}

void check_dtype(Dtype built, Dtype called) {
  WF_USAGE_CHECK(built == called,
                 "this DistAttention was built for {} tensors and is called with {} ones; pass "
                 "{} tensors or build it with AttnConfig::dtype = {}",
                 dtype_name(built), dtype_name(called), dtype_name(built), dtype_name(called));
}

}  // namespace

void DistAttention::forward(const float* q, const float* k, const float* v, float* o, float* lse) {
  check_dtype(impl_->dtype, Dtype::fp32);
  impl_->run(false, forward_tensors(q, k, v, o, lse));
}

void DistAttention::backward(const float* q, const float* k, const float* v, const float* o,
                             const float* lse, const float* dout, float* dq, float* dk, float* dv) {
  check_dtype(impl_->dtype, Dtype::fp32);
  impl_->run(true, backward_tensors(q, k, v, o, lse, dout, dq, dk, dv));
}

void DistAttention::forward(const bf16* q, const bf16* k, const bf16* v, bf16* o, float* lse) {
  check_dtype(impl_->dtype, Dtype::bf16);
  impl_->run(false, forward_tensors(q, k, v, o, lse));
}

void DistAttention::backward(const bf16* q, const bf16* k, const bf16* v, const bf16* o,
                             const float* lse, const bf16* dout, bf16* dq, bf16* dk, bf16* dv) {
  check_dtype(impl_->dtype, Dtype::bf16);
  impl_->run(true, backward_tensors(q, k, v, o, lse, dout, dq, dk, dv));
}

const AttnStats& DistAttention::stats() const { return impl_->stats; }

void DistAttention::set_progress_rows(int64_t rows) { impl_->set_progress_rows(rows); }

void DistAttention::set_documents(const int64_t* lengths, int count) {
  WF_USAGE_CHECK(count >= 0 && (count == 0 || lengths != nullptr),
                 "set_documents: {} lengths at {}; give count >= 0 lengths (0: one document)",
                 count, static_cast<const void*>(lengths));
  WF_USAGE_CHECK(impl_->cfg.layout == Layout::Strategy,
                 "set_documents: the balanced layout places the rows by the documents; build a "
                 "DistAttention for each set of documents, or use Layout::Strategy");
  impl_->set_documents(lengths ? std::vector<int64_t>(lengths, lengths + count)
                               : std::vector<int64_t>{});
}

}  // namespace wallfacer::seqpar
