#include "wallfacer/plan/predicted_trace.h"

#include <fmt/format.h>

#include <cmath>

#include "wallfacer/core/trace.h"
#include "wallfacer/plan/attention_program.h"
#include "wallfacer/plan/report.h"
#include "wallfacer/seqpar/schedule.h"

namespace wallfacer::plan {
namespace {

const char* coll_name(Coll c) {
  switch (c) {
    case Coll::AllGather:
      return "all_gather";
    case Coll::ReduceScatter:
      return "reduce_scatter";
    case Coll::AllReduce:
      return "all_reduce";
    case Coll::AllToAll:
      return "all_to_all";
  }
  return "collective";
}

// The span of op `o` as a trace event (times in ns from t0_s).
trace::Event to_event(const Program& prog, const Op& o, const SimSpan& s, const char* phase,
                      double t0_s) {
  const trace::Arg ph{"phase", 0, phase}, index{"op", s.op};
  const int64_t bytes = std::llround(o.bytes);
  trace::Event e;
  switch (o.kind) {
    case Op::Kind::Compute:
      e = trace::make_event(o.work == Work::AttentionBwd   ? "attention backward"
                            : o.work == Work::AttentionFwd ? "attention forward"
                                                           : "gemm",
                            trace::Cat::Compute, {{"flops", std::llround(o.flops)}, index, ph});
      break;
    case Op::Kind::Send:
    case Op::Kind::Recv:
      e = trace::make_event(o.kind == Op::Kind::Send ? "send" : "recv", trace::Cat::Comm,
                            {{"peer", o.peer}, {"bytes", bytes}, {"tag", o.tag}, index, ph});
      e.lane = 1;
      break;
    case Op::Kind::Wait:
      e = trace::make_event("wait", trace::Cat::Wait, {{"request", o.request}, index, ph});
      break;
    case Op::Kind::Collective:
      e = trace::make_event(coll_name(o.coll), trace::Cat::Comm,
                            {{"group_size", int64_t(prog.groups.at(size_t(o.group)).size())},
                             {"bytes", bytes},
                             index,
                             ph});
      break;
  }
  e.t0 = std::llround((t0_s + s.t0) * 1e9);
  e.t1 = std::llround((t0_s + s.t1) * 1e9);
  return e;
}

}  // namespace

nlohmann::json predicted_trace(const PlanInput& in, const Candidate& c) {
  const Cluster& cl = in.cluster;
  const int P = in.gpus;
  const seqpar::AttnConfig cfg = attention_config(in.model, in.seq, c);
  seqpar::validate(cfg, P);
  const Machine m = Machine::from(cl, candidate_devices(c, P), cfg.head_dim);
  std::vector<std::vector<trace::Event>> events(static_cast<size_t>(P));
  double t = 0, fwd_s = 0, bwd_s = 0;
  for (bool bwd : {false, true}) {
    const Program prog =
        attention_program(cfg, P, bwd, cl.dtype_bytes, cl.attention_tile_q, cl.attention_tile_k);
    std::vector<SimSpan> spans;
    const SimResult r = simulate(prog, m, &spans);
    for (const SimSpan& s : spans)
      events[size_t(s.rank)].push_back(to_event(prog, prog.ops[size_t(s.rank)][size_t(s.op)], s,
                                                bwd ? "backward" : "forward", t));
    (bwd ? bwd_s : fwd_s) = r.time;
    t += r.time;
  }
  std::vector<trace::RankTrace> ranks(static_cast<size_t>(P));
  std::vector<std::string> hosts;
  for (int r = 0; r < P; ++r) {
    ranks[size_t(r)].rank = r;
    ranks[size_t(r)].host = fmt::format("node {}", m.node(r));
    ranks[size_t(r)].events = trace::rank_events_json(events[size_t(r)], 0);
    hosts.push_back(ranks[size_t(r)].host);
  }
  nlohmann::json meta{{"command", "plan"},
                      {"label", c.label()},
                      {"cluster", cl.name},
                      {"config", describe_config(cfg, P, c.placement)},
                      {"predicted_ms", {{"fwd", fwd_s * 1e3}, {"bwd", bwd_s * 1e3}}},
                      {"alignment_error_us", 0.0},
                      {"ranks", P},
                      {"hosts", hosts}};
  return trace::chrome_trace(ranks, meta);
}

}  // namespace wallfacer::plan
