#include "wallfacer/plan/planner.h"

#include <algorithm>
#include <array>
#include <exception>
#include <functional>
#include <map>
#include <numeric>
#include <set>
#include <tuple>
#include <unordered_map>

#include "wallfacer/core/error.h"
#include "wallfacer/core/threads.h"
#include "wallfacer/plan/attention_program.h"
#include "wallfacer/seqpar/schedule.h"

namespace wallfacer::plan {

using seqpar::Strategy;

std::string Candidate::strategy_label() const {
  if (ulysses > 1) return fmt::format("ulysses x {}", seqpar::strategy_name(strategy));
  return fmt::format("{}", seqpar::strategy_name(strategy));
}

std::string Candidate::label() const {
  // "ulysses4 x " for a hybrid, the name, " C=2" with teams, " W=8" with inner rings.
  const seqpar::StrategyTraits& t = seqpar::traits(strategy);
  std::string s =
      fmt::format("{}{}", ulysses > 1 ? fmt::format("ulysses{} x ", ulysses) : "", t.name);
  if (t.has_teams) s = fmt::format("{} C={}", s, teams);
  if (t.has_inner) s = fmt::format("{} W={}", s, inner);
  if (placement == Placement::Default) return s;
  return fmt::format("{} {}", s, placement_name(placement));
}

seqpar::Dtype attention_dtype(const Cluster& cl) {
  return cl.dtype_bytes == 2 ? seqpar::Dtype::bf16 : seqpar::Dtype::fp32;
}

seqpar::AttnConfig attention_config(const ModelSpec& m, int64_t seq, const Candidate& c,
                                    seqpar::Dtype dtype) {
  seqpar::AttnConfig cfg;
  cfg.dtype = dtype;
  cfg.strategy = c.strategy;
  cfg.teams = seqpar::team_size(c.strategy, c.teams);
  cfg.batch = m.batch;
  cfg.seq = seq;
  cfg.heads = m.heads;
  cfg.kv_heads = m.kv_heads;
  cfg.head_dim = m.head_dim();
  cfg.causal = m.causal;
  cfg.ulysses = c.ulysses;
  cfg.keep_kv = c.keep_kv;
  if (seqpar::traits(c.strategy).has_inner) cfg.inner = c.inner;
  return cfg;
}

std::vector<int> candidate_devices(const Candidate& c, int P) {
  TeamGroups l{P, 1, P};
  const int C = seqpar::team_size(c.strategy, c.teams);
  if (c.ulysses > 1 && C > 1 && P % c.ulysses == 0) {
    // Ulysses x WallFacer: every Ulysses team on u consecutive devices (Ulysses innermost), the
    // ring ranks j ordered as the placement orders WallFacer's ranks on P/u devices.
    const int u = c.ulysses, ring = P / u;
    const std::vector<int> inner =
        device_order({ring, c.teams, ring / (c.teams * c.teams)}, c.placement);
    std::vector<int> dev(static_cast<size_t>(P));
    for (int r = 0; r < P; ++r) dev[size_t(r)] = inner[size_t(r / u)] * u + r % u;
    return dev;
  }
  if (c.ulysses > 1) {
    l = {P, c.ulysses, P / c.ulysses};
  } else if (C > 1) {
    l = {P, C, P / (C * C)};
  }
  return device_order(l, c.placement);
}

namespace {

double scratch_of(const seqpar::Schedule& s) {
  double e = 0;
  for (size_t b = seqpar::kNumUserBuffers; b < s.buffers.size(); ++b)
    // Kept ones: one per layer, counted apart (kept_elements); aliases: no memory of their own.
    if (!s.buffers[b].kept && s.buffers[b].alias < 0)
      e += double(s.buffers[b].blocks) *
           double(seqpar::block_elements(s.buffers[b], s.cfg.batch, s.cfg.head_dim));
  return e;
}

// The simulator's collective that runs a schedule's.
Coll simulated(seqpar::CollKind c) {
  switch (c) {
    case seqpar::CollKind::AllGather:
      return Coll::AllGather;
    case seqpar::CollKind::ReduceScatterSum:
    case seqpar::CollKind::ReduceScatterLse:
      return Coll::ReduceScatter;
    case seqpar::CollKind::AllToAll:
      break;
  }
  return Coll::AllToAll;
}

// Appends one rank's ops of one phase of its schedule to `prog` (layout ranks = schedule ranks).
// merge: consecutive computes of one kind become one of their summed FLOPs (the same time within
// rounding; a trace shows them as one).
void emit(Program& prog, const seqpar::Schedule& s, const std::vector<seqpar::Op>& ops, int tile_q,
          int tile_k, bool merge = false) {
  auto& out = prog.ops[size_t(s.rank)];
  for (size_t i = 0; i < ops.size(); ++i) {
    const seqpar::Op& o = ops[i];
    const int req = static_cast<int>(i);
    switch (o.kind) {
      case seqpar::OpKind::Local:
        break;
      case seqpar::OpKind::Send:
        out.push_back(Op::send(o.peer, double(o.bytes), req, o.tag));
        break;
      case seqpar::OpKind::Recv:
        out.push_back(Op::recv(o.peer, double(o.bytes), req, o.tag));
        break;
      case seqpar::OpKind::Wait:
        for (int w : o.waits) out.push_back(Op::wait(w));
        break;
      case seqpar::OpKind::Collective: {
        const std::vector<int> members = seqpar::group_ranks(s, o.group);
        WF_CHECK(int(members.size()) == o.group_size, "collective of {} ranks on a group of {}",
                 o.group_size, members.size());
        out.push_back(Op::collective(simulated(o.coll), prog.group(members), double(o.bytes)));
        break;
      }
      case seqpar::OpKind::Compute: {
        // The kernel's work: kept pairs, or whole tiles where the mask cuts them.
        const double work =
            o.pairs > 0 ? double(seqpar::compute_tile_pairs(s, o, tile_q, tile_k)) / double(o.pairs)
                        : 1.0;
        const Work kind = o.backward ? Work::AttentionBwd : Work::AttentionFwd;
        if (merge && !out.empty() && out.back().kind == Op::Kind::Compute &&
            out.back().work == kind) {
          out.back().flops += o.flops * work;
        } else {
          out.push_back(Op::compute(kind, o.flops * work));
        }
        break;
      }
    }
  }
}

}  // namespace

namespace {

// The forward and the backward programs of every rank, each rank's schedule made once.
void attention_programs(const seqpar::AttnConfig& cfg, int P, int tile_q, int tile_k, Program* fwd,
                        Program* bwd, double* scratch_elements) {
  if (fwd) *fwd = Program(P);
  if (bwd) *bwd = Program(P);
  double scratch = 0;
  for (int r = 0; r < P; ++r) {
    const seqpar::Schedule s = seqpar::make_schedule(cfg, P, r);
    scratch = std::max(scratch, scratch_of(s));
    if (fwd) emit(*fwd, s, s.fwd, tile_q, tile_k);
    if (bwd) emit(*bwd, s, s.bwd, tile_q, tile_k);
  }
  if (scratch_elements) *scratch_elements = scratch;
}

}  // namespace

Program attention_program(const seqpar::AttnConfig& cfg, int P, bool backward, int tile_q,
                          int tile_k, double* scratch_elements) {
  Program prog;
  attention_programs(cfg, P, tile_q, tile_k, backward ? nullptr : &prog, backward ? &prog : nullptr,
                     scratch_elements);
  return prog;
}

namespace {

// The causal ring without the zigzag layout, documents or a window: rank r sees r + 1 blocks.
bool is_contiguous_causal_ring(const seqpar::AttnConfig& cfg) {
  return cfg.strategy == seqpar::Strategy::Ring && cfg.ulysses <= 1 && cfg.causal &&
         !seqpar::uses_zigzag_layout(cfg) && cfg.layout == seqpar::Layout::Strategy &&
         cfg.doc_lengths.empty() && cfg.window <= 0;
}

// One rank's program reduced to what its timing depends on, relative to the rank: consecutive
// computes merged (by kind), peers as offsets from the rank (mod P), requests renumbered in the
// order they are made, collective groups as offsets of their members.
struct Shape {
  struct Step {
    Op::Kind kind = Op::Kind::Compute;
    int work = 0, offset = 0, tag = 0, request = 0, coll = 0;
    double amount = 0;  // flops or bytes
    std::vector<int> members;
    bool operator==(const Step&) const = default;
  };
  std::vector<Step> steps;
};

Shape shape_of(const Program& prog, int r) {
  const int P = prog.ranks();
  Shape out;
  std::unordered_map<int, int> renumbered;
  for (const Op& o : prog.ops[size_t(r)]) {
    Shape::Step st;
    st.kind = o.kind;
    switch (o.kind) {
      case Op::Kind::Compute:
        if (!out.steps.empty() && out.steps.back().kind == Op::Kind::Compute &&
            out.steps.back().work == int(o.work)) {
          out.steps.back().amount += o.flops;
          continue;
        }
        st.work = int(o.work);
        st.amount = o.flops;
        break;
      case Op::Kind::Send:
      case Op::Kind::Recv:
        st.offset = ((o.peer - r) % P + P) % P;
        st.tag = o.tag;
        st.amount = o.bytes;
        st.request = renumbered.emplace(o.request, int(renumbered.size())).first->second;
        break;
      case Op::Kind::Wait:
        st.request = renumbered.at(o.request);
        break;
      case Op::Kind::Collective:
        st.coll = int(o.coll);
        st.amount = o.bytes;
        for (int m : prog.groups[size_t(o.group)]) st.members.push_back(((m - r) % P + P) % P);
        break;
    }
    out.steps.push_back(std::move(st));
  }
  return out;
}

// Same timing: the same steps, the flops summed in another order equal within rounding.
bool same_shape(const Shape& a, const Shape& b) {
  if (a.steps.size() != b.steps.size()) return false;
  for (size_t i = 0; i < a.steps.size(); ++i) {
    Shape::Step x = a.steps[i], y = b.steps[i];
    if (x.kind == Op::Kind::Compute && std::abs(x.amount - y.amount) <= 1e-12 * x.amount)
      y.amount = x.amount;
    if (!(x == y)) return false;
  }
  return true;
}

// Whether the shift of layout ranks by R maps devices to devices of one node, card and node pair
// structure (node to node, card to card, one to one), and ranks 0..R-1 fill nodes of their own:
// or cards of their own, where a node's cards share nothing (no cap on a pair of nodes, no shared
// duplex), so that every card a simulated rank uses carries simulated ranks alone.
bool machine_has_period(const Machine& m, int R) {
  const bool by_card = m.pair_bandwidth <= 0 && m.duplex_sharing <= 0;
  const int P = int(m.device_of.size());
  std::unordered_map<int, int> node_to, nic_to, node_from, nic_from;
  auto consistent = [](std::unordered_map<int, int>& to, std::unordered_map<int, int>& from, int a,
                       int b) {
    return to.emplace(a, b).first->second == b && from.emplace(b, a).first->second == a;
  };
  std::unordered_map<int, bool> rep_node;
  for (int x = 0; x < P; ++x) {
    const int y = (x + R) % P;
    if (!consistent(node_to, node_from, m.node(x), m.node(y)) ||
        !consistent(nic_to, nic_from, m.nic(x), m.nic(y)))
      return false;
    if (rep_node.emplace(by_card ? m.nic(x) : m.node(x), x < R).first->second != (x < R))
      return false;
  }
  return true;
}

// Whether the shift by R (mod P) maps group g (members in its order) onto itself, member i to
// member i + k for one k, and the steps of collective c on it onto themselves.
bool collective_maps_onto_itself(Coll c, const std::vector<int>& g, double bytes, int P, int R) {
  const int n = int(g.size());
  std::unordered_map<int, int> pos;
  for (int i = 0; i < n; ++i) pos.emplace(g[size_t(i)], i);
  auto image = [&](int i) {
    auto it = pos.find((g[size_t(i)] + R) % P);
    return it == pos.end() ? -1 : it->second;
  };
  const int k = image(0);
  for (int i = 0; i < n; ++i)
    if (k < 0 || image(i) != (i + k) % n) return false;
  // Whether the algorithm's steps map onto themselves depends on (c, n, bytes, k) alone: kept.
  thread_local std::map<std::tuple<int, int, double, int>, bool> steps_rotate;
  const auto [it, added] = steps_rotate.emplace(std::tuple{int(c), n, bytes, k}, true);
  if (!added) return it->second;
  for (const auto& step : collective_steps(c, n, bytes)) {
    std::set<std::tuple<int, int, double>> before, after;
    for (const CollTransfer& t : step) {
      before.insert({t.from, t.to, t.bytes});
      after.insert({(t.from + k) % n, (t.to + k) % n, t.bytes});
    }
    if (before != after) return it->second = false;
  }
  return true;
}

// Same shape but for the order of collective groups' members (a group that a shift maps onto
// itself lists them from another member: collective_maps_onto_itself checks the order).
bool same_shape_any_order(Shape a, Shape b) {
  for (Shape* x : {&a, &b})
    for (Shape::Step& st : x->steps) std::sort(st.members.begin(), st.members.end());
  return same_shape(a, b);
}

// Ulysses x WallFacer-C: WallFacer's placement, sub-rings and team gathers act on the ring ranks j
// and keep a rank's member index m in its Ulysses team (rank j u + m), so rotating every Ulysses
// team by d members (m -> m + d mod u) maps the schedules onto themselves (the team's all-to-alls
// onto themselves). Relabelled so that the rotation is the shift by R = P d / u (rank j u + m is
// j d + m mod d + (m / d) R), members 0..d-1 of every team are the quotient, where the machine has
// that period (machine_has_period: d a node's devices when a team fills whole nodes, 1 where
// every device has a card of its own and no node-pair cap). The smallest such d is taken. Returns
// R, with the quotient programs (computes merged) and `order` (relabelled rank -> layout rank), or
// P when the rotation does not apply, or the schedules do
// not have it (checked on ranks 0, R - 1 and a few between against their images).
template <class Make>
int rotated_quotient_by(const seqpar::AttnConfig& cfg, int P, const Machine& m, Make& make,
                        Program (&all)[2], Program* fwd, Program* bwd, std::vector<int>* order,
                        int d) {
  const int u = cfg.ulysses, R = P / u * d;
  auto layout = [&](int y) {  // relabelled -> layout rank
    const int k = y / R, o = y % R;
    return o / d * u + o % d + k * d;
  };
  auto relabel = [&](int x) { return x / u * d + x % u % d + x % u / d * R; };
  Machine q = m;
  for (int y = 0; y < P; ++y) q.device_of[size_t(y)] = m.device_of[size_t(layout(y))];
  if (!machine_has_period(q, R)) return P;
  // The relabelled programs of ranks y (and, to check them, of some images y + R).
  Program moved[2] = {Program(P), Program(P)};
  auto move = [&](int y) {
    const int x = layout(y);
    make(x);
    for (int phase = 0; phase < 2; ++phase) {
      auto& out = moved[phase].ops[size_t(y)];
      if (!out.empty()) continue;
      for (Op o : all[phase].ops[size_t(x)]) {
        if (o.kind == Op::Kind::Send || o.kind == Op::Kind::Recv) o.peer = relabel(o.peer);
        if (o.kind == Op::Kind::Collective) {
          std::vector<int> members = all[phase].groups[size_t(o.group)];
          for (int& member : members) member = relabel(member);
          // A group with members on both sides of R must be one that the shift maps onto itself.
          const auto outside =
              std::count_if(members.begin(), members.end(), [&](int r) { return r >= R; });
          if (outside > 0 && outside < std::ssize(members) &&
              !collective_maps_onto_itself(o.coll, members, o.bytes, P, R))
            return false;
          o.group = moved[phase].group(members);
        }
        out.push_back(o);
      }
    }
    return true;
  };
  for (int y = 0; y < R; ++y)
    if (!move(y)) return P;
  for (int y : {0, R - 1, R / 2, d - 1, d}) {
    if (y >= R) continue;
    if (!move(y + R)) return P;
    for (int phase = 0; phase < 2; ++phase)
      if (!same_shape_any_order(shape_of(moved[phase], y), shape_of(moved[phase], y + R))) return P;
  }
  for (int phase = 0; phase < 2; ++phase) {
    Program* out = phase == 0 ? fwd : bwd;
    if (!out) continue;
    *out = Program(R);
    for (int y = 0; y < R; ++y) {
      for (Op o : moved[phase].ops[size_t(y)]) {
        if (o.kind == Op::Kind::Collective)
          o.group = out->group(moved[phase].groups[size_t(o.group)]);
        out->ops[size_t(y)].push_back(o);
      }
    }
  }
  order->resize(size_t(P));
  for (int y = 0; y < P; ++y) (*order)[size_t(y)] = layout(y);
  return R;
}

// rotated_quotient_by the smallest d that the machine and the schedules have, of a quotient of at
// most max_ranks ranks.
template <class Make>
int rotated_quotient(const seqpar::AttnConfig& cfg, int P, const Machine& m, Make& make,
                     Program (&all)[2], Program* fwd, Program* bwd, std::vector<int>* order,
                     int max_ranks) {
  const int u = cfg.ulysses;
  if (cfg.strategy != seqpar::Strategy::WallFacer || u <= 1 || !order) return P;
  for (int d = 1; d < u; ++d) {
    if (u % d != 0 || P / u * d > max_ranks) continue;
    const int R = rotated_quotient_by(cfg, P, m, make, all, fwd, bwd, order, d);
    if (R < P) return R;
  }
  return P;
}

}  // namespace

int attention_period(const seqpar::AttnConfig& cfg, int P, const Machine& m, int tile_q, int tile_k,
                     Program* fwd, Program* bwd, double* scratch_elements, bool every_rank,
                     std::vector<int>* order, int ring_steps) {
  if (order) order->clear();
  WF_CHECK(int(m.device_of.size()) == P, "machine of {} devices for {} ranks", m.device_of.size(),
           P);
  // The programs (computes merged) of the ranks made so far, and the shapes of those compared:
  // each rank's schedule made once.
  Program all[2] = {Program(P), Program(P)};
  std::vector<bool> made(size_t(P), false);
  std::unordered_map<int, std::array<Shape, 2>> shapes;
  double scratch = 0;
  const int team = cfg.ulysses > 1 ? cfg.ulysses : seqpar::team_size(cfg);  // Schedule::team_ranks
  auto make = [&](int r) {
    if (made[size_t(r)]) return;
    made[size_t(r)] = true;
    // Each step's computes summed: the same merged computes, without listing a large team's
    // (2 C u)^2 kernel calls per step.
    const seqpar::Schedule s =
        seqpar::make_schedule(cfg, P, r, ring_steps, seqpar::SummedComputes{tile_q, tile_k});
    scratch = std::max(scratch, scratch_of(s));
    emit(all[0], s, s.fwd, tile_q, tile_k, true);
    emit(all[1], s, s.bwd, tile_q, tile_k, true);
  };
  auto shape = [&](int r) -> const std::array<Shape, 2>& {
    auto it = shapes.find(r);
    if (it != shapes.end()) return it->second;
    make(r);
    return shapes.emplace(r, std::array<Shape, 2>{shape_of(all[0], r), shape_of(all[1], r)})
        .first->second;
  };
  // The schedules' period S: ranks S apart take the same steps. Before any schedule is made (the
  // first one walks every block's hops), S must not reach a rank whose steps differ from rank
  // 0's by construction: rank 0 sends no placement hop where WallFacer's placement keeps its team
  // block (placement_dst(0) = 0), every rank that sends one differs; the contiguous causal ring's
  // rank r sees r + 1 blocks, so every rank differs.
  const int u = std::max(cfg.ulysses, 1), C = seqpar::team_size(cfg);
  const bool wallfacer = cfg.strategy == seqpar::Strategy::WallFacer && C > 1;
  const bool contiguous_causal_ring = is_contiguous_causal_ring(cfg);
  auto placed = [&](int r) {  // whether world rank r sends its team block on (RingGeometry)
    const seqpar::WallFacerGeometry inner(P / u, C);
    return inner.placement_dst(r / u) * u + r % u != r;
  };
  auto differs_from_0 = [&](int r) {
    return (contiguous_causal_ring && r != 0) || (wallfacer && placed(r) != placed(0));
  };
  auto schedules_repeat = [&](int S) {
    if (P % S != 0 || S % team != 0 || differs_from_0(S) || differs_from_0(P - S)) return false;
    for (int x = 0; x < S; ++x)
      for (int y : {x + S, x + P - S})
        for (int phase : {0, 1})
          if (!same_shape(shape(x)[size_t(phase)], shape(y)[size_t(phase)])) return false;
    return true;
  };
  int S = 1;
  while (S < P && !schedules_repeat(S)) ++S;
  // The period: the smallest multiple of S that the machine has too.
  int R = S;
  while (R < P && !(P % R == 0 && machine_has_period(m, R))) R += S;
  if (R >= P) {
    // In place of every rank: a rotation's quotient, of fewer ranks where every rank may be
    // simulated, of at most max_rotated_ranks where not (at 4,096 devices its quotients hold 128
    // to 2,048 ranks, a tenth of a second to seconds each).
    const int rotated = rotated_quotient(cfg, P, m, make, all, fwd, bwd, order,
                                         every_rank ? P - 1 : max_rotated_ranks(cfg.ulysses));
    if (rotated < P) {
      if (scratch_elements) *scratch_elements = scratch;
      return rotated;
    }
    if (every_rank) {  // every rank's programs, computes merged
      for (int r = 0; r < P; ++r) make(r);
      if (fwd) *fwd = std::move(all[0]);
      if (bwd) *bwd = std::move(all[1]);
      if (scratch_elements) *scratch_elements = scratch;
    }
    return P;
  }
  // The quotient programs of ranks 0..R-1: rank b + k S runs rank b's program shifted by k S.
  for (int phase = 0; phase < 2; ++phase) {
    Program* q = phase == 0 ? fwd : bwd;
    if (!q) continue;
    *q = Program(R);
    for (int x = 0; x < R; ++x) {
      const int shift = x - x % S;
      for (Op o : all[phase].ops[size_t(x % S)]) {
        if (o.kind == Op::Kind::Send || o.kind == Op::Kind::Recv) o.peer = (o.peer + shift) % P;
        if (o.kind == Op::Kind::Collective) {
          std::vector<int> members = all[phase].groups[size_t(o.group)];
          for (int& member : members) member = (member + shift) % P;
          o.group = q->group(members);
        }
        q->ops[size_t(x)].push_back(o);
      }
    }
  }
  if (scratch_elements) *scratch_elements = scratch;
  return R;
}

namespace {

// The attention simulated: every rank (exact), or one period of ranks, or every rank where allowed;
// the team ring cut to its first ring_steps steps (0: all of them).
AttentionPrediction simulate_attention(const Cluster& cl, const seqpar::AttnConfig& cfg, int P,
                                       const std::vector<int>& device_of, bool exact,
                                       int ring_steps, bool every_rank) {
  AttentionPrediction a;
  Machine m = Machine::from(cl, device_of, cfg.head_dim);
  const int tile_q = cl.attention_tile_q, tile_k = cl.attention_tile_k;
  // The programs simulated: one period of ranks (the quotient), or every rank's (computes merged
  // unless exact).
  Program prog[2];
  double scratch = 0;
  if (exact) {
    a.period = P;
    attention_programs(cfg, P, tile_q, tile_k, &prog[0], &prog[1], &scratch);
  } else {
    std::vector<int> order;
    a.period = attention_period(cfg, P, m, tile_q, tile_k, &prog[0], &prog[1], &scratch, every_rank,
                                &order, ring_steps);
    if (!order.empty())  // the quotient's ranks relabelled: the machine too
      for (int y = 0; y < P; ++y) m.device_of[size_t(y)] = device_of[size_t(order[size_t(y)])];
  }
  WF_USAGE_CHECK(a.period < P || every_rank || exact,
                 "not simulated: its ranks do not repeat with a period below {}, no rotation of "
                 "its teams leaves a quotient of at most {} ranks, and simulating every rank is "
                 "limited to {} devices, or to schedules (whole, or rings cut to {} steps) of at "
                 "most {:.0e} messages in all, unless --exact (hours and tens of GB at 4,096)",
                 P, max_rotated_ranks(cfg.ulysses), kMaxEveryRankDevices, kCutRingSteps,
                 kMaxEveryRankTransfers);
  for (bool bwd : {false, true}) {
    SimResult r = simulate(prog[bwd], m);
    (bwd ? a.bwd_s : a.fwd_s) = r.time;
    (bwd ? a.exposed_bwd_s : a.exposed_fwd_s) = r.exposed_comm;
    double p2p = 0, coll = 0, inter = 0;
    for (const auto& rt : r.ranks) {
      p2p = std::max(p2p, rt.p2p_bytes);
      coll = std::max(coll, rt.coll_bytes);
      inter = std::max(inter, rt.inter_bytes);
    }
    a.p2p_bytes += p2p;
    a.coll_bytes += coll;
    a.inter_bytes += inter;
  }
  a.scratch_elements = scratch;
  a.kept_elements = double(seqpar::kept_elements(cfg, P));
  return a;
}

}  // namespace

namespace {

// Whether the forward's and the backward's times grow by the same amount, within
// kSteadyRingTolerance, from a0 to a as from a to b (cut rings, or prefixes, in equal steps).
bool grows_steadily(const AttentionPrediction& a0, const AttentionPrediction& a,
                    const AttentionPrediction& b) {
  auto steady = [](double x0, double x1, double x2) {
    return std::abs((x2 - x1) - (x1 - x0)) <= kSteadyRingTolerance * std::abs(x2 - x1);
  };
  return steady(a0.fwd_s, a.fwd_s, b.fwd_s) && steady(a0.bwd_s, a.bwd_s, b.bwd_s);
}

// b's times and bytes counted on by `steps` more of the steps from a to b.
void count_on(AttentionPrediction& b, const AttentionPrediction& a, double steps) {
  for (auto [x, y] : {std::pair{&b.fwd_s, a.fwd_s},
                      {&b.bwd_s, a.bwd_s},
                      {&b.exposed_fwd_s, a.exposed_fwd_s},
                      {&b.exposed_bwd_s, a.exposed_bwd_s},
                      {&b.p2p_bytes, a.p2p_bytes},
                      {&b.coll_bytes, a.coll_bytes},
                      {&b.inter_bytes, a.inter_bytes}})
    *x += steps * (*x - y);
}

}  // namespace

int team_ring_length(const seqpar::AttnConfig& cfg, int P) {
  if (seqpar::traits(cfg.strategy).build != seqpar::build_team_ring_schedule) return 0;
  const int u = std::max(cfg.ulysses, 1);
  return seqpar::WallFacerGeometry(P / u, seqpar::team_size(cfg)).G;
}

int max_rotated_ranks(int ulysses) {
  return std::max(kMaxRotatedRanks,
                  std::min(kMaxEveryRankDevices, kMaxRotatedAllToAll / std::max(ulysses, 1)));
}

double every_rank_transfers(const seqpar::AttnConfig& cfg, int P, int ring_steps) {
  // The schedule of ring rank 1 (world rank u of a Ulysses hybrid): one that sends WallFacer's
  // placement hop, where ring ranks 0 and P/u - 1 keep their team blocks; computes summed as the
  // planner simulates them.
  const int r = std::min(P - 1, std::max(cfg.ulysses, 1));
  const seqpar::Schedule s = seqpar::make_schedule(cfg, P, r, ring_steps, seqpar::SummedComputes{});
  double n = 0;
  for (const auto* ops : {&s.fwd, &s.bwd})
    for (const seqpar::Op& o : *ops) {
      if (o.kind == seqpar::OpKind::Local) continue;
      if (o.kind != seqpar::OpKind::Collective) {
        n += o.kind == seqpar::OpKind::Wait ? double(o.waits.size()) : 1.0;
        continue;
      }
      for (const auto& step : collective_steps(simulated(o.coll), o.group_size, double(o.bytes)))
        n += double(step.size()) / o.group_size;
    }
  return double(P) * n;
}

AttentionPrediction predict_attention(const Cluster& cl, const seqpar::AttnConfig& cfg, int P,
                                      const std::vector<int>& device_of, bool exact) {
  seqpar::validate(cfg, P);
  const int G = team_ring_length(cfg, P);
  // Rings whose steps are alike: every block makes every hop (not the contiguous causal ring,
  // whose blocks stop at the last rank, nor masks of documents or a window).
  const bool alike = !is_contiguous_causal_ring(cfg) && cfg.doc_lengths.empty() && cfg.window <= 0;
  // Cut where the three cut rings hold fewer steps than the whole one (3K - 6 < G), or where no
  // more than a cut ring may be simulated (beyond kMaxEveryRankDevices).
  auto cut = [&](int K) {
    return !exact && alike && G > K && (3 * K - 6 < G || P > kMaxEveryRankDevices);
  };
  for (int K = kCutRingSteps; cut(K); K *= 2) {
    // Cut to K - 4, K - 2 and K steps: where the time grows by the same amount over the first
    // two steps added as over the next two, the G - K steps left out are counted at that rate.
    // Every rank may be simulated where the three cut rings' messages (every_rank_transfers)
    // stay within kMaxEveryRankTransfers.
    const bool every_rank =
        P <= kMaxEveryRankDevices || every_rank_transfers(cfg, P, K - 4) +
                                             every_rank_transfers(cfg, P, K - 2) +
                                             every_rank_transfers(cfg, P, K) <=
                                         kMaxEveryRankTransfers;
    const AttentionPrediction a0 =
        simulate_attention(cl, cfg, P, device_of, false, K - 4, every_rank);
    const AttentionPrediction a =
        simulate_attention(cl, cfg, P, device_of, false, K - 2, every_rank);
    AttentionPrediction b = simulate_attention(cl, cfg, P, device_of, false, K, every_rank);
    if (!grows_steadily(a0, a, b)) continue;
    count_on(b, a, double(G - K) / 2.0);  // two steps at a time
    b.ring_steps = K;
    return b;
  }
  // The contiguous causal ring beyond kMaxEveryRankDevices: from prefixes of up to
  // kRingPrefixRanks ranks in steps of a quarter of that rounded up to whole nodes, then of twice
  // as many, up to kMaxEveryRankDevices.
  if (!exact && is_contiguous_causal_ring(cfg) && P > kMaxEveryRankDevices) {
    const int node = std::max(cl.devices_per_node, 1);
    for (int largest = kRingPrefixRanks; largest <= kMaxEveryRankDevices && largest < P;
         largest *= 2) {
      const int step = (largest / 4 + node - 1) / node * node;
      if (largest - 2 * step < step) continue;
      if (auto a = ring_from_prefixes(cl, cfg, P, device_of, largest, step)) return *a;
    }
  }
  // The contiguous causal ring's rank r computes r + 1 blocks in the forward alone: counted so,
  // without listing its P steps, where that is above the limit.
  const bool every_rank =
      P <= kMaxEveryRankDevices ||
      (!(is_contiguous_causal_ring(cfg) && 0.5 * P * (P + 1.0) > kMaxEveryRankTransfers) &&
       every_rank_transfers(cfg, P, 0) <= kMaxEveryRankTransfers);
  return simulate_attention(cl, cfg, P, device_of, exact, 0, every_rank);
}

std::optional<AttentionPrediction> ring_from_prefixes(const Cluster& cl,
                                                      const seqpar::AttnConfig& cfg, int P,
                                                      const std::vector<int>& device_of,
                                                      int largest, int step) {
  WF_CHECK(is_contiguous_causal_ring(cfg), "ring_from_prefixes: not a contiguous causal ring");
  WF_CHECK(step >= 1 && largest - 2 * step >= 2 && largest < P && int(device_of.size()) == P,
           "ring_from_prefixes: prefixes of {} - 2 x {} to {} ranks of {}", largest, step, largest,
           P);
  WF_CHECK(cfg.seq % P == 0, "ring_from_prefixes: {} tokens on {} ranks", cfg.seq, P);
  auto prefix = [&](int Q) {
    seqpar::AttnConfig c = cfg;
    c.seq = cfg.seq / P * Q;
    const std::vector<int> devices(device_of.begin(), device_of.begin() + Q);
    return simulate_attention(cl, c, Q, devices, false, 0, true);
  };
  const AttentionPrediction a0 = prefix(largest - 2 * step), a = prefix(largest - step);
  AttentionPrediction b = prefix(largest);
  if (!grows_steadily(a0, a, b)) return std::nullopt;
  count_on(b, a, double(P - largest) / double(step));
  b.kept_elements = double(seqpar::kept_elements(cfg, P));
  b.prefix_ranks = largest;
  return b;
}

NodeBytes node_bytes(const seqpar::AttnConfig& cfg, int P, const std::vector<int>& node_of) {
  WF_CHECK(int(node_of.size()) == P, "node_of has {} ranks, the layout {}", node_of.size(), P);
  const int nodes = *std::max_element(node_of.begin(), node_of.end()) + 1;
  std::vector<int> per_node(size_t(nodes), 0);
  for (int n : node_of) ++per_node[size_t(n)];
  const int width = *std::max_element(per_node.begin(), per_node.end());
  // Devices numbered node by node, `width` per node, so that Machine::node finds each rank's node.
  Machine m;
  m.devices_per_node = m.devices_per_nic = width;
  m.intra = m.inter = Link{1e9, 0};
  std::fill(per_node.begin(), per_node.end(), 0);
  for (int n : node_of) m.device_of.push_back(n * width + per_node[size_t(n)]++);
  NodeBytes out;
  for (bool bwd : {false, true}) {
    const SimResult r = simulate(attention_program(cfg, P, bwd), m);
    auto& v = bwd ? out.bwd : out.fwd;
    v.assign(size_t(nodes), 0.0);
    for (int q = 0; q < P; ++q) v[size_t(node_of[q])] += r.ranks[size_t(q)].inter_bytes;
    (bwd ? out.total_bwd : out.total_fwd) = std::accumulate(v.begin(), v.end(), 0.0);
  }
  return out;
}

CardBytes card_bytes(const seqpar::AttnConfig& cfg, int P, const std::vector<int>& device_of,
                     int devices_per_node, int devices_per_nic) {
  WF_CHECK(
      int(device_of.size()) == P && devices_per_nic >= 1 && devices_per_node % devices_per_nic == 0,
      "card_bytes: {} devices for {} ranks, {} devices per node, {} per card", device_of.size(), P,
      devices_per_node, devices_per_nic);
  Machine m;
  m.devices_per_node = devices_per_node;
  m.devices_per_nic = devices_per_nic;
  m.intra = m.inter = Link{1e9, 0};
  m.device_of = device_of;
  const int nodes = *std::max_element(device_of.begin(), device_of.end()) / devices_per_node + 1;
  const size_t cards = size_t(devices_per_node / devices_per_nic);
  CardBytes out;
  out.sent.assign(size_t(nodes), std::vector<double>(cards, 0.0));
  out.received = out.sent;
  for (bool bwd : {false, true}) {
    const SimResult r = simulate(attention_program(cfg, P, bwd), m);
    for (int q = 0; q < P; ++q) {
      const size_t node = size_t(m.node(q)), card = size_t(m.nic(q)) % cards;
      out.sent[node][card] += r.ranks[size_t(q)].inter_bytes;
      out.received[node][card] += r.ranks[size_t(q)].inter_recv_bytes;
    }
  }
  return out;
}

namespace {

// Bytes of one layer's activations (all of them: what the backward of one layer works on).
double layer_activation_bytes(const ModelSpec& m, double tokens, double e) {
  // The layer's activations (layer_count) in the dtype, and the attention's fp32 LSE.
  return tokens * (e * double(layer_count(m).activations) + 4.0 * m.heads);
}

double memory_bytes(const PlanInput& in, const AttentionPrediction& a) {
  const Cluster& cl = in.cluster;
  const ModelSpec& m = in.model;
  const double P = in.gpus, e = cl.dtype_bytes, Np = double(param_count(m));
  const double tokens = double(m.batch) * double(in.seq) / P;
  const double params = Np * e / (cl.zero >= 3 ? P : 1);
  const double grads = Np * e / (cl.zero >= 2 ? P : 1);
  const double optim = Np * (8 + (e < 4 ? 4 : 0)) / (cl.zero >= 1 ? P : 1);  // m, v (+ fp32 master)
  const double kept = m.checkpoint_attention
                          ? tokens * (2 * e * m.dim + 4.0 * m.heads)  // layer input, O, LSE
                          : layer_activation_bytes(m, tokens, e);
  const double working = 2 * layer_activation_bytes(m, tokens, e);  // a layer and its gradients
  const double logits = m.kind == ModelKind::Gpt ? 2 * tokens * m.vocab * 4.0 : 0;
  return params + grads + optim + m.layers * (kept + a.kept_elements * e) + working +
         a.scratch_elements * e + logits;
}

// The ring all-reduce of the parameters' gradients over the devices in device order. Its 2(P-1)
// steps are alike (every member sends 1/P of the buffer to the next, the step ends with the last
// message): unless `exact`, one of them is simulated, as P messages at once, and counted 2(P-1)
// times.
double ring_allreduce_s(const Cluster& cl, const std::vector<int>& devices, double bytes,
                        bool exact) {
  const int P = int(devices.size());
  const std::vector<int> ring = inverse_order(devices);  // device -> layout rank
  Program g(P);
  if (exact) {
    const int gid = g.group(ring);
    for (int r = 0; r < P; ++r) g.ops[r].push_back(Op::collective(Coll::AllReduce, gid, bytes));
    return simulate(g, Machine::from(cl, devices)).time;
  }
  for (int d = 0; d < P; ++d) {
    const int r = ring[size_t(d)], next = ring[size_t((d + 1) % P)],
              prev = ring[size_t((d + P - 1) % P)];
    g.ops[size_t(r)] = {Op::send(next, bytes / P, 0), Op::recv(prev, bytes / P, 1), Op::wait(0),
                        Op::wait(1)};
  }
  return 2.0 * (P - 1) * simulate(g, Machine::from(cl, devices)).time;
}

}  // namespace

Prediction predict(const PlanInput& in, const Candidate& c) {
  Prediction p;
  p.cand = c;
  p.P = in.gpus;
  const Cluster& cl = in.cluster;
  const ModelSpec& m = in.model;
  const int P = in.gpus;
  AttentionPrediction a;
  try {
    const seqpar::AttnConfig cfg = attention_config(m, in.seq, c, attention_dtype(cl));
    seqpar::validate(cfg, P);
    a = predict_attention(cl, cfg, P, candidate_devices(c, P), in.exact);
  } catch (const UsageError& e) {
    p.reason = e.what();
    return p;
  }
  p.attn_fwd_s = a.fwd_s;
  p.attn_bwd_s = a.bwd_s;
  p.p2p_bytes = a.p2p_bytes;
  p.coll_bytes = a.coll_bytes;
  p.inter_bytes = a.inter_bytes;

  const double tokens = double(m.batch) * double(in.seq) / P;
  const double layer_fwd = tokens * layer_dense_flops_per_token(m) / cl.gemm_flops;
  const double passes = 3.0 + (m.checkpoint_attention ? 1.0 : 0.0);  // fwd, bwd = 2 fwd, recompute
  const double head = 3.0 * tokens * head_flops_per_token(m) / cl.gemm_flops;
  p.dense_s = m.layers * passes * layer_fwd + head;

  // Gradient all-reduce over the group, a ring in device order.
  if (P > 1)
    p.grad_sync_s = ring_allreduce_s(cl, candidate_devices(c, P),
                                     double(param_count(m)) * cl.dtype_bytes, in.exact);
  const double layer_bwd = 2 * layer_fwd + a.bwd_s;
  p.grad_sync_exposed_s = cl.grad_sync_overlap
                              ? std::max(0.0, p.grad_sync_s - (m.layers - 1) * layer_bwd)
                              : p.grad_sync_s;

  p.step_s = p.dense_s + m.layers * (a.fwd_s + a.bwd_s) + p.grad_sync_exposed_s;
  p.tokens_per_s = double(m.batch) * double(in.seq) / p.step_s;
  p.exposed_comm_s = m.layers * (a.exposed_fwd_s + a.exposed_bwd_s) + p.grad_sync_exposed_s;
  p.memory_bytes = memory_bytes(in, a);
  const double e = cl.dtype_bytes;
  p.attention_memory_bytes = tokens * 2.0 * (m.heads + m.kv_heads) * m.head_dim() * e +
                             m.layers * a.kept_elements * e + a.scratch_elements * e;
  const double avail = cl.memory - cl.memory_reserved;
  p.feasible = p.memory_bytes <= avail;
  if (!p.feasible)
    p.reason = fmt::format("memory: needs {:.1f} GiB per device, {:.1f} GiB available",
                           p.memory_bytes / (1 << 30), avail / (1 << 30));
  return p;
}

namespace {

// The families of candidates, in the order the plan lists them. A new strategy joins the plan by
// one entry: its name and the candidates it offers for an input.
struct CandidateFamily {
  const char* name;
  void (*add)(const PlanInput& in, std::vector<Candidate>& out);
};

const CandidateFamily kCandidateFamilies[] = {
    {"ring",
     [](const PlanInput&, std::vector<Candidate>& out) {
       out.push_back({Strategy::Ring, 1, 1, Placement::Default});
     }},
    {"zigzag",
     [](const PlanInput& in, std::vector<Candidate>& out) {
       if (in.model.causal) out.push_back({Strategy::Zigzag, 1, 1, Placement::Default});
     }},
    {"ulysses",
     [](const PlanInput&, std::vector<Candidate>& out) {
       out.push_back({Strategy::Ulysses, 1, 1, Placement::Default});
     }},
    {"wallfacer",
     [](const PlanInput& in, std::vector<Candidate>& out) {
       const int P = in.gpus;
       for (int C = 2; C * C <= P; ++C) {
         out.push_back({Strategy::WallFacer, C, 1, Placement::TeamIntra});
         // With one team per team group's sub-ring position (G = 1) both orders coincide.
         if (P % (C * C) != 0 || P / (C * C) > 1)
           out.push_back({Strategy::WallFacer, C, 1, Placement::RingIntra});
       }
     }},
    {"ulysses x ring",
     [](const PlanInput& in, std::vector<Candidate>& out) {
       // The all-to-alls split the heads, K,V's included: K,V heads are not replicated, so
       // under grouped-query attention the degree must divide the K,V heads. Degrees up to the
       // query heads are listed; seqpar::validate marks those the K,V heads refuse infeasible.
       const int P = in.gpus;
       const Strategy ring = in.model.causal ? Strategy::Zigzag : Strategy::Ring;
       for (int u = 2; u < P; ++u) {
         if (P % u != 0 || u > in.model.heads) continue;
         out.push_back({ring, 1, u, Placement::TeamIntra});
         out.push_back({ring, 1, u, Placement::RingIntra});
       }
     }},
    {"double ring",
     [](const PlanInput& in, std::vector<Candidate>& out) {
       // Inner rings of a node's devices (the largest that divides P); a node of one device, or
       // of all P, leaves a plain ring.
       const int P = in.gpus, W = std::gcd(P, in.cluster.devices_per_node);
       if (W > 1 && W < P) {
         Candidate c{Strategy::DoubleRing, 1, 1, Placement::Default};
         c.inner = W;
         out.push_back(c);
       }
     }},
    {"ulysses x wallfacer",
     [](const PlanInput& in, std::vector<Candidate>& out) {
       // Ulysses of degree u inside, WallFacer-C over the P/u ranks of each member index (the
       // same limit of the heads as the Ulysses x ring hybrids above).
       const int P = in.gpus;
       for (int u = 2; u < P; ++u) {
         if (P % u != 0 || u > in.model.heads) continue;
         const int ring = P / u;
         for (int C = 2; C * C <= ring; ++C) {
           if (ring % (C * C) != 0) continue;
           out.push_back({Strategy::WallFacer, C, u, Placement::TeamIntra});
           if (ring / (C * C) > 1) out.push_back({Strategy::WallFacer, C, u, Placement::RingIntra});
         }
       }
     }},
};

}  // namespace

std::vector<Candidate> candidates(const PlanInput& in) {
  std::vector<Candidate> out;
  for (const CandidateFamily& f : kCandidateFamilies) f.add(in, out);
  return out;
}

std::vector<Prediction> plan_all(const PlanInput& in,
                                 const std::function<void(int done, int total)>& progress) {
  WF_USAGE_CHECK(in.gpus >= 1 && in.gpus <= in.cluster.devices(),
                 "--gpus {} is outside 1..{} (the devices of cluster '{}')", in.gpus,
                 in.cluster.devices(), in.cluster.name);
  WF_USAGE_CHECK(
      in.gpus <= kMaxPlanDevices,
      "planning for {} devices would take too long: the planner simulates the schedules of "
      "every device whose work differs, in a time that grows with the square of the device "
      "count; plan a group of at most {} devices with --gpus N (cluster '{}' has {})",
      in.gpus, kMaxPlanDevices, in.cluster.name, in.cluster.devices());
  WF_USAGE_CHECK(in.seq >= 1, "--seq must be positive, got {}", in.seq);
  const std::vector<Candidate> all = candidates(in);
  auto predict_candidate = [&](Candidate c) {
    // WallFacer keeps the placed K,V for the backward where the memory allows.
    if (seqpar::team_size(c.strategy, c.teams) > 1) {
      c.keep_kv = true;
      Prediction kept = predict(in, c);
      if (kept.feasible) return kept;
      c.keep_kv = false;
      if (kept.step_s == 0) {  // it cannot run, K,V kept or not (validate, not simulated)
        kept.cand.keep_kv = false;
        return kept;
      }
    }
    return predict(in, c);
  };
  // The candidates are predicted each on its own (the schedules' and the simulator's caches are
  // per thread), shared out over num_threads() threads in the order listed; the table is the same
  // whatever the threads.
  const int n = int(all.size());
  std::vector<Prediction> out(all.size());
  std::vector<std::exception_ptr> failed(all.size());
  int done = 0;
  if (progress) progress(0, n);
#pragma omp parallel for schedule(dynamic, 1) num_threads(num_threads())
  for (int i = 0; i < n; ++i) {
    try {
      out[size_t(i)] = predict_candidate(all[size_t(i)]);
    } catch (...) {
      failed[size_t(i)] = std::current_exception();
    }
#pragma omp critical(wallfacer_plan_progress)
    {
      ++done;
      if (progress) progress(done, n);
    }
  }
  for (const std::exception_ptr& e : failed)
    if (e) std::rethrow_exception(e);
  std::stable_sort(out.begin(), out.end(), [](const Prediction& a, const Prediction& b) {
    if (a.feasible != b.feasible) return a.feasible;
    return a.feasible && a.tokens_per_s > b.tokens_per_s;
  });
  return out;
}

}  // namespace wallfacer::plan
