#include "wallfacer/seqpar/executor.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <set>
#include <type_traits>

#include "wallfacer/core/error.h"
#include "wallfacer/core/timer.h"
#include "wallfacer/core/trace.h"
#include "wallfacer/kernels/attention.h"
#include "wallfacer/kernels/attention_bf16.h"
#include "wallfacer/kernels/attention_params.h"

namespace wallfacer::seqpar {

void copy_elements(const void* src, Dtype from, void* dst, Dtype to, int64_t n) {
  if (from == to) {
    std::memcpy(dst, src, size_t(n * dtype_bytes(from)));
  } else if (to == Dtype::bf16) {
    fp32_to_bf16(static_cast<const float*>(src), static_cast<bf16*>(dst), n);
  } else {
    bf16_to_fp32(static_cast<const bf16*>(src), static_cast<float*>(dst), n);
  }
}

namespace {

using kernels::Strides2;
using kernels::Strides3;

// The "schedule" argument of every trace span the executor writes.
constexpr const char* kTraceSchedule = "attention";

// Copies `nh` heads of every row: rows of `src_heads` heads starting at head src_h0 to rows of
// `dst_heads` heads starting at dst_h0 (D elements per head), converting between the types.
void copy_heads(const std::byte* src, Dtype st, int src_heads, int src_h0, std::byte* dst, Dtype dt,
                int dst_heads, int dst_h0, int nh, int64_t rows, int D) {
  const int64_t se = dtype_bytes(st), de = dtype_bytes(dt), count = int64_t(nh) * D;
  for (int64_t i = 0; i < rows; ++i)
    copy_elements(src + (i * src_heads + src_h0) * D * se, st,
                  dst + (i * dst_heads + dst_h0) * D * de, dt, count);
}

// (B, H, n) statistics: copies heads [src_h0, src_h0 + nh) of every batch to [dst_h0, ...).
void copy_stat_heads(const float* src, int src_heads, int src_h0, float* dst, int dst_heads,
                     int dst_h0, int nh, int batch, int64_t n) {
  for (int b = 0; b < batch; ++b)
    std::memcpy(dst + (int64_t(b) * dst_heads + dst_h0) * n,
                src + (int64_t(b) * src_heads + src_h0) * n, size_t(nh) * n * sizeof(float));
}

// The parts of one QPack block of `h` heads: q, dout (B, n, h, D) of the block's dtype, then lse,
// delta (B, h, n) fp32.
struct QPackParts {
  std::byte *q, *dout;
  float *lse, *delta;
};
QPackParts qpack_parts(std::byte* block, Dtype dt, int batch, int64_t n, int h, int D) {
  const int64_t part = int64_t(batch) * n * h * D * dtype_bytes(dt);
  float* lse = reinterpret_cast<float*>(block + 2 * part);
  return {block, block + part, lse, lse + int64_t(batch) * h * n};
}

}  // namespace

namespace {

// The sub-communicator of `group` for the schedule's group `g` (collective over `group`): the
// ranks of one group share a colour, their lowest rank.
comm::Communicator split_group(const Schedule& s, Group g, const comm::Communicator& group) {
  return group.split(group_ranks(s, g).front(), s.rank);
}

}  // namespace

Executor::Executor(Schedule schedule, comm::Communicator group)
    : s_(std::move(schedule)),
      group_(std::move(group)),
      team_(split_group(s_, Group::Team, group_)) {
  if (s_.inner_team_ranks > 1) inner_ = split_group(s_, Group::InnerTeam, group_);
  scratch_.resize(s_.buffers.size());
  if (!s_.docs.starts.empty()) doc_of_pos_ = kernels::doc_of_pos(s_.docs);
  for (size_t id = kNumUserBuffers; id < s_.buffers.size(); ++id) {
    const auto& spec = s_.buffers[id];
    if (spec.alias >= 0) {  // shares the memory of another buffer
      const int a = spec.alias;
      WF_CHECK(a >= kNumUserBuffers && a < int(id) && !spec.kept && !s_.buffers[a].kept &&
                   s_.buffers[a].alias < 0 && buffer_bytes(int(id)) <= buffer_bytes(a),
               "buffer {} cannot share the memory of buffer {}", spec.name, a);
    } else if (spec.kept) {
      kept_ids_.push_back(int(id));
    } else {
      scratch_[id].assign(size_t(own_bytes(s_, int(id)) / 4), 0.0f);
    }
  }
  // World ranks of the group's ranks, for the peers in trace spans (ranks < 2^24: exact floats).
  const float me = float(comm::Communicator::world().rank());
  std::vector<float> world(size_t(group_.size()));
  group_.all_gather(&me, 1, world.data());
  world_rank_.assign(world.begin(), world.end());
}

void Executor::replace_schedule(Schedule s) {
  WF_CHECK(s.P == s_.P && s.rank == s_.rank && s.buffers.size() == s_.buffers.size(),
           "replace_schedule: a schedule of another config");
  for (size_t i = 0; i < s.buffers.size(); ++i)
    WF_CHECK(s.buffers[i].name == s_.buffers[i].name && s.buffers[i].rows == s_.buffers[i].rows &&
                 s.buffers[i].blocks == s_.buffers[i].blocks &&
                 s.buffers[i].heads == s_.buffers[i].heads && s.buffers[i].fmt == s_.buffers[i].fmt,
             "replace_schedule: buffer {} differs", s.buffers[i].name);
  WF_USAGE_CHECK(kept_.empty(),
                 "the documents change while {} forward(s) await their backward (keep_kv); set "
                 "them before a forward",
                 kept_.size());
  s_ = std::move(s);
  doc_of_pos_.clear();
  if (!s_.docs.starts.empty()) doc_of_pos_ = kernels::doc_of_pos(s_.docs);
}

int64_t Executor::own_bytes(const Schedule& s, int buf) {
  const auto& spec = s.buffers[size_t(buf)];
  if (buf < kNumUserBuffers || spec.alias >= 0) return 0;
  return (spec.blocks * block_bytes(spec, s.cfg.batch, s.cfg.head_dim) + 3) / 4 * 4;
}

int64_t Executor::scratch_bytes() const {
  int64_t bytes = 0;
  for (const auto& b : scratch_) bytes += int64_t(b.size() * sizeof(float));
  return bytes;
}

int64_t Executor::buffer_bytes(int buf) const {
  const auto& spec = s_.buffers[size_t(buf)];
  return spec.blocks * block_bytes(spec, s_.cfg.batch, s_.cfg.head_dim);
}

std::byte* Executor::ptr(int buf, int block) {
  WF_CHECK(buf >= 0 && buf < int(s_.buffers.size()), "schedule names buffer {}", buf);
  void* base = nullptr;
  if (buf < kNumUserBuffers) {
    base = user_[buf];
  } else if (s_.buffers[buf].kept) {
    WF_CHECK(!kept_.empty(), "a backward without a forward: buffer {} is kept from the forward",
             s_.buffers[buf].name);
    const size_t k = std::find(kept_ids_.begin(), kept_ids_.end(), buf) - kept_ids_.begin();
    base = kept_.back()[k].data();
  } else {
    const int own = s_.buffers[buf].alias >= 0 ? s_.buffers[buf].alias : buf;
    base = scratch_[size_t(own)].data();
  }
  WF_CHECK(base != nullptr, "buffer {} ({}) is not bound", buf, s_.buffers[buf].name);
  return static_cast<std::byte*>(base) +
         int64_t(block) * block_bytes(s_.buffers[buf], s_.cfg.batch, s_.cfg.head_dim);
}

float* Executor::f32(int buf, int block) {
  std::byte* p = ptr(buf, block);
  WF_CHECK(s_.buffers[buf].dtype == Dtype::fp32 || s_.buffers[buf].fmt == Fmt::Stat,
           "buffer {} is {}, used as fp32", s_.buffers[buf].name,
           dtype_name(s_.buffers[buf].dtype));
  return reinterpret_cast<float*>(p);
}

bf16* Executor::b16(int buf, int block) {
  std::byte* p = ptr(buf, block);
  WF_CHECK(s_.buffers[buf].dtype == Dtype::bf16 && s_.buffers[buf].fmt != Fmt::Stat,
           "buffer {} is {}, used as bf16", s_.buffers[buf].name,
           dtype_name(s_.buffers[buf].dtype));
  return reinterpret_cast<bf16*>(p);
}

void Executor::local(const Op& op) {
  const auto& c = s_.cfg;
  const int B = c.batch, D = c.head_dim, H = c.heads, K = c.kv_heads;
  const int64_t n = s_.n, rows = int64_t(B) * n;
  auto dt = [&](int buf) { return s_.buffers[size_t(buf)].dtype; };
  auto elems = [&](int buf) {
    const auto& spec = s_.buffers[buf];
    return spec.blocks * block_elements(spec, B, D);
  };
  switch (op.local) {
    case LocalKind::PackKV: {
      const int ks = K / op.shards;
      for (int j = 0; j < op.shards; ++j) {
        std::byte* dst = ptr(op.dst, j);
        copy_heads(ptr(kInK), dt(kInK), K, j * ks, dst, dt(op.dst), 2 * ks, 0, ks, rows, D);
        copy_heads(ptr(kInV), dt(kInV), K, j * ks, dst, dt(op.dst), 2 * ks, ks, ks, rows, D);
      }
      break;
    }
    case LocalKind::UnpackKV: {
      const int ks = K / op.shards;
      for (int j = 0; j < op.shards; ++j) {
        const std::byte* src = ptr(op.src, j);
        copy_heads(src, dt(op.src), 2 * ks, 0, ptr(kOutDk), dt(kOutDk), K, j * ks, ks, rows, D);
        copy_heads(src, dt(op.src), 2 * ks, ks, ptr(kOutDv), dt(kOutDv), K, j * ks, ks, rows, D);
      }
      break;
    }
    case LocalKind::PackQPack: {
      const int hs = H / op.shards;
      const Dtype w = dt(op.dst);
      for (int j = 0; j < op.shards; ++j) {
        const QPackParts part = qpack_parts(ptr(op.dst, j), w, B, n, hs, D);
        copy_heads(ptr(kInQ), dt(kInQ), H, j * hs, part.q, w, hs, 0, hs, rows, D);
        copy_heads(ptr(kInDout), dt(kInDout), H, j * hs, part.dout, w, hs, 0, hs, rows, D);
        copy_stat_heads(f32(kInLse), H, j * hs, part.lse, hs, 0, hs, B, n);
        if (user_[kInDelta] != nullptr) {
          copy_stat_heads(f32(kInDelta), H, j * hs, part.delta, hs, 0, hs, B, n);
          continue;
        }
        kernels::AttnDims dims{B, int(n), int(n), hs, hs, D};
        const auto full = Strides3::contiguous(int(n), H, D);
        const auto st = Strides2::contiguous(hs, int(n));
        const int64_t off = int64_t(j) * hs * D;
        if (dt(kInO) == Dtype::bf16) {
          kernels::attn_bwd_preprocess_bf16(dims, b16(kInO) + off, full, b16(kInDout) + off, full,
                                            part.delta, st);
        } else {
          kernels::attn_bwd_preprocess(dims, f32(kInO) + off, full, f32(kInDout) + off, full,
                                       part.delta, st);
        }
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
            copy_stat_heads(f32(one), spec.heads, j * hs, f32(many, j), hs, 0, hs, B, n);
          else
            copy_stat_heads(f32(many, j), hs, 0, f32(one), spec.heads, j * hs, hs, B, n);
        } else {
          WF_CHECK(spec.fmt == Fmt::Rows, "shard/merge of buffer {}", spec.name);
          if (shard)
            copy_heads(ptr(one), dt(one), spec.heads, j * hs, ptr(many, j), dt(many), hs, 0, hs,
                       rows, D);
          else
            copy_heads(ptr(many, j), dt(many), hs, 0, ptr(one), dt(one), spec.heads, j * hs, hs,
                       rows, D);
        }
      }
      break;
    }
    case LocalKind::InitOut: {
      std::fill_n(f32(op.dst), elems(op.dst), 0.0f);
      std::fill_n(f32(op.dst2), elems(op.dst2), -std::numeric_limits<float>::infinity());
      break;
    }
    case LocalKind::Zero:
      std::memset(ptr(op.dst), 0, size_t(buffer_bytes(op.dst)));  // 0 in fp32 and bf16
      break;
    case LocalKind::Add: {
      float* d = f32(op.dst);
      const float* x = f32(op.src);
      const int64_t m = elems(op.dst);
      for (int64_t i = 0; i < m; ++i) d[i] += x[i];
      break;
    }
    case LocalKind::Copy:
      WF_CHECK(elems(op.src) == elems(op.dst), "copy of buffer {} into {} of another size",
               s_.buffers[op.src].name, s_.buffers[op.dst].name);
      copy_elements(ptr(op.src), dt(op.src), ptr(op.dst), dt(op.dst), elems(op.dst));
      break;
  }
}

namespace {

// Query rows [r0, r0 + rows) of compute op `op` (relative to its query segment) with the kernels
// of element type T: q (a Rows block, or the QPack block of the backward) and K,V of type T, the
// accumulators fp32. `q_block`, `kv_block`, `out`, `out2`: the op's blocks (K,V and dK,dV at the
// key segment's first row); n rows per block.
template <class T>
void compute_rows(const Op& op, int batch, int head_dim, int64_t n, std::byte* q_block,
                  const std::byte* kv_block, float* out, float* out2, int64_t r0, int64_t rows,
                  const int32_t* doc_of_pos, int64_t window) {
  const int h = op.heads, k = op.kv_heads, D = head_dim;
  const int64_t row = op.qseg.row0 + r0, q_at = row * h * D;
  const T* kv = reinterpret_cast<const T*>(kv_block);
  kernels::AttnInputs<T> t;
  t.dims = {batch, int(rows), int(op.kseg.rows), h, k, D};
  t.q_stride = {n * h * D, int64_t(h) * D, D};  // Rows blocks of h heads
  t.k = kv;                                     // KV blocks of k heads
  t.v = kv + int64_t(k) * D;
  t.kv_stride = {n * 2 * k * D, 2 * int64_t(k) * D, D};
  t.stat_stride = {int64_t(h) * n, n};  // Stat blocks of h heads
  t.scale = 1.0f / std::sqrt(float(D));
  t.causal = op.masked;
  t.q_pos0 = op.qseg.pos0 + r0;
  t.k_pos0 = op.kseg.pos0;
  t.doc_of_pos = doc_of_pos;
  t.window = op.masked ? window : 0;
  t.accumulate = true;
  if (!op.backward) {
    t.q = reinterpret_cast<const T*>(q_block) + q_at;
    kernels::run_attn_fwd(kernels::fwd_params(t, out + q_at, out2 + row));
    return;
  }
  const QPackParts part = qpack_parts(q_block, dtype_of<T>(), batch, n, h, D);
  t.q = reinterpret_cast<const T*>(part.q) + q_at;
  kernels::AttnGrads<T, float> g;
  g.dout = reinterpret_cast<const T*>(part.dout) + q_at;
  g.lse = part.lse + row;
  g.delta = part.delta + row;
  g.dq = out + q_at;
  g.dk = out2;
  g.dv = out2 + int64_t(k) * D;
  kernels::run_attn_bwd(kernels::bwd_params(t, g));
}

}  // namespace

void Executor::compute(const Op& op, std::vector<comm::Request>& reqs) {
  const auto& c = s_.cfg;
  const int64_t n = s_.n;
  const bool half = s_.buffers[op.src].dtype == Dtype::bf16;
  const int64_t e = dtype_bytes(s_.buffers[op.src].dtype);
  // The inputs (q or query package, K,V) are of the schedule's dtype, the outputs fp32.
  std::byte* qb = ptr(op.src, op.qseg.block);
  const std::byte* kvb =
      ptr(op.src2, op.kseg.block) + op.kseg.row0 * 2 * op.kv_heads * c.head_dim * e;
  float* ob = f32(op.dst, op.qseg.block);
  float* o2b = f32(op.dst2, op.dst2 >= 0 ? (op.backward ? op.kseg.block : op.qseg.block) : 0);
  if (op.backward) o2b += op.kseg.row0 * 2 * op.kv_heads * c.head_dim;  // dK,dV of the key rows
  const int32_t* docs = doc_of_pos_.empty() ? nullptr : doc_of_pos_.data();

  // Sub-blocks of query rows: between them the pending transfers get MPI progress.
  bool pending = poll(reqs);
  const int64_t chunk = pending && progress_rows_ > 0 ? progress_rows_ : op.qseg.rows;
  for (int64_t r0 = 0; r0 < op.qseg.rows; r0 += chunk) {
    const int64_t rows = std::min(chunk, op.qseg.rows - r0);
    if (half)
      compute_rows<bf16>(op, c.batch, c.head_dim, n, qb, kvb, ob, o2b, r0, rows, docs, c.window);
    else
      compute_rows<float>(op, c.batch, c.head_dim, n, qb, kvb, ob, o2b, r0, rows, docs, c.window);
    if (pending) pending = poll(reqs);
  }
}

comm::Communicator& Executor::comm_of(Group g) {
  switch (g) {
    case Group::Team:
      return team_;
    case Group::InnerTeam:
      WF_CHECK(s_.inner_team_ranks > 1, "an InnerTeam collective without an inner team");
      return inner_;
    case Group::World:
      break;
  }
  return group_;
}

void Executor::collective(const Op& op) {
  auto& comm = comm_of(op.group);
  WF_CHECK(comm.size() == op.group_size, "collective over {} ranks in a group of {}", op.group_size,
           comm.size());
  // bf16 buffers move as 2-byte elements (a QPack's fp32 statistics as two each).
  const bool half = s_.buffers[op.src].dtype == Dtype::bf16;
  switch (op.coll) {
    case CollKind::AllGather:
      if (half)
        comm.all_gather(b16(op.src), op.bytes / 2, b16(op.dst));
      else
        comm.all_gather(f32(op.src), op.bytes / 4, f32(op.dst));
      break;
    case CollKind::ReduceScatterSum:
      comm.reduce_scatter_sum(f32(op.src), f32(op.dst), op.bytes / 4);
      break;
    case CollKind::AllToAll:
      if (half)
        comm.all_to_all(b16(op.src), b16(op.dst), op.bytes / 2);
      else
        comm.all_to_all(f32(op.src), f32(op.dst), op.bytes / 4);
      break;
    case CollKind::ReduceScatterLse: {
      // dst's blocks of (B, n, H, D) and (B, H, n) are, one after another, a batch of blocks * B.
      const auto& spec = s_.buffers[op.dst];
      const int batch = s_.cfg.batch * spec.blocks;
      if (half)
        comm.reduce_scatter_lse(b16(op.src), f32(op.src2), b16(op.dst), f32(op.dst2), batch, s_.n,
                                spec.heads, s_.cfg.head_dim, kernels::lse_merge_rows);
      else
        comm.reduce_scatter_lse(f32(op.src), f32(op.src2), f32(op.dst), f32(op.dst2), batch, s_.n,
                                spec.heads, s_.cfg.head_dim, kernels::lse_merge_rows);
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
      for (int id : kept_ids_) fresh.emplace_back(size_t(own_bytes(s_, id) / 4), 0.0f);
      spare_.push_back(std::move(fresh));
    }
    kept_.push_back(std::move(spare_.back()));
    spare_.pop_back();
  }
  PhaseStats st;
  const auto g0 = group_.counters();
  const comm::ByteCounters t0 = team_.counters(),
                           i0 = s_.inner_team_ranks > 1 ? inner_.counters() : comm::ByteCounters{};
  std::vector<comm::Request> reqs(ops.size());
  std::set<int> rounds;
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
        if (s_.buffers[op.src].dtype == Dtype::bf16)
          reqs[i] = group_.isend(b16(op.src), op.bytes / 2, op.peer, op.tag);
        else
          reqs[i] = group_.isend(f32(op.src), op.bytes / 4, op.peer, op.tag);
        rounds.insert(op.round);
        break;
      case OpKind::Recv:
        if (s_.buffers[op.dst].dtype == Dtype::bf16)
          reqs[i] = group_.irecv(b16(op.dst), op.bytes / 2, op.peer, op.tag);
        else
          reqs[i] = group_.irecv(f32(op.dst), op.bytes / 4, op.peer, op.tag);
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
        compute(op, reqs);
        st.flops += op.flops;
        break;
    }
    if (traced) trace_op(int(i), start_ns);
  }
  for (auto& r : reqs) r.wait();
  if (traced) end_trace();
  st.ms = total.ms();
  const auto& g1 = group_.counters();
  const auto& t1 = team_.counters();
  const comm::ByteCounters i1 = s_.inner_team_ranks > 1 ? inner_.counters() : comm::ByteCounters{};
  st.p2p_bytes = g1.p2p_bytes - g0.p2p_bytes;
  st.p2p_sends = g1.p2p_sends - g0.p2p_sends;
  st.p2p_steps = int64_t(rounds.size());
  st.coll_bytes = (g1.coll_bytes - g0.coll_bytes) + (t1.coll_bytes - t0.coll_bytes) +
                  (i1.coll_bytes - i0.coll_bytes);
  st.coll_formula_bytes = (g1.coll_formula_bytes - g0.coll_formula_bytes) +
                          (t1.coll_formula_bytes - t0.coll_formula_bytes) +
                          (i1.coll_formula_bytes - i0.coll_formula_bytes);
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

const char* group_name(Group g) {
  switch (g) {
    case Group::World:
      return "world";
    case Group::Team:
      return "team";
    case Group::InnerTeam:
      return "inner_team";
  }
  return "group";
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
                 {"bytes", op.bytes},
                 {"round", op.round},
                 {"tag", op.tag},
                 {"op", int64_t(i)},
                 {"phase", 0, phase_name_},
                 {"schedule", 0, kTraceSchedule}},
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
  const trace::Arg phase{"phase", 0, phase_name_}, sched{"schedule", 0, kTraceSchedule},
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
                    {{"group", 0, group_name(op.group)},
                     {"group_size", op.group_size},
                     {"bytes", op.bytes},
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
        bytes += t.bytes;
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
