#include "wallfacer/seqpar/attn_run.h"

#include <filesystem>
#include <optional>

#include "wallfacer/comm/communicator.h"
#include "wallfacer/comm/trace_merge.h"
#include "wallfacer/core/bf16.h"
#include "wallfacer/core/error.h"
#include "wallfacer/core/file.h"
#include "wallfacer/core/memory.h"
#include "wallfacer/core/npy.h"
#include "wallfacer/core/trace.h"
#include "wallfacer/kernels/attention.h"
#include "wallfacer/seqpar/attention.h"
#include "wallfacer/seqpar/schedule.h"

namespace wallfacer::seqpar {

struct AttnRun::State {
  // This rank's rows: inputs, outputs and gradients in fp32, and with bf16 their bf16 twins (the
  // inputs rounded; the outputs widened to fp32 after the iterations, exactly).
  struct Tensors {
    std::vector<float> q, k, v, dout, out, lse, dq, dk, dv;
    std::vector<bf16> q16, k16, v16, dout16, out16, dq16, dk16, dv16;
  };
  comm::MpiSession session{nullptr, nullptr};  // first in, last out
  comm::Communicator everyone = comm::Communicator::world();
  std::optional<comm::Communicator> world;  // by layout rank, after place()
  AttnConfig cfg;
  AttnRunOptions opts;
  int P = 1;
  comm::ClockSync clocks;
  comm::Topology topo;
  Tensors t;
  std::vector<AttnStats> iterations;

  bool half() const { return cfg.dtype == Dtype::bf16; }
  void fill_rank_inputs();
  void run_iterations();
  AttnCheck check(const AttnTensors& got, const AttnTensors& in) const;
  void dump(const AttnTensors& got, const AttnTensors& in) const;
};

AttnRun::AttnRun(const AttnConfig& cfg, const AttnRunOptions& options)
    : s_(std::make_unique<State>()) {
  State& s = *s_;
  s.cfg = cfg;
  s.opts = options;
  s.P = s.everyone.size();
  s.topo = comm::discover_topology();
  s.cfg.inner = resolved_inner(cfg.strategy, cfg.inner, s.P, s.topo.max_ranks_per_node());
  // Before any collective but the topology's (which every rank makes): every rank reaches the
  // same verdict.
  validate(s.cfg, s.P);
  WF_USAGE_CHECK(cfg.head_dim <= kernels::kMaxHeadDim, "--head-dim is {}; the kernels take 1..{}",
                 cfg.head_dim, kernels::kMaxHeadDim);
  {
    // Eight tensors of this rank's rows; rank 0 also holds the whole sequence's for --check/--dump.
    const double whole =
        4.0 * cfg.batch * double(cfg.seq) * (cfg.heads + cfg.kv_heads) * cfg.head_dim;
    check_memory(4.0 * whole / s.P + (options.check || !options.dump.empty() ? 6.0 * whole : 0.0),
                 "attention on these shapes");
  }
  if (!options.trace.empty()) {
    comm::check_trace_path(s.everyone, options.trace);
    s.clocks = comm::sync_clocks(s.everyone);
  }
}

AttnRun::~AttnRun() = default;

int AttnRun::ranks() const { return s_->P; }
const AttnConfig& AttnRun::config() const { return s_->cfg; }
const comm::Topology& AttnRun::topology() const { return s_->topo; }
int AttnRun::rank() const { return s_->world->rank(); }

void AttnRun::place(const std::vector<int>& layout_rank_of) {
  State& s = *s_;
  WF_CHECK(int(layout_rank_of.size()) == s.P, "layout ranks of {} ranks for {}",
           layout_rank_of.size(), s.P);
  s.world = s.everyone.split(0, layout_rank_of[size_t(s.everyone.rank())]);
  const bool writes = s.world->rank() == 0 && !s.opts.dump.empty();
  s.world->agree([&] {  // only rank 0 writes: a folder it cannot create stops every rank now
    if (writes) make_directories(s.opts.dump, "--dump");
  });
}

void AttnRun::State::fill_rank_inputs() {
  const auto pos = local_positions(cfg, P, world->rank());
  const int64_t n = int64_t(pos.size()), B = cfg.batch, D = cfg.head_dim;
  t.q.resize(size_t(B * n * cfg.heads * D));
  t.k.resize(size_t(B * n * cfg.kv_heads * D));
  t.v.resize(t.k.size());
  t.dout.resize(t.q.size());
  fill_inputs(opts.seed, InputTensor::Q, pos, cfg.batch, cfg.heads, cfg.head_dim, t.q.data());
  fill_inputs(opts.seed, InputTensor::K, pos, cfg.batch, cfg.kv_heads, cfg.head_dim, t.k.data());
  fill_inputs(opts.seed, InputTensor::V, pos, cfg.batch, cfg.kv_heads, cfg.head_dim, t.v.data());
  fill_inputs(opts.seed, InputTensor::Dout, pos, cfg.batch, cfg.heads, cfg.head_dim, t.dout.data());
  t.out.resize(t.q.size());
  t.lse.resize(size_t(B * cfg.heads * n));
  t.dq.resize(t.q.size());
  t.dk.resize(t.k.size());
  t.dv.resize(t.v.size());
  if (half()) {
    t.q16 = to_bf16(t.q), t.k16 = to_bf16(t.k), t.v16 = to_bf16(t.v), t.dout16 = to_bf16(t.dout);
    t.out16.resize(t.q.size()), t.dq16.resize(t.q.size()), t.dk16.resize(t.k.size()),
        t.dv16.resize(t.v.size());
  }
}

void AttnRun::State::run_iterations() {
  DistAttention attn(cfg, *world);
  attn.set_progress_rows(opts.progress_rows);
  if (!opts.trace.empty()) {
    // Room for every span: each op of this rank's schedule once per phase.
    const size_t ops = size_t(schedule_ops(cfg, P, world->rank()));
    trace::start(size_t(opts.iters) * (ops + 8) + 64);
  }
  for (int it = 0; it < opts.iters; ++it) {
    world->barrier();
    trace::Span span("iteration", trace::Cat::Phase, {{"iter", it}});
    if (half()) {
      attn.forward(t.q16.data(), t.k16.data(), t.v16.data(), t.out16.data(), t.lse.data());
      attn.backward(t.q16.data(), t.k16.data(), t.v16.data(), t.out16.data(), t.lse.data(),
                    t.dout16.data(), t.dq16.data(), t.dk16.data(), t.dv16.data());
    } else {
      attn.forward(t.q.data(), t.k.data(), t.v.data(), t.out.data(), t.lse.data());
      attn.backward(t.q.data(), t.k.data(), t.v.data(), t.out.data(), t.lse.data(), t.dout.data(),
                    t.dq.data(), t.dk.data(), t.dv.data());
    }
    iterations.push_back(attn.stats());
  }
  trace::stop();
  if (half()) {
    t.out = to_fp32(t.out16), t.dq = to_fp32(t.dq16), t.dk = to_fp32(t.dk16),
    t.dv = to_fp32(t.dv16);
  }
}

void AttnRun::iterate() {
  s_->fill_rank_inputs();
  s_->run_iterations();
}

RunSummary AttnRun::summarize() { return summarize_run(*s_->world, s_->iterations); }

void AttnRun::write_trace(const nlohmann::json& metadata) {
  // Every rank learns whether rank 0 wrote it; a failure ends the job through main's error path.
  if (!s_->opts.trace.empty())
    comm::write_trace(s_->everyone, s_->opts.trace, s_->clocks, metadata);
}

// The naive fp64 reference where affordable, else the fp32 kernel on the whole sequence (then both
// sides carry fp32 error: twice the tolerance).
AttnCheck AttnRun::State::check(const AttnTensors& got, const AttnTensors& in) const {
  AttnCheck c;
  c.checked = true;
  const double work =
      double(cfg.batch) * cfg.heads * double(cfg.seq) * double(cfg.seq) * cfg.head_dim;
  c.fp64 = work <= 4e9;
  const auto ref = reference_attention(cfg, in, c.fp64);
  c.errors = attention_errors(got, ref);
  // bf16: the reference sees the same (rounded) inputs; the fp32 kernel's error is far below the
  // bf16 tolerances, which stay as they are.
  AttnTolerance tol = attn_tolerance(cfg.dtype);
  if (!c.fp64 && !half()) tol = {2 * tol.out, 2 * tol.lse, 2 * tol.grad};
  c.pass = c.errors.within(tol);
  return c;
}

void AttnRun::State::dump(const AttnTensors& got, const AttnTensors& in) const {
  const int64_t B = cfg.batch, D = cfg.head_dim;
  const std::vector<int64_t> qshape{B, cfg.seq, cfg.heads, D}, kshape{B, cfg.seq, cfg.kv_heads, D},
      lshape{B, cfg.heads, cfg.seq};
  auto put = [&](const char* name, const std::vector<float>& x, const std::vector<int64_t>& shape) {
    write_npy((std::filesystem::path(opts.dump) / name).string(), x.data(), shape);
  };
  put("q.npy", in.q, qshape);
  put("k.npy", in.k, kshape);
  put("v.npy", in.v, kshape);
  put("do.npy", in.dout, qshape);
  put("o.npy", got.o, qshape);
  put("lse.npy", got.lse, lshape);
  put("dq.npy", got.dq, qshape);
  put("dk.npy", got.dk, kshape);
  put("dv.npy", got.dv, kshape);
  // The documents (one of length seq without --docs).
  std::vector<int64_t> lengths = cfg.doc_lengths;
  if (lengths.empty()) lengths = {cfg.seq};
  write_npy((std::filesystem::path(opts.dump) / "docs.npy").string(), lengths.data(),
            {int64_t(lengths.size())});
  // The sliding window as run (0: none; a window of the sequence or more runs as 0).
  const int64_t window = cfg.window;
  write_npy((std::filesystem::path(opts.dump) / "window.npy").string(), &window, {1});
}

AttnCheck AttnRun::check_and_dump() {
  State& s = *s_;
  AttnCheck c;
  if (!s.opts.check && s.opts.dump.empty()) return c;
  const AttnTensors got = gather_outputs(*s.world, s.cfg, s.t.out.data(), s.t.lse.data(),
                                         s.t.dq.data(), s.t.dk.data(), s.t.dv.data());
  double verdict = 0;
  if (s.world->rank() == 0) {
    const auto in = make_inputs(s.cfg, s.opts.seed);
    if (s.opts.check) {
      c = s.check(got, in);
      verdict = c.pass ? 0 : 1;
    }
    if (!s.opts.dump.empty()) s.dump(got, in);
  }
  s.world->all_reduce_sum(&verdict, 1);
  c.pass = verdict == 0;
  return c;
}

void AttnRun::finish() { s_->world->barrier(); }

}  // namespace wallfacer::seqpar
