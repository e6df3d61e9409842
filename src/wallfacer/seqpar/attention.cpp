#include "wallfacer/seqpar/attention.h"

#include <utility>

#include "wallfacer/core/error.h"
#include "wallfacer/seqpar/executor.h"
#include "wallfacer/seqpar/schedule.h"

namespace wallfacer::seqpar {
namespace {

// The executor of `cfg` on `group` (it splits the groups of its schedule's team collectives).
Executor make_executor(const AttnConfig& cfg, comm::Communicator& group) {
  return Executor(make_schedule(cfg, group.size(), group.rank()), group);
}

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

struct DistAttention::Impl {
  Executor exec;
  AttnStats stats;
  Dtype dtype = Dtype::fp32;

  AttnConfig cfg;  // as built, with the documents of set_documents
  int P = 1, rank = 0;

  Impl(const AttnConfig& cfg_in, comm::Communicator& group)
      : exec(make_executor(cfg_in, group)),
        dtype(cfg_in.dtype),
        cfg(cfg_in),
        P(group.size()),
        rank(group.rank()) {}

  void run(bool bwd, const UserTensors& t) {
    const PhaseStats st = exec.run(bwd ? exec.schedule().bwd : exec.schedule().fwd, t);
    auto& s = stats;
    (bwd ? s.p2p_bytes_bwd : s.p2p_bytes_fwd) = st.p2p_bytes;
    (bwd ? s.p2p_steps_bwd : s.p2p_steps_fwd) = st.p2p_steps;
    (bwd ? s.coll_bytes_bwd : s.coll_bytes_fwd) = st.coll_bytes;
    (bwd ? s.coll_formula_bytes_bwd : s.coll_formula_bytes_fwd) = st.coll_formula_bytes;
    (bwd ? s.bwd_ms : s.fwd_ms) = st.ms;
    (bwd ? s.exposed_comm_bwd_ms : s.exposed_comm_fwd_ms) = st.exposed_ms;
    if (!bwd) s.attn_flops = st.flops;
  }

  // A call with element type T (the dtype the object was built for).
  template <class T>
  void forward(const T* q, const T* k, const T* v, T* o, float* lse) {
    check_dtype(dtype, dtype_of<T>());
    run(false, forward_tensors(q, k, v, o, lse));
  }
  template <class T>
  void backward(const T* q, const T* k, const T* v, const T* o, const float* lse, const T* dout,
                T* dq, T* dk, T* dv) {
    check_dtype(dtype, dtype_of<T>());
    run(true, backward_tensors(q, k, v, o, lse, dout, dq, dk, dv));
  }

  // The documents of the next calls: the schedules are rebuilt, the buffers and groups kept.
  void set_documents(std::vector<int64_t> lengths) {
    cfg.doc_lengths = std::move(lengths);
    validate(cfg, P);
    exec.replace_schedule(make_schedule(cfg, P, rank));
  }
};

DistAttention::DistAttention(const AttnConfig& cfg, comm::Communicator& group) {
  validate(cfg, group.size());
  impl_ = std::make_unique<Impl>(cfg, group);
}

DistAttention::~DistAttention() = default;

DistAttentionMemory dist_attention_memory(const AttnConfig& cfg, int P, int rank) {
  const Schedule s = make_schedule(cfg, P, rank);
  DistAttentionMemory m;
  for (size_t b = kNumUserBuffers; b < s.buffers.size(); ++b)
    (s.buffers[b].kept ? m.kept_per_forward : m.scratch) += Executor::own_bytes(s, int(b));
  return m;
}

void DistAttention::forward(const float* q, const float* k, const float* v, float* o, float* lse) {
  impl_->forward(q, k, v, o, lse);
}

void DistAttention::backward(const float* q, const float* k, const float* v, const float* o,
                             const float* lse, const float* dout, float* dq, float* dk, float* dv) {
  impl_->backward(q, k, v, o, lse, dout, dq, dk, dv);
}

void DistAttention::forward(const bf16* q, const bf16* k, const bf16* v, bf16* o, float* lse) {
  impl_->forward(q, k, v, o, lse);
}

void DistAttention::backward(const bf16* q, const bf16* k, const bf16* v, const bf16* o,
                             const float* lse, const bf16* dout, bf16* dq, bf16* dk, bf16* dv) {
  impl_->backward(q, k, v, o, lse, dout, dq, dk, dv);
}

const AttnStats& DistAttention::stats() const { return impl_->stats; }

void DistAttention::set_progress_rows(int64_t rows) { impl_->exec.set_progress_rows(rows); }

void DistAttention::set_documents(const int64_t* lengths, int count) {
  WF_USAGE_CHECK(count >= 0 && (count == 0 || lengths != nullptr),
                 "set_documents: {} lengths at {}; give count >= 0 lengths (0: one document)",
                 count, static_cast<const void*>(lengths));
  impl_->set_documents(lengths ? std::vector<int64_t>(lengths, lengths + count)
                               : std::vector<int64_t>{});
}

std::vector<int64_t> DistAttention::local_positions() const {
  return seqpar::local_positions(impl_->cfg, impl_->P, impl_->rank);
}

}  // namespace wallfacer::seqpar
