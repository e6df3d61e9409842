#include "wallfacer/plan/simulator.h"

#include <algorithm>
#include <deque>
#include <functional>
#include <limits>
#include <map>
#include <queue>
#include <tuple>

#include "wallfacer/core/error.h"

namespace wallfacer::plan {

Op Op::compute(Work w, double flops) {
  Op o;
  o.kind = Kind::Compute;
  o.work = w;
  o.flops = flops;
  return o;
}
Op Op::send(int peer, double bytes, int request, int tag) {
  Op o;
  o.kind = Kind::Send;
  o.peer = peer;
  o.bytes = bytes;
  o.request = request;
  o.tag = tag;
  return o;
}
Op Op::recv(int peer, double bytes, int request, int tag) {
  Op o = send(peer, bytes, request, tag);
  o.kind = Kind::Recv;
  return o;
}
Op Op::wait(int request) {
  Op o;
  o.kind = Kind::Wait;
  o.request = request;
  return o;
}
Op Op::collective(Coll c, int group, double bytes) {
  Op o;
  o.kind = Kind::Collective;
  o.coll = c;
  o.group = group;
  o.bytes = bytes;
  return o;
}

int Program::group(const std::vector<int>& members) {
  for (size_t i = 0; i < groups.size(); ++i)
    if (groups[i] == members) return static_cast<int>(i);
  groups.push_back(members);
  return static_cast<int>(groups.size()) - 1;
}

void Program::append(const Program& other) {
  WF_CHECK(other.ranks() == ranks(), "appending a program of {} ranks to one of {}", other.ranks(),
           ranks());
  for (int r = 0; r < ranks(); ++r) {
    int shift = 0;
    for (const Op& o : ops[r]) shift = std::max(shift, o.request + 1);
    for (Op o : other.ops[r]) {
      if (o.request >= 0) o.request += shift;
      if (o.kind == Op::Kind::Collective) o.group = group(other.groups.at(o.group));
      ops[r].push_back(o);
    }
  }
}

Machine Machine::from(const Cluster& c, std::vector<int> device_of, int head_dim) {
  Machine m;
  m.intra = c.intra;
  m.inter = c.inter;
  m.devices_per_node = c.devices_per_node;
  m.devices_per_nic = c.devices_per_nic;
  m.pair_bandwidth = c.inter_pair_bandwidth;
  m.gemm_flops = c.gemm_flops;
  m.attention_fwd_flops = c.fwd_rate(head_dim);
  m.attention_bwd_flops = c.bwd_rate(head_dim);
  m.device_of = std::move(device_of);
  return m;
}

namespace {

// Edges (src, dst) of step `step` of a collective's algorithm on group `g` (n members).
void step_edges(Coll c, const std::vector<int>& g, int step,
                std::vector<std::pair<int, int>>& edges) {
  const int n = static_cast<int>(g.size());
  edges.clear();
  const int shift = c == Coll::AllToAll ? step : 1;
  for (int j = 0; j < n; ++j) edges.emplace_back(g[j], g[(j + shift) % n]);
}

int algorithm_steps(Coll c, int n) {
  if (n <= 1) return 0;
  return c == Coll::AllReduce ? 2 * (n - 1) : n - 1;
}

double chunk_bytes(Coll c, double bytes, int n) { return c == Coll::AllReduce ? bytes / n : bytes; }

// Ring-algorithm bytes one rank sends in this collective, and how many of them leave the node.
std::pair<double, double> coll_sent_bytes(Coll c, const std::vector<int>& g, int rank, double bytes,
                                          const Machine& m) {
  const int n = static_cast<int>(g.size());
  const int steps = algorithm_steps(c, n);
  const double chunk = chunk_bytes(c, bytes, n);
  const int j = static_cast<int>(std::find(g.begin(), g.end(), rank) - g.begin());
  double inter = 0;
  for (int s = 0; s < steps; ++s) {
    const int shift = c == Coll::AllToAll ? 1 + s : 1;
    if (!m.same_node(rank, g[(j + shift) % n])) inter += chunk;
  }
  return {steps * chunk, inter};
}

constexpr int kNoPair = -1;

// A point-to-point transfer in flight. It waits out the latency, then streams its bytes at the
// rate its most shared resource allows: the sending and the receiving device port for a message
// inside a node, the two network cards for one between nodes.
struct Flow {
  int src = 0, dst = 0;
  int send_req = 0, recv_req = 0;
  double total = 0, left = 0;  // bytes
  double active_at = 0;        // s: when the latency is over
  bool active = false;
  double rate = 0;  // bytes/s while active
  int res[2] = {0, 0};
  int pair = kNoPair;  // between nodes: the (source, destination) node pair's resource
  int coll = -1;       // a step of this running collective (its requests are then unused)
};

// Resource ids: 4 per device / card: device egress, device ingress, card egress, card ingress;
// node pairs after all of them (negative ids).
int port(int index, int kind) { return 4 * index + kind; }
int node_pair(int src_node, int dst_node, int nodes) { return -2 - (src_node * nodes + dst_node); }

}  // namespace

SimResult simulate(const Program& prog, const Machine& m, std::vector<SimSpan>* spans) {
  const int P = prog.ranks();
  WF_CHECK(int(m.device_of.size()) == P, "machine has {} devices for {} ranks", m.device_of.size(),
           P);
  for (const auto& g : prog.groups)
    for (int r : g) WF_CHECK(r >= 0 && r < P, "group member {} outside 0..{}", r, P - 1);

  struct RankState {
    size_t pc = 0;
    int coll_k = 0;
    bool arrived = false;  // at its current collective
    bool finished = false;
    std::map<int, double> done;  // request -> completion time (< 0 while in flight)
    int waiting_for = -1;        // request it is blocked on
    double blocked_at = 0;       // when it arrived at its current wait or collective
    std::map<int, std::pair<int, double>> posted;  // request -> (op, post time), for spans
  };
  std::vector<RankState> st(P);
  SimResult res;
  res.ranks.resize(P);

  struct Posted {
    double time;
    int request;
    double bytes;
  };
  std::map<std::tuple<int, int, int>, std::deque<Posted>> sends, recvs;  // (src, dst, tag)
  std::map<std::pair<int, int>, int> arrivals;  // (group, k) -> members arrived

  // Ranks ready to run, by time.
  using Ready = std::pair<double, int>;
  std::priority_queue<Ready, std::vector<Ready>, std::greater<>> ready;
  for (int r = 0; r < P; ++r) ready.push({0.0, r});

  std::vector<Flow> flows;  // in flight
  std::map<int, int> load;  // resource -> active flows
  double now = 0;

  auto rerate = [&] {
    load.clear();
    for (const Flow& f : flows)
      if (f.active) ++load[f.res[0]], ++load[f.res[1]], ++load[f.pair];  // kNoPair: unused
    for (Flow& f : flows) {
      if (!f.active) continue;
      const double bw = m.same_node(f.src, f.dst) ? m.intra.bandwidth : m.inter.bandwidth;
      f.rate = bw / std::max(load[f.res[0]], load[f.res[1]]);
      if (f.pair != kNoPair && m.pair_bandwidth > 0)
        f.rate = std::min(f.rate, m.pair_bandwidth / load[f.pair]);
    }
  };
  auto span = [&](int rank, size_t op, double t0, double t1) {
    if (spans) spans->push_back({rank, int(op), t0, t1});
  };
  auto complete = [&](int rank, int request, double t) {
    st[rank].done[request] = t;
    if (spans) {
      auto [op, t0] = st[rank].posted.at(request);
      span(rank, size_t(op), t0, t);
    }
    if (st[rank].waiting_for == request) {
      span(rank, st[rank].pc - 1, st[rank].blocked_at, t);
      st[rank].waiting_for = -1;
      ready.push({t, rank});
    }
  };
  // A transfer of `bytes` from src to dst, from now: the latency of its link, then its bytes.
  auto add_flow = [&](int src, int dst, double bytes, int send_req, int recv_req, int coll) {
    Flow f;
    f.src = src, f.dst = dst, f.send_req = send_req, f.recv_req = recv_req, f.coll = coll;
    f.total = f.left = bytes;
    const bool local = m.same_node(src, dst);
    f.active_at = now + (src == dst ? 0.0 : local ? m.intra.latency : m.inter.latency);
    if (local) {
      f.res[0] = port(m.device_of[src], 0), f.res[1] = port(m.device_of[dst], 1);
    } else {
      f.res[0] = port(m.nic(src), 2), f.res[1] = port(m.nic(dst), 3);
      f.pair = node_pair(m.node(src), m.node(dst), int(m.device_of.size()));
      res.ranks[size_t(dst)].inter_recv_bytes += bytes;
    }
    if (src == dst) f.left = 0;
    flows.push_back(f);
  };
  auto start_flow = [&](int src, int dst, const Posted& s, const Posted& r) {
    WF_CHECK(s.bytes == r.bytes, "rank {} sends {} bytes but rank {} receives {}", src, s.bytes,
             dst, r.bytes);
    add_flow(src, dst, s.bytes, s.request, r.request, -1);
  };

  // Running collectives: one step of the algorithm at a time, each step's transfers as flows that
  // share the links with everything else in flight; the members go on when the last step ends.
  struct CollRun {
    int group = 0;
    Coll coll = Coll::AllGather;
    double chunk = 0;
    int steps = 0, step = 0, pending = 0;
  };
  std::map<int, CollRun> colls;
  int next_coll = 0;
  std::vector<std::pair<int, int>> edges;
  std::function<void(int)> coll_step = [&](int id) {
    CollRun& c = colls.at(id);
    const auto& g = prog.groups[c.group];
    const int n = static_cast<int>(g.size());
    if (c.step == c.steps) {
      for (int member : g) {
        ready.push({now, member});
        span(member, st[member].pc - 1, st[member].blocked_at, now);
      }
      colls.erase(id);
      return;
    }
    step_edges(c.coll, g, 1 + c.step % (n - 1), edges);
    ++c.step;
    c.pending = 0;
    for (auto [a, b] : edges)
      if (a != b) add_flow(a, b, c.chunk, -1, -1, id), ++c.pending;
    if (c.pending == 0) coll_step(id);
  };

  // Runs rank r from time `now` until it computes, blocks or ends.
  auto run_rank = [&](int r) {
    RankState& s = st[r];
    const auto& ops = prog.ops[r];
    while (s.pc < ops.size()) {
      const Op& o = ops[s.pc];
      if (o.kind == Op::Kind::Compute) {
        const double rate = o.work == Work::AttentionFwd   ? m.attention_fwd_flops
                            : o.work == Work::AttentionBwd ? m.attention_bwd_flops
                                                           : m.gemm_flops;
        res.ranks[r].compute += o.flops / rate;
        span(r, s.pc, now, now + o.flops / rate);
        ++s.pc;
        ready.push({now + o.flops / rate, r});
        return;
      }
      if (o.kind == Op::Kind::Send || o.kind == Op::Kind::Recv) {
        const bool is_send = o.kind == Op::Kind::Send;
        WF_CHECK(o.peer >= 0 && o.peer < P, "rank {} talks to rank {} outside 0..{}", r, o.peer,
                 P - 1);
        WF_CHECK(!s.done.count(o.request), "rank {} reuses request {}", r, o.request);
        s.done[o.request] = -1;
        if (spans) s.posted[o.request] = {int(s.pc), now};
        Posted me{now, o.request, o.bytes};
        const int src = is_send ? r : o.peer, dst = is_send ? o.peer : r;
        auto key = std::make_tuple(src, dst, o.tag);
        auto& other = is_send ? recvs[key] : sends[key];
        if (!other.empty()) {
          Posted them = other.front();
          other.pop_front();
          is_send ? start_flow(src, dst, me, them) : start_flow(src, dst, them, me);
        } else {
          (is_send ? sends[key] : recvs[key]).push_back(me);
        }
        if (is_send) {
          res.ranks[r].p2p_bytes += o.bytes;
          if (!m.same_node(r, o.peer)) res.ranks[r].inter_bytes += o.bytes;
        }
      } else if (o.kind == Op::Kind::Wait) {
        auto it = s.done.find(o.request);
        WF_CHECK(it != s.done.end(), "rank {} waits for request {} it never posted", r, o.request);
        if (it->second < 0) {
          s.waiting_for = o.request;
          s.blocked_at = now;
          ++s.pc;  // resumes after the wait
          return;
        }
        span(r, s.pc, now, now);
      } else {  // collective
        const auto& g = prog.groups[o.group];
        WF_CHECK(std::find(g.begin(), g.end(), r) != g.end(),
                 "rank {} runs a collective on a group it is not in", r);
        auto key = std::make_pair(o.group, s.coll_k);
        int& arrived = arrivals[key];
        auto [sent, inter] = coll_sent_bytes(o.coll, g, r, o.bytes, m);
        res.ranks[r].coll_bytes += sent;
        res.ranks[r].inter_bytes += inter;
        ++s.coll_k;
        ++s.pc;
        s.blocked_at = now;
        if (++arrived == int(g.size())) {
          const int n = static_cast<int>(g.size());
          const int id = next_coll++;
          colls[id] = {o.group, o.coll, chunk_bytes(o.coll, o.bytes, n),
                       algorithm_steps(o.coll, n)};
          coll_step(id);
        }
        return;  // resumes when the whole group is done
      }
      ++s.pc;
    }
    s.finished = true;
    res.ranks[r].finish = now;
  };

  while (true) {
    // The next flow event: a latency running out or a transfer completing at its current rate.
    double t_flow = std::numeric_limits<double>::infinity();
    int next = -1;
    for (size_t i = 0; i < flows.size(); ++i) {
      const Flow& f = flows[i];
      const double t = !f.active ? f.active_at : f.left <= 0 ? now : now + f.left / f.rate;
      if (t < t_flow) t_flow = t, next = static_cast<int>(i);
    }
    const double t_rank =
        ready.empty() ? std::numeric_limits<double>::infinity() : ready.top().first;
    if (next < 0 && ready.empty()) break;
    const double t = std::min(t_flow, t_rank);
    for (Flow& f : flows)
      if (f.active) f.left = std::max(0.0, f.left - f.rate * (t - now));
    now = t;
    if (next >= 0 && t_flow <= t_rank) {
      Flow& f = flows[next];
      if (!f.active && f.left > 0) {
        f.active = true;
      } else {
        const Flow done = f;
        flows.erase(flows.begin() + next);
        if (done.coll >= 0) {
          if (--colls.at(done.coll).pending == 0) coll_step(done.coll);
        } else {
          complete(done.src, done.send_req, now);
          complete(done.dst, done.recv_req, now);
        }
      }
      rerate();
      continue;
    }
    const int r = ready.top().second;
    ready.pop();
    run_rank(r);
  }

  for (int r = 0; r < P; ++r)
    WF_CHECK(st[r].finished, "the schedule deadlocks: rank {} cannot get past op {}", r, st[r].pc);
  for (auto& [key, q] : sends)
    WF_CHECK(q.empty(), "rank {} sends to rank {} but nothing receives it", std::get<0>(key),
             std::get<1>(key));
  for (auto& [key, q] : recvs)
    WF_CHECK(q.empty(), "rank {} receives from rank {} but nothing is sent", std::get<1>(key),
             std::get<0>(key));

  int last = 0;
  for (int r = 0; r < P; ++r)
    if (res.ranks[r].finish > res.ranks[last].finish) last = r;
  res.time = res.ranks[last].finish;
  res.compute = res.ranks[last].compute;
  res.exposed_comm = res.time - res.compute;
  return res;
}

}  // namespace wallfacer::plan
