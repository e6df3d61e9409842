#include "wallfacer/seqpar/executor.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <set>

#include "wallfacer/core/error.h"
#include "wallfacer/core/timer.h"
#include "wallfacer/core/trace.h"
#include "wallfacer/kernels/attention.h"

namespace wallfacer::seqpar {
namespace {

using kernels::Strides2;
using kernels::Strides3;

// Copies `nh` heads of every row: rows of `src_heads` heads starting at head src_h0 to rows of
// `dst_heads` heads starting at dst_h0 (D floats per head).
void copy_heads(const float* src, int src_heads, int src_h0, float* dst, int dst_heads, int dst_h0,
                int nh, int64_t rows, int D) {
  const size_t bytes = size_t(nh) * D * sizeof(float);
  for (int64_t i = 0; i < rows; ++i)
    std::memcpy(dst + (i * dst_heads + dst_h0) * D, src + (i * src_heads + src_h0) * D, bytes);
}

// (B, H, n) statistics: copies heads [src_h0, src_h0 + nh) of every batch to [dst_h0, ...).
void copy_stat_heads(const float* src, int src_heads, int src_h0, float* dst, int dst_heads,
                     int dst_h0, int nh, int batch, int64_t n) {
  for (int b = 0; b < batch; ++b)
    std::memcpy(dst + (int64_t(b) * dst_heads + dst_h0) * n,
                src + (int64_t(b) * src_heads + src_h0) * n, size_t(nh) * n * sizeof(float));
}

}  // namespace

Executor::Executor(Schedule schedule, comm::Communicator group, comm::Communicator team)
    : s_(std::move(schedule)), group_(std::move(group)), team_(std::move(team)) {
  scratch_.resize(s_.buffers.size());
  for (size_t id = kNumUserBuffers; id < s_.buffers.size(); ++id) {
    const auto& spec = s_.buffers[id];
    if (spec.kept) {
      kept_ids_.push_back(int(id));
      continue;
    }
    scratch_[id].assign(size_t(spec.blocks * block_elements(spec, s_.cfg.batch, s_.cfg.head_dim)),
                        0.0f);
  }
  // World ranks of the group's ranks, for the peers in trace spans (ranks < 2^24: exact floats).
  const float me = float(comm::Communicator::world().rank());
  std::vector<float> world(size_t(group_.size()));
  group_.all_gather(&me, 1, world.data());
  world_rank_.assign(world.begin(), world.end());
}

float* Executor::ptr(int buf, int block) {
  WF_CHECK(buf >= 0 && buf < int(s_.buffers.size()), "schedule names buffer {}", buf);
  float* base = nullptr;
  if (buf < kNumUserBuffers) {
    base = user_[buf];
  } else if (s_.buffers[buf].kept) {
    WF_CHECK(!kept_.empty(), "a backward without a forward: buffer {} is kept from the forward",
             s_.buffers[buf].name);
    const size_t k = std::find(kept_ids_.begin(), kept_ids_.end(), buf) - kept_ids_.begin();
    base = kept_.back()[k].data();
  } else {
    base = scratch_[buf].data();
  }
  WF_CHECK(base != nullptr, "buffer {} ({}) is not bound", buf, s_.buffers[buf].name);
  return base + int64_t(block) * block_elements(s_.buffers[buf], s_.cfg.batch, s_.cfg.head_dim);
}

void Executor::local(const Op& op) {
  const auto& c = s_.cfg;
  const int B = c.batch, D = c.head_dim, H = c.heads, K = c.kv_heads;
  const int64_t n = s_.n, rows = int64_t(B) * n;
  auto elems = [&](int buf) {
    const auto& spec = s_.buffers[buf];
    return spec.blocks * block_elements(spec, B, D);
  };
  switch (op.local) {
    case LocalKind::PackKV: {
      const int ks = K / op.shards;
      for (int j = 0; j < op.shards; ++j) {
        float* dst = ptr(op.dst, j);
        copy_heads(ptr(kInK), K, j * ks, dst, 2 * ks, 0, ks, rows, D);
        copy_heads(ptr(kInV), K, j * ks, dst, 2 * ks, ks, ks, rows, D);
      }
      break;
    }
    case LocalKind::UnpackKV: {
      const int ks = K / op.shards;
      for (int j = 0; j < op.shards; ++j) {
        const float* src = ptr(op.src, j);
        copy_heads(src, 2 * ks, 0, ptr(kOutDk), K, j * ks, ks, rows, D);
        copy_heads(src, 2 * ks, ks, ptr(kOutDv), K, j * ks, ks, rows, D);
      }
      break;
    }
    case LocalKind::PackQPack: {
      const int hs = H / op.shards;
      const int64_t qpart = rows * hs * D, spart = int64_t(B) * hs * n;
      for (int j = 0; j < op.shards; ++j) {
        float* dst = ptr(op.dst, j);
        copy_heads(ptr(kInQ), H, j * hs, dst, hs, 0, hs, rows, D);
        copy_heads(ptr(kInDout), H, j * hs, dst + qpart, hs, 0, hs, rows, D);
        copy_stat_heads(ptr(kInLse), H, j * hs, dst + 2 * qpart, hs, 0, hs, B, n);
        if (user_[kInDelta] != nullptr) {
          copy_stat_heads(ptr(kInDelta), H, j * hs, dst + 2 * qpart + spart, hs, 0, hs, B, n);
          continue;
        }
        kernels::AttnDims dims{B, int(n), int(n), hs, hs, D};
        const auto full = Strides3::contiguous(int(n), H, D);
        kernels::attn_bwd_preprocess(dims, ptr(kInO) + int64_t(j) * hs * D, full,
                                     ptr(kInDout) + int64_t(j) * hs * D, full,
                                     dst + 2 * qpart + spart, Strides2::contiguous(hs, int(n)));
      }
      break;
    }
    case LocalKind::Shard:
    case LocalKind::Merge: {
      const bool shard = op.local == LocalKind::Shard;
      const int one = shard ? op.src : op.dst, many = shard ? op.dst : op.src;
      const auto& spec = s_.buffers[one];
      const int hs = spec.heads / op.shards;
      for (int j = 0; j < op.shards; ++j) {
        if (spec.fmt == Fmt::Stat) {
          if (shard)
            copy_stat_heads(ptr(one), spec.heads, j * hs, ptr(many, j), hs, 0, hs, B, n);
          else
            copy_stat_heads(ptr(many, j), hs, 0, ptr(one), spec.heads, j * hs, hs, B, n);
        } else {
          WF_CHECK(spec.fmt == Fmt::Rows, "shard/merge of buffer {}", spec.name);
          if (shard)
            copy_heads(ptr(one), spec.heads, j * hs, ptr(many, j), hs, 0, hs, rows, D);
          else
            copy_heads(ptr(many, j), hs, 0, ptr(one), spec.heads, j * hs, hs, rows, D);
        }
      }
      break;
    }
    case LocalKind::InitOut: {
      std::fill_n(ptr(op.dst), elems(op.dst), 0.0f);
      std::fill_n(ptr(op.dst2), elems(op.dst2), -std::numeric_limits<float>::infinity());
      break;
    }
    case LocalKind::Zero:
      std::fill_n(ptr(op.dst), elems(op.dst), 0.0f);
      break;
    case LocalKind::Add: {
      float* d = ptr(op.dst);
      const float* x = ptr(op.src);
      const int64_t m = elems(op.dst);
      for (int64_t i = 0; i < m; ++i) d[i] += x[i];
      break;
    }
    case LocalKind::Copy:
      std::memcpy(ptr(op.dst), ptr(op.src), elems(op.dst) * sizeof(float));
      break;
  }
}

void Executor::compute(const Op& op, std::vector<comm::Request>& reqs) {
  const auto& c = s_.cfg;
  const int B = c.batch, D = c.head_dim, h = op.heads, k = op.kv_heads;
  const int64_t n = s_.n;
  const float scale = 1.0f / std::sqrt(float(D));
  const Strides3 qs{n * h * D, int64_t(h) * D, D};           // Rows blocks of h heads
  const Strides3 kvs{n * 2 * k * D, 2 * int64_t(k) * D, D};  // KV blocks of k heads
  const Strides2 st{int64_t(h) * n, n};                      // Stat blocks of h heads
  const float* qb = ptr(op.src, op.qseg.block);
  const float* kvb = ptr(op.src2, op.kseg.block) + op.kseg.row0 * 2 * k * D;
  float* ob = ptr(op.dst, op.qseg.block);
  float* o2b = ptr(op.dst2, op.dst2 >= 0 ? (op.backward ? op.kseg.block : op.qseg.block) : 0);

  // Sub-blocks of query rows: between them the pending transfers get MPI progress.
  bool pending = poll(reqs);
  const int64_t chunk = pending && progress_rows_ > 0 ? progress_rows_ : op.qseg.rows;
  for (int64_t r0 = 0; r0 < op.qseg.rows; r0 += chunk) {
    const int64_t rows = std::min(chunk, op.qseg.rows - r0);
    const int64_t row = op.qseg.row0 + r0;
    kernels::AttnDims dims{B, int(rows), int(op.kseg.rows), h, k, D};
    if (!op.backward) {
      kernels::AttnFwdParams p;
      p.dims = dims;
      p.q = qb + row * h * D;
      p.q_stride = qs;
      p.k = kvb;
      p.k_stride = kvs;
      p.v = kvb + int64_t(k) * D;
      p.v_stride = kvs;
      p.o = ob + row * h * D;
      p.o_stride = qs;
      p.lse = o2b + row;
      p.lse_stride = st;
      p.scale = scale;
      p.causal = op.masked;
      p.q_pos0 = op.qseg.pos0 + r0;
      p.k_pos0 = op.kseg.pos0;
      p.accumulate = true;
      kernels::attn_fwd(p);
    } else {
      // QPack block: q | dout | lse | delta.
      const int64_t qpart = int64_t(B) * n * h * D, spart = int64_t(B) * h * n;
      kernels::AttnBwdParams p;
      p.dims = dims;
      p.q = qb + row * h * D;
      p.q_stride = qs;
      p.dout = qb + qpart + row * h * D;
      p.dout_stride = qs;
      p.lse = qb + 2 * qpart + row;
      p.lse_stride = st;
      p.delta = qb + 2 * qpart + spart + row;
      p.delta_stride = st;
      p.k = kvb;
      p.k_stride = kvs;
      p.v = kvb + int64_t(k) * D;
      p.v_stride = kvs;
      p.dq = ob + row * h * D;
      p.dq_stride = qs;
      p.dk = o2b + op.kseg.row0 * 2 * k * D;
      p.dk_stride = kvs;
      p.dv = o2b + op.kseg.row0 * 2 * k * D + int64_t(k) * D;
      p.dv_stride = kvs;
      p.scale = scale;
      p.causal = op.masked;
      p.q_pos0 = op.qseg.pos0 + r0;
      p.k_pos0 = op.kseg.pos0;
      p.accumulate = true;
      kernels::attn_bwd(p);
    }
    if (pending) pending = poll(reqs);
  }
}

void Executor::collective(const Op& op) {
  auto& comm = op.group == Group::Team ? team_ : group_;
  WF_CHECK(comm.size() == op.group_size, "collective over {} ranks in a group of {}", op.group_size,
           comm.size());
  switch (op.coll) {
    case CollKind::AllGather:
      comm.all_gather(ptr(op.src), op.elements, ptr(op.dst));
      break;
    case CollKind::ReduceScatterSum:
      comm.reduce_scatter_sum(ptr(op.src), ptr(op.dst), op.elements);
      break;
    case CollKind::AllToAll:
      comm.all_to_all(ptr(op.src), ptr(op.dst), op.elements);
      break;
    case CollKind::ReduceScatterLse: {
      const auto& spec = s_.buffers[op.dst];
      comm.reduce_scatter_lse(ptr(op.src), ptr(op.src2), ptr(op.dst), ptr(op.dst2), s_.cfg.batch,
                              s_.n, spec.heads, s_.cfg.head_dim);
      break;
    }
  }
}

PhaseStats Executor::run(const std::vector<Op>& ops, const UserTensors& user) {
  user_ = user;
  const bool backward = &ops == &s_.bwd;
  WF_CHECK(backward || &ops == &s_.fwd, "Executor::run takes the schedule's own fwd or bwd");
  if (!kept_ids_.empty() && !backward) {  // this forward's copies of the kept buffers
    if (spare_.empty()) {
      std::vector<std::vector<float>> fresh;
      for (int id : kept_ids_) {
        const auto& spec = s_.buffers[id];
        fresh.emplace_back(
            size_t(spec.blocks * block_elements(spec, s_.cfg.batch, s_.cfg.head_dim)), 0.0f);
      }
      spare_.push_back(std::move(fresh));
    }
    kept_.push_back(std::move(spare_.back()));
    spare_.pop_back();
  }
  PhaseStats st;
  const auto g0 = group_.counters();
  const auto t0 = team_.counters();
  std::vector<comm::Request> reqs(ops.size());
  std::set<int> rounds;
  bool hooked = false;
  const bool traced = trace::on();
  if (traced) begin_trace(ops);
  Timer total;
  for (size_t i = 0; i < ops.size(); ++i) {
    const Op& op = ops[i];
    const int64_t start_ns = traced ? trace::now_ns() : 0;
    switch (op.kind) {
      case OpKind::Local:
        local(op);
        break;
      case OpKind::Send:
        reqs[i] = group_.isend(ptr(op.src), op.elements, op.peer, op.tag);
        rounds.insert(op.round);
        break;
      case OpKind::Recv:
        reqs[i] = group_.irecv(ptr(op.dst), op.elements, op.peer, op.tag);
        break;
      case OpKind::Wait: {
        Timer t;
        for (int w : op.waits) reqs[w].wait();
        st.exposed_ms += t.ms();
        break;
      }
      case OpKind::Collective: {
        Timer t;
        collective(op);
        st.exposed_ms += t.ms();
        break;
      }
      case OpKind::Compute:
        if (!hook_) {
          compute(op, reqs);
          st.flops += op.flops;
        } else if (!hooked) {
          hook_(op, ptr(op.src), ptr(op.src2), ptr(op.dst), ptr(op.dst2));
          hooked = true;
        } else {
          continue;  // done by the hook
        }
        break;
    }
    if (traced) trace_op(int(i), start_ns);
  }
  for (auto& r : reqs) r.wait();
  if (traced) end_trace();
  st.ms = total.ms();
  const auto& g1 = group_.counters();
  const auto& t1 = team_.counters();
  st.p2p_bytes = g1.p2p_bytes - g0.p2p_bytes;
  st.p2p_sends = g1.p2p_sends - g0.p2p_sends;
  st.p2p_steps = int64_t(rounds.size());
  st.coll_bytes = (g1.coll_bytes - g0.coll_bytes) + (t1.coll_bytes - t0.coll_bytes);
  user_ = {};
  if (!kept_ids_.empty() && backward) {  // this backward's forward copies are used up
    spare_.push_back(std::move(kept_.back()));
    kept_.pop_back();
  }
  return st;
}

// ---------------------------------------------------------------------------------------------
// Tracing: one span per op; a transfer spans from its post to the first moment this rank saw it
// complete (a test between kernel sub-blocks, the end of its wait, or the end of the phase).

namespace {

const char* local_name(LocalKind k) {
  switch (k) {
    case LocalKind::PackKV:
      return "pack_kv";
    case LocalKind::PackQPack:
      return "pack_qpack";
    case LocalKind::Shard:
      return "shard";
    case LocalKind::Merge:
      return "merge";
    case LocalKind::UnpackKV:
      return "unpack_kv";
    case LocalKind::InitOut:
      return "init_out";
    case LocalKind::Zero:
      return "zero";
    case LocalKind::Add:
      return "add";
    case LocalKind::Copy:
      return "copy";
  }
  return "local";
}

const char* coll_name(CollKind k) {
  switch (k) {
    case CollKind::AllGather:
      return "all_gather";
    case CollKind::ReduceScatterSum:
      return "reduce_scatter_sum";
    case CollKind::ReduceScatterLse:
      return "reduce_scatter_lse";
    case CollKind::AllToAll:
      return "all_to_all";
  }
  return "collective";
}

}  // namespace

void Executor::begin_trace(const std::vector<Op>& ops) {
  traced_ops_ = &ops;
  posted_ns_.assign(ops.size(), -1);
  phase_name_ = &ops == &s_.bwd ? "backward" : "forward";
}

void Executor::note_done(size_t i) {
  if (traced_ops_ == nullptr || i >= posted_ns_.size() || posted_ns_[i] < 0) return;
  const Op& op = (*traced_ops_)[i];
  const bool send = op.kind == OpKind::Send;
  trace::record(send ? "send" : "recv", trace::Cat::Comm, posted_ns_[i], trace::now_ns(),
                {{"peer", world_rank_[size_t(op.peer)]},
                 {"bytes", op.elements * int64_t(sizeof(float))},
                 {"round", op.round},
                 {"tag", op.tag},
                 {"op", int64_t(i)},
                 {"phase", 0, phase_name_},
                 {"schedule", 0, trace_label_}},
                1);
  posted_ns_[i] = -1;
}

bool Executor::poll(std::vector<comm::Request>& reqs) {
  bool pending = false;
  for (size_t j = 0; j < reqs.size(); ++j) {
    if (reqs[j].test()) {
      if (traced_ops_) note_done(j);
    } else {
      pending = true;
    }
  }
  return pending;
}

void Executor::trace_op(int i, int64_t start_ns) {
  const Op& op = (*traced_ops_)[size_t(i)];
  const trace::Arg phase{"phase", 0, phase_name_}, sched{"schedule", 0, trace_label_},
      index{"op", i};
  const int64_t now = trace::now_ns();
  switch (op.kind) {
    case OpKind::Send:
    case OpKind::Recv:
      posted_ns_[size_t(i)] = start_ns;
      break;
    case OpKind::Local:
      trace::record(local_name(op.local), trace::Cat::Compute, start_ns, now,
                    {index, phase, sched});
      break;
    case OpKind::Compute:
      if (hook_) {  // a span around the hook's own spans (a hybrid's ring over the teams)
        trace::record("ring over teams", trace::Cat::Phase, start_ns, now, {index, phase, sched});
        break;
      }
      trace::record(op.backward ? "attention backward" : "attention forward", trace::Cat::Compute,
                    start_ns, now,
                    {{"q_rows", op.qseg.rows},
                     {"k_rows", op.kseg.rows},
                     {"flops", int64_t(op.flops)},
                     {"masked", op.masked ? 1 : 0},
                     index,
                     phase,
                     sched});
      break;
    case OpKind::Collective:
      trace::record(coll_name(op.coll), trace::Cat::Comm, start_ns, now,
                    {{"group", 0, op.group == Group::Team ? "team" : "world"},
                     {"group_size", op.group_size},
                     {"bytes", op.elements * int64_t(sizeof(float))},
                     index,
                     phase,
                     sched});
      break;
    case OpKind::Wait: {
      // What it waits for: the peers of the transfers, their round and bytes.
      int64_t recv_from = -1, send_to = -1, round = -1, bytes = 0;
      for (int w : op.waits) {
        const Op& t = (*traced_ops_)[size_t(w)];
        (t.kind == OpKind::Recv ? recv_from : send_to) = world_rank_[size_t(t.peer)];
        round = std::max<int64_t>(round, t.round);
        bytes += t.elements * int64_t(sizeof(float));
      }
      trace::record("wait", trace::Cat::Wait, start_ns, now,
                    {{"recv_from", recv_from},
                     {"send_to", send_to},
                     {"round", round},
                     {"bytes", bytes},
                     index,
                     phase,
                     sched});
      for (int w : op.waits) note_done(size_t(w));
      break;
    }
  }
}

void Executor::end_trace() {
  for (size_t i = 0; i < posted_ns_.size(); ++i) note_done(i);
  traced_ops_ = nullptr;
}

}  // namespace wallfacer::seqpar
