#include "wallfacer/seqpar/attention.h"

#include "wallfacer/seqpar/executor.h"
#include "wallfacer/seqpar/schedule.h"

namespace wallfacer::seqpar {

struct DistAttention::Impl {
  Executor exec;
  AttnStats stats;
  Impl(const AttnConfig& cfg, comm::Communicator& group)
      : exec(make_schedule(cfg, group.size(), group.rank()), group,
             group.split(group.rank() / (cfg.strategy == Strategy::WallFacer ? cfg.teams : 1),
                         group.rank())) {}
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
  const auto st = impl_->exec.run(impl_->exec.schedule().fwd, t);
  auto& s = impl_->stats;
  s.p2p_bytes_fwd = st.p2p_bytes;
  s.p2p_steps_fwd = st.p2p_steps;
  s.coll_bytes_fwd = st.coll_bytes;
  s.fwd_ms = st.ms;
  s.exposed_comm_fwd_ms = st.exposed_ms;
  s.attn_flops = st.flops;
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
  const auto st = impl_->exec.run(impl_->exec.schedule().bwd, t);
  auto& s = impl_->stats;
  s.p2p_bytes_bwd = st.p2p_bytes;
  s.p2p_steps_bwd = st.p2p_steps;
  s.coll_bytes_bwd = st.coll_bytes;
  s.bwd_ms = st.ms;
  s.exposed_comm_bwd_ms = st.exposed_ms;
}

const AttnStats& DistAttention::stats() const { return impl_->stats; }

void DistAttention::set_progress_rows(int64_t rows) { impl_->exec.set_progress_rows(rows); }

}  // namespace wallfacer::seqpar
