#include "wallfacer/plan/simulator.h"

#include <algorithm>
#include <cstdint>
#include <deque>
#include <functional>
#include <limits>
#include <map>
#include <queue>
#include <tuple>
#include <unordered_map>

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

size_t Program::MembersHash::operator()(const std::vector<int>& g) const {
  uint64_t h = 1469598103934665603ull;
  for (int m : g) h = (h ^ uint64_t(uint32_t(m))) * 1099511628211ull;
  return size_t(h);
}

int Program::group(const std::vector<int>& members) {
  if (index_.size() != groups.size()) {  // groups added directly, or a copy's index
    index_.clear();
    for (size_t i = 0; i < groups.size(); ++i) index_.emplace(groups[i], static_cast<int>(i));
  }
  const auto [it, added] = index_.emplace(members, static_cast<int>(groups.size()));
  if (added) groups.push_back(members);
  return it->second;
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
  m.duplex_sharing = c.duplex_sharing();
  m.gemm_flops = c.gemm_flops;
  m.attention_fwd_flops = c.fwd_rate(head_dim);
  m.attention_bwd_flops = c.bwd_rate(head_dim);
  m.device_of = std::move(device_of);
  return m;
}

namespace {

// Open MPI 4.1's tuned all-to-all (coll_tuned_decision_fixed.c): 1 linear, 2 pairwise, 3 modified
// Bruck, 4 linear with a bounded number of requests, 5 two processes; by group size and bytes per
// peer. Each row: groups below `ranks`, then (bytes below, algorithm) pairs, the last for any size.
int alltoall_algorithm(int n, double block) {
  struct Row {
    int ranks;
    std::vector<std::pair<double, int>> by_bytes;
  };
  constexpr double kAny = std::numeric_limits<double>::infinity();
  static const std::vector<Row> rows = {
      {3,
       {{2, 2},
        {4, 5},
        {16, 2},
        {64, 5},
        {256, 2},
        {4096, 5},
        {32768, 2},
        {262144, 4},
        {1048576, 5},
        {kAny, 2}}},
      {8, {{8192, 4}, {16384, 1}, {65536, 4}, {524288, 1}, {1048576, 2}, {kAny, 1}}},
      {16, {{262144, 4}, {kAny, 1}}},
      {32, {{4, 4}, {512, 3}, {8192, 4}, {32768, 1}, {262144, 4}, {524288, 1}, {kAny, 4}}},
      {64, {{512, 3}, {524288, 1}, {kAny, 4}}},
      {128, {{1024, 3}, {2048, 1}, {4096, 4}, {262144, 1}, {kAny, 2}}},
      {256, {{1024, 3}, {2048, 4}, {262144, 1}, {kAny, 2}}},
      {512, {{1024, 3}, {8192, 4}, {32768, 1}, {kAny, 2}}},
      {1024, {{512, 3}, {8192, 4}, {16384, 1}, {131072, 4}, {262144, 1}, {kAny, 2}}},
      {2048, {{512, 3}, {1024, 4}, {2048, 1}, {16384, 4}, {262144, 1}, {kAny, 4}}},
      {4096, {{1024, 3}, {4096, 4}, {8192, 1}, {131072, 4}, {kAny, 1}}},
      {std::numeric_limits<int>::max(),
       {{2048, 3}, {8192, 4}, {16384, 1}, {32768, 4}, {65536, 1}, {kAny, 4}}},
  };
  for (const Row& r : rows)
    if (n < r.ranks)
      for (auto [below, alg] : r.by_bytes)
        if (block < below) return alg;
  return 1;
}

}  // namespace

std::vector<std::vector<CollTransfer>> collective_steps(Coll c, int n, double bytes) {
  std::vector<std::vector<CollTransfer>> steps;
  if (n <= 1) return steps;
  auto shifted = [&](int shift, double b) {  // every member sends to the one `shift` after it
    std::vector<CollTransfer> s;
    for (int j = 0; j < n; ++j) s.push_back({j, (j + shift) % n, b});
    return s;
  };
  auto everyone = [&] {  // every member to every other at once
    std::vector<CollTransfer> s;
    for (int k = 1; k < n; ++k)
      for (int j = 0; j < n; ++j) s.push_back({j, (j + k) % n, bytes});
    return s;
  };
  switch (c) {
    case Coll::AllGather:
      if (n == 2 || n >= 32) {  // two processes: one exchange; large groups: the ring
        for (int k = 1; k < n; ++k) steps.push_back(shifted(1, bytes));
      } else if ((n & (n - 1)) == 0) {  // recursive doubling: partner j ^ d, d blocks
        for (int d = 1; d < n; d *= 2) {
          std::vector<CollTransfer> s;
          for (int j = 0; j < n; ++j) s.push_back({j, j ^ d, d * bytes});
          steps.push_back(s);
        }
      } else {  // Bruck: to j - d, min(d, n - d) blocks
        for (int d = 1; d < n; d *= 2) steps.push_back(shifted(n - d, std::min(d, n - d) * bytes));
      }
      break;
    case Coll::ReduceScatter:  // Communicator::reduce_scatter_sum: one exchange, all at once
      steps.push_back(everyone());
      break;
    case Coll::AllReduce:
      for (int k = 0; k < 2 * (n - 1); ++k) steps.push_back(shifted(1, bytes / n));
      break;
    case Coll::AllToAll:
      switch (alltoall_algorithm(n, bytes)) {
        case 1:
        case 4:
        case 5:
          steps.push_back(everyone());
          break;
        default:  // pairwise (and the modified Bruck of tiny blocks, as pairwise)
          for (int k = 1; k < n; ++k) steps.push_back(shifted(k, bytes));
      }
      break;
  }
  return steps;
}

namespace {

// Bytes each member of group g (in its order) sends in this collective as its algorithm runs, and
// how many of them leave the node.
std::vector<std::pair<double, double>> coll_sent_bytes(
    const std::vector<std::vector<CollTransfer>>& steps, const std::vector<int>& g,
    const Machine& m) {
  std::vector<std::pair<double, double>> out(g.size(), {0.0, 0.0});
  for (const auto& step : steps)
    for (const CollTransfer& t : step)
      if (t.to != t.from) {
        auto& [sent, inter] = out[size_t(t.from)];
        sent += t.bytes;
        if (!m.same_node(g[size_t(t.from)], g[size_t(t.to)])) inter += t.bytes;
      }
  return out;
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
  double bandwidth = 0;  // of its link class
  int pair = kNoPair;    // between nodes: the (source, destination) node pair's resource
  // Between nodes, while data also flows back from dst to src: the connection carries both ways,
  // and each direction's acknowledgements queue behind the other's data, so the flow also takes a
  // share of the source card's ingress and the destination card's egress (`back`).
  bool both_ways = false;
  int back[2] = {0, 0};
  int coll = -1;      // a step of this running collective (its requests are then unused)
  double since = 0;   // s: when `left` was last brought up to date (it streams at `rate` since)
  uint64_t seq = 0;   // creation order: of two events at one time, the older flow's goes first
  bool live = false;  // the slot holds a flow in flight
};

// A flow's next event: its latency running out or, at its current rate, its bytes arriving.
// 16 bytes: the flow's creation order (Flow::seq, below 2^32) and its slot in one word, so that
// a heap node's children share a cache line.
struct FlowEvent {
  FlowEvent() = default;
  FlowEvent(double time, uint64_t seq, int slot) : t(time), order(seq << 32 | uint32_t(slot)) {}
  double t = 0;
  uint64_t order = 0;  // seq * 2^32 + slot
  int slot() const { return int(uint32_t(order)); }
  bool operator<(const FlowEvent& o) const { return t < o.t || (t == o.t && order < o.order); }
};

// Resource ids: 4 per device / card: device egress, device ingress, card egress, card ingress;
// node pairs after all of them, numbered as they first carry a flow.
int port(int index, int kind) { return 4 * index + kind; }

// One posted send or receive not yet matched.
struct Posted {
  double time;
  int request;
  double bytes;
};

// The posted sends and receives not yet matched, by (canonical source, offset, tag): an
// open-addressing table whose entries hold a queue of each side (a few at most), as lists in one
// pool of nodes that matched ones return to.
class PostedTable {
 public:
  struct Key {
    int src = 0, offset = 0, tag = 0;
    bool operator==(const Key&) const = default;
  };
  // The oldest posted on the other side of `key` (the receives for a send) moved to *them (true),
  // or `me` queued on its side (false).
  bool match_or_queue(const Key& key, bool is_send, const Posted& me, Posted* them) {
    Entry& e = entry(key);
    const int other = is_send ? 1 : 0, mine = 1 - other;
    if (e.head[other] >= 0) {
      const int n = e.head[other];
      *them = nodes_[size_t(n)].posted;
      e.head[other] = nodes_[size_t(n)].next;
      free_.push_back(n);
      return true;
    }
    int n = 0;
    if (free_.empty()) {
      n = int(nodes_.size());
      nodes_.push_back({me, -1});
    } else {
      n = free_.back();
      free_.pop_back();
      nodes_[size_t(n)] = {me, -1};
    }
    if (e.head[mine] < 0) {
      e.head[mine] = n;
    } else {
      nodes_[size_t(e.tail[mine])].next = n;
    }
    e.tail[mine] = n;
    return false;
  }
  // A key with a send (is_send) or a receive left unmatched, if any.
  const Key* unmatched(bool is_send) const {
    for (const Entry& e : table_)
      if (e.used && e.head[is_send ? 0 : 1] >= 0) return &e.key;
    return nullptr;
  }

 private:
  struct Entry {
    Key key;
    int head[2] = {-1, -1}, tail[2] = {-1, -1};  // [0]: sends, [1]: receives
    bool used = false;
  };
  struct Node {
    Posted posted;
    int next = -1;
  };
  static size_t hash(const Key& k) {
    const uint64_t h =
        (uint64_t(uint32_t(k.src)) << 32 | uint32_t(k.offset)) * 31 + uint32_t(k.tag);
    return size_t((h ^ (h >> 29)) * 0x9e3779b97f4a7c15ull >> 17);
  }
  Entry& entry(const Key& key) {
    if (2 * (used_ + 1) > table_.size()) grow();
    const size_t mask = table_.size() - 1;
    for (size_t i = hash(key) & mask;; i = (i + 1) & mask) {
      Entry& e = table_[i];
      if (!e.used) {
        e.used = true;
        e.key = key;
        ++used_;
        return e;
      }
      if (e.key == key) return e;
    }
  }
  void grow() {
    std::vector<Entry> old = std::move(table_);
    table_.assign(std::max<size_t>(64, 2 * old.size()), Entry{});
    const size_t mask = table_.size() - 1;
    for (const Entry& e : old) {
      if (!e.used) continue;
      size_t i = hash(e.key) & mask;
      while (table_[i].used) i = (i + 1) & mask;
      table_[i] = e;
    }
  }
  std::vector<Entry> table_;
  size_t used_ = 0;
  std::vector<Node> nodes_;
  std::vector<int> free_;
};

// One simulated run, in named steps. The event loop (run) takes the earliest event: a flow's
// latency running out or its bytes arriving (on_flow_event), or a rank ready to go on (run_rank,
// which runs the rank's ops until it computes, blocks or ends). Transfers start when both sides
// are posted (post_transfer); a collective starts when its whole group arrived (arrive_collective)
// and runs its algorithm one step at a time (collective_step).
class Simulation {
 public:
  Simulation(const Program& prog, const Machine& m, std::vector<SimSpan>* spans)
      : prog_(prog),
        m_(m),
        spans_(spans),
        P_(prog.ranks()),
        N_(int(m.device_of.size())),
        st_(size_t(P_)) {
    check_program();
    res_.ranks.resize(size_t(P_));
    int devices = 0;
    for (int d : m_.device_of) devices = std::max(devices, d + 1);
    load_.assign(size_t(port(devices, 0)), 0.0);
    visited_.assign(load_.size(), 0);
    on_.resize(load_.size());
    arrivals_.resize(prog_.groups.size());
    plans_.resize(prog_.groups.size());
    for (int r = 0; r < P_; ++r) ready_.push({0.0, r});
  }

  void run();
  // Throws when a rank never finished or a message was never matched.
  void check_drained() const;
  // The last rank to finish: the time, its compute and the communication it did not hide.
  SimResult result();

 private:
  struct RankState {
    size_t pc = 0;
    int coll_k = 0;
    bool arrived = false;  // at its current collective
    bool finished = false;
    // request -> completion time: kInFlight while in flight, kUnposted before it is posted
    std::vector<double> done;
    int waiting_for = -1;   // request it is blocked on
    double blocked_at = 0;  // when it arrived at its current wait or collective
    std::map<int, std::pair<int, double>> posted;  // request -> (op, post time), for spans
  };
  // A running collective: one step of the algorithm at a time, each step's transfers as flows that
  // share the links with everything else in flight; the members go on when the last step ends.
  struct CollRun {
    int group = 0;
    int plan = 0;  // its steps: plans_[group][plan].steps, by member positions in the group
    size_t step = 0;
    int pending = 0;
  };
  using Ready = std::pair<double, int>;  // (time, rank)
  static constexpr double kInFlight = -1, kUnposted = -2;

  void check_program() const;
  // The members of group g that run (the others are images of them, see simulate).
  int simulated_members(const std::vector<int>& g) const {
    return int(std::count_if(g.begin(), g.end(), [&](int r) { return r < P_; }));
  }
  // The event heap: one event per live flow, the earliest (t, seq) on top; a flow's event moves
  // in place when its time changes.
  void heap_place(size_t i, const FlowEvent& e) {
    heap_[i] = e;
    heap_at_[size_t(e.slot())] = int(i);
  }
  void heap_up(size_t i);
  void heap_down(size_t i);
  void heap_pop();
  // The earliest flow event, of a flow starting or of the heap (nullptr: none), and its removal.
  const FlowEvent* next_flow_event() const;
  void pop_flow_event(const FlowEvent* e);
  // The resource of the (source, destination) node pair.
  int node_pair(int src_node, int dst_node);
  void on_flow_event(int slot);
  // A flow's resources while active: its ports or cards, its node pair, and while both ways the
  // reverse direction of both cards. Each changes the load of the resource by `delta`.
  // delta = +1 / -1: the flow in `slot` joins / leaves the resource, adding `weight` to its load.
  void add_load(int slot, int resource, int delta, double weight = 1.0);
  void add_loads(int slot, int delta);
  void set_both_ways(int slot, bool both);
  void activate(int slot);
  void deactivate(int slot);
  // Rates of the active flows on the resources whose load changed since the last call; a flow
  // whose rate changes gets its bytes up to date and a new event.
  void rerate();
  void schedule_event(int slot);
  void span(int rank, size_t op, double t0, double t1);
  void complete(int rank, int request, double t);
  // A transfer of `bytes` from src to dst, from now: the latency of its link, then its bytes.
  void add_flow(int src, int dst, double bytes, int send_req, int recv_req, int coll);
  void start_flow(int src, int dst, const Posted& s, const Posted& r);
  void collective_step(int id);
  void run_rank(int r);
  void start_compute(int r, const Op& o);
  void post_transfer(int r, const Op& o);
  bool pass_wait(int r, const Op& o);  // false: blocked until the request completes
  void arrive_collective(int r, const Op& o);

  const Program& prog_;
  const Machine& m_;
  std::vector<SimSpan>* spans_;
  const int P_;  // ranks simulated
  const int N_;  // ranks of the layout (P_ < N_: the program is a quotient, see simulate)
  // The simulated rank that layout rank `rank` behaves as.
  int at(int rank) const { return rank % P_; }
  std::vector<RankState> st_;
  SimResult res_;
  // The canonical form of a transfer between layout ranks: (src % P_, (dst - src) mod N_), the one
  // of its orbit under the shift by P_ whose source is simulated.
  std::pair<int, int> canonical(int src, int dst) const {
    return {src % P_, ((dst - src) % N_ + N_) % N_};
  }
  // (canonical source, offset, tag) -> posted and not yet matched
  PostedTable posted_;
  std::vector<std::vector<int>> arrivals_;  // per group, per k: members arrived
  // Per group: (collective, bytes) -> its steps and, per member, the bytes it sends, of them
  // between nodes
  struct CollPlan {
    int coll;
    double bytes;
    const std::vector<std::vector<CollTransfer>>* steps;  // in steps_
    std::vector<std::pair<double, double>> sent;
  };
  // (collective, group size, bytes) -> its steps (collective_steps), made once
  std::map<std::tuple<int, int, double>, std::vector<std::vector<CollTransfer>>> steps_;
  std::vector<std::vector<CollPlan>> plans_;
  std::priority_queue<Ready, std::vector<Ready>, std::greater<>> ready_;  // ranks ready, by time
  std::vector<Flow> flows_;  // slots: in flight when live
  std::vector<int> free_slots_;
  uint64_t next_seq_ = 0;
  static constexpr size_t kHeapArity = 4;
  std::vector<FlowEvent> heap_;  // a kHeapArity-ary heap by (t, seq)
  // Flows not yet started (their latency running), per latency: each queue in (time, creation)
  // order, as they were added; the heap holds the others' events.
  std::vector<std::pair<double, std::deque<FlowEvent>>> starting_;
  std::vector<int> heap_at_;          // per slot: the place of its next event in heap_ (-1: none)
  std::vector<double> load_;          // resource -> active flows on it (both-ways shares)
  std::vector<std::vector<int>> on_;  // resource -> active flows' slots
  std::unordered_map<int64_t, int> pair_ids_;  // source node * nodes + destination -> resource
  std::vector<int> changed_;                   // resources whose load changed
  std::vector<uint64_t> visited_;              // per resource: last rerate that visited it
  // canonical (src, dst) -> active flows between nodes (duplex_sharing > 0 only)
  std::unordered_map<int64_t, std::vector<int>> inter_;
  int64_t inter_key(int src, int dst) const {
    const auto [a, b] = canonical(src, dst);
    return int64_t(a) * N_ + b;
  }
  std::vector<uint64_t> stamp_;  // per slot: last rerate that visited it
  uint64_t rerates_ = 0;
  double now_ = 0;
  std::vector<CollRun> colls_;  // by id
};

void Simulation::check_program() const {
  WF_CHECK(P_ >= 1 && N_ >= P_ && N_ % P_ == 0,
           "machine has {} devices for {} ranks: a multiple of them is needed", N_, P_);
  for (const auto& g : prog_.groups) {
    for (int r : g) WF_CHECK(r >= 0 && r < N_, "group member {} outside 0..{}", r, N_ - 1);
    WF_CHECK(simulated_members(g) > 0, "a group of ranks outside 0..{} alone", P_ - 1);
  }
}

int Simulation::node_pair(int src_node, int dst_node) {
  const auto [it, added] = pair_ids_.emplace(int64_t(src_node) * N_ + dst_node, int(load_.size()));
  if (added) {
    load_.push_back(0.0);
    visited_.push_back(0);
    on_.emplace_back();
  }
  return it->second;
}

void Simulation::add_load(int slot, int resource, int delta, double weight) {
  load_[size_t(resource)] += delta * weight;
  auto& on = on_[size_t(resource)];
  if (delta > 0) {
    on.push_back(slot);
  } else {
    on.erase(std::find(on.begin(), on.end(), slot));
  }
  changed_.push_back(resource);
}

void Simulation::add_loads(int slot, int delta) {
  const Flow& f = flows_[size_t(slot)];
  add_load(slot, f.res[0], delta);
  add_load(slot, f.res[1], delta);
  if (f.pair != kNoPair) add_load(slot, f.pair, delta);
  if (f.both_ways) {
    add_load(slot, f.back[0], delta, m_.duplex_sharing);
    add_load(slot, f.back[1], delta, m_.duplex_sharing);
  }
}

void Simulation::set_both_ways(int slot, bool both) {
  Flow& f = flows_[size_t(slot)];
  if (f.both_ways == both) return;
  if (f.both_ways) {
    add_load(slot, f.back[0], -1, m_.duplex_sharing);
    add_load(slot, f.back[1], -1, m_.duplex_sharing);
  }
  f.both_ways = both;
  if (both) {
    add_load(slot, f.back[0], +1, m_.duplex_sharing);
    add_load(slot, f.back[1], +1, m_.duplex_sharing);
  }
}

void Simulation::activate(int slot) {
  Flow& f = flows_[size_t(slot)];
  f.active = true;
  f.since = now_;
  f.rate = 0;
  f.both_ways = false;
  if (f.pair != kNoPair && m_.duplex_sharing > 0) {
    auto& fwd = inter_[inter_key(f.src, f.dst)];
    fwd.push_back(slot);
    auto back = inter_.find(inter_key(f.dst, f.src));
    const bool reverse = back != inter_.end() && !back->second.empty();
    flows_[size_t(slot)].both_ways = reverse;
    if (reverse && fwd.size() == 1)
      for (int g : back->second) set_both_ways(g, true);
  }
  add_loads(slot, +1);
}

void Simulation::deactivate(int slot) {
  add_loads(slot, -1);
  Flow& f = flows_[size_t(slot)];
  f.active = false;
  if (f.pair != kNoPair && m_.duplex_sharing > 0) {
    auto& fwd = inter_[inter_key(f.src, f.dst)];
    fwd.erase(std::find(fwd.begin(), fwd.end(), slot));
    if (fwd.empty()) {
      auto back = inter_.find(inter_key(f.dst, f.src));
      if (back != inter_.end())
        for (int g : back->second) set_both_ways(g, false);
    }
  }
}

void Simulation::heap_up(size_t i) {
  const FlowEvent e = heap_[i];
  while (i > 0) {
    const size_t parent = (i - 1) / kHeapArity;
    if (!(e < heap_[parent])) break;
    heap_place(i, heap_[parent]);
    i = parent;
  }
  heap_place(i, e);
}

void Simulation::heap_down(size_t i) {
  const FlowEvent e = heap_[i];
  const size_t n = heap_.size();
  while (true) {
    const size_t first = kHeapArity * i + 1;
    if (first >= n) break;
    size_t child = first;
    for (size_t c = first + 1; c < std::min(first + kHeapArity, n); ++c)
      if (heap_[c] < heap_[child]) child = c;
    if (!(heap_[child] < e)) break;
    heap_place(i, heap_[child]);
    i = child;
  }
  heap_place(i, e);
}

void Simulation::heap_pop() {
  heap_at_[size_t(heap_.front().slot())] = -1;
  const FlowEvent last = heap_.back();
  heap_.pop_back();
  if (heap_.empty()) return;
  heap_place(0, last);
  heap_down(0);
}

void Simulation::schedule_event(int slot) {
  const Flow& f = flows_[size_t(slot)];
  const FlowEvent e{!f.active     ? f.active_at
                    : f.left <= 0 ? now_
                                  : now_ + f.left / f.rate,
                    f.seq, slot};
  const int at = heap_at_[size_t(slot)];
  if (at < 0) {
    heap_.push_back(e);
    heap_up(heap_.size() - 1);
  } else {
    const size_t i = size_t(at);
    heap_[i] = e;
    heap_up(i);
    heap_down(size_t(heap_at_[size_t(slot)]));
  }
}

void Simulation::rerate() {
  ++rerates_;
  for (int resource : changed_) {
    if (visited_[size_t(resource)] == rerates_) continue;  // listed again: its flows are done
    visited_[size_t(resource)] = rerates_;
    for (int slot : on_[size_t(resource)]) {
      if (stamp_[size_t(slot)] == rerates_) continue;
      stamp_[size_t(slot)] = rerates_;
      Flow& f = flows_[size_t(slot)];
      double busiest = std::max(load_[size_t(f.res[0])], load_[size_t(f.res[1])]);
      if (f.both_ways)
        busiest = std::max({busiest, load_[size_t(f.back[0])], load_[size_t(f.back[1])]});
      double rate = f.bandwidth / busiest;
      if (f.pair != kNoPair && m_.pair_bandwidth > 0)
        rate = std::min(rate, m_.pair_bandwidth / load_[size_t(f.pair)]);
      if (rate == f.rate) continue;
      if (f.rate > 0) f.left = std::max(0.0, f.left - f.rate * (now_ - f.since));
      f.since = now_;
      f.rate = rate;
      schedule_event(slot);
    }
  }
  changed_.clear();
}

void Simulation::span(int rank, size_t op, double t0, double t1) {
  if (spans_) spans_->push_back({rank, int(op), t0, t1});
}

void Simulation::complete(int rank, int request, double t) {
  RankState& s = st_[rank];
  s.done[size_t(request)] = t;
  if (spans_) {
    auto [op, t0] = s.posted.at(request);
    span(rank, size_t(op), t0, t);
  }
  if (s.waiting_for == request) {
    span(rank, s.pc - 1, s.blocked_at, t);
    s.waiting_for = -1;
    ready_.push({t, rank});
  }
}

void Simulation::add_flow(int src, int dst, double bytes, int send_req, int recv_req, int coll) {
  Flow f;
  f.src = src, f.dst = dst, f.send_req = send_req, f.recv_req = recv_req, f.coll = coll;
  f.total = f.left = bytes;
  const bool local = m_.same_node(src, dst);
  const double latency = src == dst ? 0.0 : local ? m_.intra.latency : m_.inter.latency;
  f.active_at = now_ + latency;
  f.bandwidth = local ? m_.intra.bandwidth : m_.inter.bandwidth;
  if (local) {
    f.res[0] = port(m_.device_of[src], 0), f.res[1] = port(m_.device_of[size_t(at(dst))], 1);
  } else {
    f.res[0] = port(m_.nic(src), 2), f.res[1] = port(m_.nic(at(dst)), 3);
    f.back[0] = port(m_.nic(src), 3), f.back[1] = port(m_.nic(at(dst)), 2);
    f.pair = node_pair(m_.node(src), m_.node(dst));
    res_.ranks[size_t(at(dst))].inter_recv_bytes += bytes;
  }
  if (src == dst) f.left = 0;
  WF_CHECK(next_seq_ < (uint64_t(1) << 32), "more than 2^32 transfers in one simulation");
  f.seq = next_seq_++;
  f.live = true;
  int slot = 0;
  if (free_slots_.empty()) {
    slot = int(flows_.size());
    flows_.push_back(f);
    stamp_.push_back(0);
    heap_at_.push_back(-1);
  } else {
    slot = free_slots_.back();
    free_slots_.pop_back();
    flows_[size_t(slot)] = f;
  }
  // Its start (its latency out) queued with those of the same latency: in the order of their
  // (time, creation), as the clock only goes on.
  auto q = std::find_if(starting_.begin(), starting_.end(),
                        [&](const auto& l) { return l.first == latency; });
  if (q == starting_.end()) q = starting_.insert(starting_.end(), {latency, {}});
  q->second.push_back({f.active_at, f.seq, slot});
}

void Simulation::start_flow(int src, int dst, const Posted& s, const Posted& r) {
  WF_CHECK(s.bytes == r.bytes, "rank {} sends {} bytes but rank {} receives {}", src, s.bytes, dst,
           r.bytes);
  add_flow(src, dst, s.bytes, s.request, r.request, -1);
}

void Simulation::collective_step(int id) {
  CollRun& c = colls_[size_t(id)];
  const auto& g = prog_.groups[c.group];
  const auto& steps = *plans_[size_t(c.group)][size_t(c.plan)].steps;
  if (c.step == steps.size()) {
    for (int member : g) {
      if (member >= P_) continue;  // an image of a member that runs
      ready_.push({now_, member});
      span(member, st_[member].pc - 1, st_[member].blocked_at, now_);
    }
    return;
  }
  c.pending = 0;
  for (const CollTransfer& t : steps[c.step])
    if (t.from != t.to && g[size_t(t.from)] < P_)
      add_flow(g[size_t(t.from)], g[size_t(t.to)], t.bytes, -1, -1, id), ++c.pending;
  ++c.step;
  if (c.pending == 0) collective_step(id);
}

void Simulation::start_compute(int r, const Op& o) {
  RankState& s = st_[r];
  const double rate = o.work == Work::AttentionFwd   ? m_.attention_fwd_flops
                      : o.work == Work::AttentionBwd ? m_.attention_bwd_flops
                                                     : m_.gemm_flops;
  res_.ranks[r].compute += o.flops / rate;
  span(r, s.pc, now_, now_ + o.flops / rate);
  ++s.pc;
  ready_.push({now_ + o.flops / rate, r});
}

void Simulation::post_transfer(int r, const Op& o) {
  RankState& s = st_[r];
  const bool is_send = o.kind == Op::Kind::Send;
  WF_CHECK(o.peer >= 0 && o.peer < N_, "rank {} talks to rank {} outside 0..{}", r, o.peer, N_ - 1);
  WF_CHECK(o.request >= 0, "rank {} posts request {}", r, o.request);
  if (s.done.size() <= size_t(o.request)) s.done.resize(size_t(o.request) + 1, kUnposted);
  WF_CHECK(s.done[size_t(o.request)] == kUnposted, "rank {} reuses request {}", r, o.request);
  s.done[size_t(o.request)] = kInFlight;
  if (spans_) s.posted[o.request] = {int(s.pc), now_};
  Posted me{now_, o.request, o.bytes};
  const auto [src, offset] = is_send ? canonical(r, o.peer) : canonical(o.peer, r);
  const int dst = (src + offset) % N_;
  Posted them{};
  if (posted_.match_or_queue({src, offset, o.tag}, is_send, me, &them))
    is_send ? start_flow(src, dst, me, them) : start_flow(src, dst, them, me);
  if (is_send) {
    res_.ranks[r].p2p_bytes += o.bytes;
    if (!m_.same_node(r, o.peer)) res_.ranks[r].inter_bytes += o.bytes;
  }
}

bool Simulation::pass_wait(int r, const Op& o) {
  RankState& s = st_[r];
  WF_CHECK(
      o.request >= 0 && size_t(o.request) < s.done.size() && s.done[size_t(o.request)] != kUnposted,
      "rank {} waits for request {} it never posted", r, o.request);
  if (s.done[size_t(o.request)] == kInFlight) {
    s.waiting_for = o.request;
    s.blocked_at = now_;
    ++s.pc;  // resumes after the wait
    return false;
  }
  span(r, s.pc, now_, now_);
  return true;
}

void Simulation::arrive_collective(int r, const Op& o) {
  RankState& s = st_[r];
  const auto& g = prog_.groups[o.group];
  const auto at = std::find(g.begin(), g.end(), r);  // r's position in the group
  WF_CHECK(at != g.end(), "rank {} runs a collective on a group it is not in", r);
  auto& arrivals = arrivals_[size_t(o.group)];
  if (arrivals.size() <= size_t(s.coll_k)) arrivals.resize(size_t(s.coll_k) + 1, 0);
  int& arrived = arrivals[size_t(s.coll_k)];
  auto& plans = plans_[size_t(o.group)];
  auto it = std::find_if(plans.begin(), plans.end(), [&](const CollPlan& p) {
    return p.coll == int(o.coll) && p.bytes == o.bytes;
  });
  if (it == plans.end()) {
    const int n = int(g.size());
    auto steps = steps_.find({int(o.coll), n, o.bytes});
    if (steps == steps_.end())
      steps =
          steps_.emplace(std::tuple{int(o.coll), n, o.bytes}, collective_steps(o.coll, n, o.bytes))
              .first;
    plans.push_back({int(o.coll), o.bytes, &steps->second, coll_sent_bytes(steps->second, g, m_)});
    it = plans.end() - 1;
  }
  auto [sent, inter] = it->sent[size_t(at - g.begin())];
  res_.ranks[r].coll_bytes += sent;
  res_.ranks[r].inter_bytes += inter;
  ++s.coll_k;
  ++s.pc;
  s.blocked_at = now_;
  if (++arrived == simulated_members(g)) {
    const int id = int(colls_.size());
    colls_.push_back({o.group, int(it - plans.begin())});
    collective_step(id);
  }
}

// Runs rank r from now until it computes, blocks or ends.
void Simulation::run_rank(int r) {
  RankState& s = st_[r];
  const auto& ops = prog_.ops[r];
  while (s.pc < ops.size()) {
    const Op& o = ops[s.pc];
    switch (o.kind) {
      case Op::Kind::Compute:
        start_compute(r, o);
        return;
      case Op::Kind::Send:
      case Op::Kind::Recv:
        post_transfer(r, o);
        break;
      case Op::Kind::Wait:
        if (!pass_wait(r, o)) return;
        break;
      case Op::Kind::Collective:
        arrive_collective(r, o);
        return;  // resumes when the whole group is done
    }
    ++s.pc;
  }
  s.finished = true;
  res_.ranks[r].finish = now_;
}

void Simulation::on_flow_event(int slot) {
  Flow& f = flows_[size_t(slot)];
  if (!f.active && f.left > 0) {
    activate(slot);
    return;
  }
  if (f.active) deactivate(slot);
  const Flow done = flows_[size_t(slot)];
  flows_[size_t(slot)].live = false;
  free_slots_.push_back(slot);
  if (done.coll >= 0) {
    if (--colls_[size_t(done.coll)].pending == 0) collective_step(done.coll);
  } else {
    complete(done.src, done.send_req, now_);
    complete(at(done.dst), done.recv_req, now_);
  }
}

const FlowEvent* Simulation::next_flow_event() const {
  const FlowEvent* next = heap_.empty() ? nullptr : &heap_.front();
  for (const auto& [latency, q] : starting_)
    if (!q.empty() && (!next || q.front() < *next)) next = &q.front();
  return next;
}

void Simulation::pop_flow_event(const FlowEvent* e) {
  if (!heap_.empty() && e == &heap_.front()) {
    heap_pop();
    return;
  }
  for (auto& [latency, q] : starting_)
    if (!q.empty() && e == &q.front()) {
      q.pop_front();
      return;
    }
}

void Simulation::run() {
  while (true) {
    const FlowEvent* e = next_flow_event();
    const double t_flow = e ? e->t : std::numeric_limits<double>::infinity();
    const double t_rank =
        ready_.empty() ? std::numeric_limits<double>::infinity() : ready_.top().first;
    if (!e && ready_.empty()) return;
    now_ = std::max(now_, std::min(t_flow, t_rank));
    if (e && t_flow <= t_rank) {
      // Every flow event of this instant, then the rates once: an event due now is due whatever
      // the rates that the others' change it (they hold for no time before it).
      for (; e && e->t <= now_; e = next_flow_event()) {
        const int slot = e->slot();
        pop_flow_event(e);
        on_flow_event(slot);
      }
      rerate();
      continue;
    }
    const int r = ready_.top().second;
    ready_.pop();
    run_rank(r);
  }
}

void Simulation::check_drained() const {
  for (int r = 0; r < P_; ++r)
    WF_CHECK(st_[r].finished, "the schedule deadlocks: rank {} cannot get past op {}", r,
             st_[r].pc);
  if (const PostedTable::Key* k = posted_.unmatched(true))
    WF_CHECK(false, "rank {} sends to rank {} but nothing receives it", k->src,
             (k->src + k->offset) % N_);
  if (const PostedTable::Key* k = posted_.unmatched(false))
    WF_CHECK(false, "rank {} receives from rank {} but nothing is sent", (k->src + k->offset) % N_,
             k->src);
}

SimResult Simulation::result() {
  int last = 0;
  for (int r = 0; r < P_; ++r)
    if (res_.ranks[r].finish > res_.ranks[last].finish) last = r;
  res_.time = res_.ranks[last].finish;
  res_.compute = res_.ranks[last].compute;
  res_.exposed_comm = res_.time - res_.compute;
  return res_;
}

}  // namespace

SimResult simulate(const Program& prog, const Machine& m, std::vector<SimSpan>* spans) {
  Simulation sim(prog, m, spans);
  sim.run();
  sim.check_drained();
  return sim.result();
}

}  // namespace wallfacer::plan
