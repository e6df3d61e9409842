#include "wallfacer/seqpar/schedule.h"

#include <algorithm>
#include <deque>
#include <limits>
#include <memory>
#include <optional>
#include <set>
#include <unordered_map>

#include "wallfacer/core/error.h"
#include "wallfacer/kernels/doc_mask.h"

namespace wallfacer::seqpar {
namespace {

// Message tags: one per kind of transfer so that no two streams between a pair of ranks mix.
constexpr int kTagPlace = 11, kTagKV = 12, kTagQPack = 13, kTagGrad = 14, kTagReturn = 15,
              kTagHome = 16, kTagOuter = 17;

// FLOPs per kept (query, key) pair and head: forward QK^T and PV (2 matmuls of 2D each); backward
// recomputes S and runs dV, dP, dQ, dK (5 matmuls).
constexpr double kFwdFlopsPerPair = 4.0, kBwdFlopsPerPair = 10.0;

// Whether the causal mask or the window cuts the pairs of two segments (Op::masked).
bool masked_pair(const AttnConfig& c, const Segment& q, const Segment& k) {
  return c.causal && kernels::kept_pairs({q.pos0, q.pos0 + q.rows}, {k.pos0, k.pos0 + k.rows}, true,
                                         c.window) < q.rows * k.rows;
}

// The pairs that the kernels' tiles compute for two segments, `masked` as Op::masked.
int64_t segment_tile_pairs(const Schedule& s, const Segment& q, const Segment& k, bool masked,
                           int tile_q, int tile_k) {
  return attention_tile_pairs(s.docs, q.pos0, q.rows, k.pos0, k.rows, masked, tile_q, tile_k,
                              s.cfg.window);
}

// The kept pairs and the tile pairs of every (query segment, key segment) pair, summed, and whether
// the mask cuts any of them.
struct PairSums {
  int64_t pairs = 0, tile_pairs = 0;
  bool masked = false;
};
PairSums sum_pairs(const Schedule& s, const std::vector<Segment>& qs,
                   const std::vector<Segment>& ks, int tile_q, int tile_k) {
  PairSums sum;
  auto add = [&](const Segment& q, const Segment& k) {
    const int64_t pairs = kept_pairs(s, q.pos0, q.rows, k.pos0, k.rows);
    if (pairs == 0) return;
    const bool masked = masked_pair(s.cfg, q, k);
    sum.pairs += pairs;
    sum.tile_pairs += segment_tile_pairs(s, q, k, masked, tile_q, tile_k);
    sum.masked = sum.masked || masked;
  };
  // Without documents or a window, a key segment that ends before a query segment starts keeps
  // all its pairs with it, and all its tiles (q.rows * k.rows both): with the key segments sorted
  // by position (disjoint: a team's rows), those form a prefix, counted by its rows, and only the
  // few that reach into the query segment pair by pair, in place of every pair (the (2 C u)^2
  // calls that make a step of a large team slow to list). Without the causal mask every key
  // segment is such a one.
  std::vector<Segment> sorted;
  for (const Segment& k : ks)
    if (k.rows > 0) sorted.push_back(k);
  std::sort(sorted.begin(), sorted.end(),
            [](const Segment& a, const Segment& b) { return a.pos0 < b.pos0; });
  bool disjoint = true;
  for (size_t j = 1; j < sorted.size(); ++j)
    disjoint = disjoint && sorted[j - 1].pos0 + sorted[j - 1].rows <= sorted[j].pos0;
  if (!s.docs.starts.empty() || s.cfg.window > 0 || !disjoint) {
    for (const Segment& q : qs)
      for (const Segment& k : ks) add(q, k);
    return sum;
  }
  std::vector<int64_t> rows_before(sorted.size() + 1, 0);  // rows of sorted[0 .. j-1]
  for (size_t j = 0; j < sorted.size(); ++j) rows_before[j + 1] = rows_before[j] + sorted[j].rows;
  for (const Segment& q : qs) {
    if (q.rows <= 0) continue;
    size_t j = 0;
    if (s.cfg.causal)
      j = size_t(std::partition_point(sorted.begin(), sorted.end(),
                                      [&](const Segment& k) { return k.pos0 + k.rows <= q.pos0; }) -
                 sorted.begin());
    else
      j = sorted.size();
    sum.pairs += q.rows * rows_before[j];
    sum.tile_pairs += q.rows * rows_before[j];
    for (; j < sorted.size() && sorted[j].pos0 < q.pos0 + q.rows; ++j) add(q, sorted[j]);
  }
  return sum;
}

class Builder {
 public:
  explicit Builder(Schedule& s) : s_(s) {}

  void phase(std::vector<Op>* ops) {
    ops_ = ops;
    round_ = 0;
  }

  // A new scratch buffer (names are unique: one per tensor).
  int buffer(const std::string& name, Fmt fmt, int blocks, int heads, Dtype dtype,
             bool kept = false) {
    declare(name);
    s_.buffers.push_back({name, fmt, blocks, s_.n, heads, kept, dtype});
    return int(s_.buffers.size()) - 1;
  }

  // A new buffer of the shape of `of` that shares its memory (BufferSpec::alias).
  int alias(const std::string& name, int of) {
    BufferSpec spec = s_.buffers[size_t(of)];
    WF_CHECK(!spec.kept && spec.alias < 0 && of >= kNumUserBuffers,
             "buffer {} cannot lend its memory to {}", spec.name, name);
    declare(name);
    spec.name = name;
    spec.alias = of;
    s_.buffers.push_back(spec);
    return int(s_.buffers.size()) - 1;
  }

  int64_t bytes(int buf) const { return s_.buffers[buf].blocks * block_size(buf); }
  int64_t block_size(int buf) const {
    return block_bytes(s_.buffers[buf], s_.cfg.batch, s_.cfg.head_dim);
  }
  Dtype dtype(int buf) const { return s_.buffers[buf].dtype; }

  // Where buffer `src` (fp32) travels as `dtype`: src itself, or a buffer `name` of src's shape in
  // dtype that a Copy rounds it into.
  int as_dtype(int src, const std::string& name, Dtype dtype) {
    if (this->dtype(src) == dtype) return src;
    const BufferSpec spec = s_.buffers[src];
    const int dst = buffer(name, spec.fmt, spec.blocks, spec.heads, dtype);
    local(LocalKind::Copy, src, dst);
    return dst;
  }

  void local(LocalKind kind, int src, int dst, int dst2 = -1, int shards = 1) {
    Op op;
    op.kind = OpKind::Local;
    op.local = kind;
    op.src = src;
    op.dst = dst;
    op.dst2 = dst2;
    op.shards = shards;
    push(std::move(op));
  }

  int send(int buf, int peer, int tag) {
    Op op;
    op.kind = OpKind::Send;
    op.src = buf;
    op.peer = peer;
    op.tag = tag;
    op.round = round_;
    op.bytes = bytes(buf);
    return push(std::move(op));
  }

  int recv(int buf, int peer, int tag) {
    Op op;
    op.kind = OpKind::Recv;
    op.dst = buf;
    op.peer = peer;
    op.tag = tag;
    op.bytes = bytes(buf);
    return push(std::move(op));
  }

  void wait(std::vector<int> ids) {
    std::erase(ids, -1);
    if (ids.empty()) return;
    Op op;
    op.kind = OpKind::Wait;
    op.waits = std::move(ids);
    push(std::move(op));
  }

  void next_round() { ++round_; }

  // bytes: per rank of the Communicator call's count; counted: the bytes addressed to the other
  // gsize-1 ranks, as comm::ByteCounters counts them (for these four also the ring volume).
  void collective(CollKind kind, Group group, int gsize, int src, int dst, int src2 = -1,
                  int dst2 = -1) {
    Op op;
    op.kind = OpKind::Collective;
    op.coll = kind;
    op.group = group;
    op.group_size = gsize;
    op.src = src;
    op.dst = dst;
    op.src2 = src2;
    op.dst2 = dst2;
    switch (kind) {
      case CollKind::AllGather:
        op.bytes = bytes(src);
        break;
      case CollKind::ReduceScatterSum:
        op.bytes = bytes(dst);
        break;
      case CollKind::ReduceScatterLse:
        op.bytes = bytes(dst) + bytes(dst2);
        break;
      case CollKind::AllToAll:
        op.bytes = block_size(src);
        break;
    }
    op.counted_bytes = int64_t(gsize - 1) * op.bytes;
    push(std::move(op));
  }

  // Every (query segment, key segment) pair that the mask keeps, as one kernel call each; with
  // Schedule::summed, one op for all of them.
  // sums: the summed computes' PairSums of qs and ks where the caller has them (nullptr: summed
  // here).
  void computes(bool backward, int q, int kv, int out, int out2, const std::vector<Segment>& qs,
                const std::vector<Segment>& ks, int heads, int kv_heads,
                const PairSums* sums = nullptr) {
    auto compute = [&](int64_t pairs) {
      Op op;
      op.kind = OpKind::Compute;
      op.backward = backward;
      op.src = q;
      op.src2 = kv;
      op.dst = out;
      op.dst2 = out2;
      op.pairs = pairs;
      op.heads = heads;
      op.kv_heads = kv_heads;
      op.flops = (backward ? kBwdFlopsPerPair : kFwdFlopsPerPair) * double(pairs) * s_.cfg.batch *
                 heads * s_.cfg.head_dim;
      return op;
    };
    if (s_.summed) {
      const PairSums sum =
          sums ? *sums : sum_pairs(s_, qs, ks, s_.summed->tile_q, s_.summed->tile_k);
      if (sum.pairs == 0) return;
      Op op = compute(sum.pairs);
      op.masked = sum.masked;
      op.tile_pairs = sum.tile_pairs;
      push(std::move(op));
      return;
    }
    for (const auto& qseg : qs) {
      for (const auto& kseg : ks) {
        const int64_t pairs = kept_pairs(s_, qseg.pos0, qseg.rows, kseg.pos0, kseg.rows);
        if (pairs == 0) continue;
        Op op = compute(pairs);
        op.qseg = qseg;
        op.kseg = kseg;
        op.masked = masked_pair(s_.cfg, qseg, kseg);
        push(std::move(op));
      }
    }
  }

 private:
  int push(Op op) {
    ops_->push_back(std::move(op));
    return int(ops_->size()) - 1;
  }

  Schedule& s_;
  std::vector<Op>* ops_ = nullptr;
  int round_ = 0;
  // The buffer names declared, each once (a few dozen: a list).
  void declare(const std::string& name) {
    WF_CHECK(std::find(names_.begin(), names_.end(), name) == names_.end(),
             "schedule buffer {} declared twice", name);
    names_.push_back(name);
  }
  std::vector<std::string> names_;
};

// The rows of team `team` (C member blocks), as segments of its team block.
std::vector<Segment> team_segments(const AttnConfig& cfg, int P, int C, int team) {
  std::vector<Segment> segs;
  std::optional<HybridConfigs> h;
  if (cfg.ulysses > 1) h = hybrid_configs(cfg, P);
  for (int a = 0; a < C; ++a)
    for (const auto& run : h ? local_runs(*h, team * C + a) : local_runs(cfg, P, team * C + a))
      segs.push_back({a, run.row0, run.rows, run.pos0});
  return segs;
}

// Where the ring steps of a schedule go: teams of C ranks (rank r = t*C + a) hold team buffers of
// C blocks that circulate on rings of G ranks with the same member index.
//   WallFacer-C (ring and zigzag are C = 1): the WallFacerGeometry (placement, sub-rings).
//   Ulysses hybrid (u > 1): the same geometry over the P/u ring ranks j of world ranks j*u + m
//   (m: the Ulysses member index, innermost): a team is the u*C world ranks of C ring ranks, and
//   ring peers have the same m. With C = 1 (ring, zigzag) there is no placement and the ring runs
//   over the G = P/u Ulysses teams.
struct RingGeometry {
  int u = 1;  // Ulysses degree (1: none)
  WallFacerGeometry inner;
  int C = 1, G = 1;  // C: world ranks (blocks) per team, u times WallFacer's C
  RingGeometry(const AttnConfig& c, int P)
      : u(std::max(c.ulysses, 1)), inner(P / u, team_size(c)), C(u * inner.C), G(inner.G) {}
  bool hybrid() const { return u > 1; }
  int world(int j, int r) const { return j * u + r % u; }  // ring rank j, r's member index
  int placement_dst(int r) const { return world(inner.placement_dst(r / u), r); }
  int placement_src(int r) const { return world(inner.placement_src(r / u), r); }
  int next(int r) const { return world(inner.next(r / u), r); }
  int prev(int r) const { return world(inner.prev(r / u), r); }
  // Rank r's place on its sub-ring: prev moves it one place back (from 0 to G - 1), and the rank
  // by C world ranks.
  int ring_index(int r) const { return (r / u / inner.C) % G; }
  // The rank `steps` hops before r on its sub-ring (prev applied `steps` times): the one whose
  // block r holds at ring step `steps`.
  int back(int r, int steps) const {
    const int i = ring_index(r);
    return r + (((i - steps) % G + G) % G - i) * C;
  }
  int kv_team(int r, int step) const { return inner.kv_team(r / u, step); }
  int query_team(int r, int step) const { return inner.query_team(r / u, step); }
};

// Which side travels the ring: K,V blocks (the forward, and a backward that moves K,V) against
// the resident team queries, or query packages against the resident K,V block.
enum class Travel : uint8_t { KV, Queries };

// What the hops of a configuration's blocks and the side its backward moves depend on.
struct HopsKey {
  Strategy strategy;
  int teams, batch;
  int64_t seq;
  int heads, kv_heads, head_dim;
  bool causal;
  int ulysses;
  Dtype dtype;
  std::vector<int64_t> doc_lengths;
  Layout layout;
  int64_t window, layout_window;
  int P, team_ranks;
  std::vector<int64_t> starts;
  int travel;  // Travel, or -1 for backward_moves_kv
  bool operator==(const HopsKey&) const = default;
};
HopsKey hops_key(const Schedule& s, int travel) {
  const AttnConfig& c = s.cfg;
  return {c.strategy, c.teams,         c.batch,   c.seq,        c.heads,       c.kv_heads,
          c.head_dim, c.causal,        c.ulysses, c.dtype,      c.doc_lengths, c.layout,
          c.window,   c.layout_window, s.P,       s.team_ranks, s.docs.starts, travel};
}

// The hops that the travelling block of each origin 0..P-1 (the block it holds at step 0) makes: up
// to the last rank of the sub-ring that has kept pairs with it (0: it stays home). Without a mask
// (neither documents nor causal) every block makes all G - 1 hops. Every rank's schedule asks for
// the blocks it holds at each step and backward_moves_kv for all of them: computed once per
// configuration (the latest few are kept per thread), with each team's segments listed once. The
// reference holds until the next call.
const std::vector<int>& origin_hops(const Schedule& s, const RingGeometry& L, Travel travel) {
  const AttnConfig& c = s.cfg;
  struct Entry {
    HopsKey key;
    std::vector<int> hops;
  };
  thread_local std::deque<Entry> recent;  // newest first
  HopsKey key = hops_key(s, int(travel));
  for (const Entry& e : recent)
    if (e.key == key) return e.hops;
  std::vector<int> hops(size_t(s.P), L.G - 1);
  if (!s.docs.starts.empty() || c.causal) {
    const int C = L.C;
    std::vector<std::vector<Segment>> teams(size_t(s.P / C));
    std::vector<bool> listed(teams.size(), false);
    auto team = [&](int t) -> const std::vector<Segment>& {
      if (!listed[size_t(t)])
        teams[size_t(t)] = team_segments(c, s.P, C, t), listed[size_t(t)] = true;
      return teams[size_t(t)];
    };
    // Without documents or a window a team pair has kept pairs when its last query is not before
    // its first key: per team, its last query position and its first key position.
    const bool bounds = s.docs.starts.empty() && c.window <= 0;
    std::vector<int64_t> last_q(teams.size()), first_k(teams.size());
    if (bounds)
      for (size_t t = 0; t < teams.size(); ++t) {
        last_q[t] = -1, first_k[t] = std::numeric_limits<int64_t>::max();
        for (const Segment& seg : team(int(t))) {
          if (seg.rows <= 0) continue;
          last_q[t] = std::max(last_q[t], seg.pos0 + seg.rows - 1);
          first_k[t] = std::min(first_k[t], seg.pos0);
        }
      }
    auto pairs = [&](int x, int step) {  // whether rank x has kept pairs at this step
      const int qt = travel == Travel::KV ? x / C : L.query_team(x, step);
      const int kt = L.kv_team(x, travel == Travel::KV ? step : 0);
      if (bounds) return last_q[size_t(qt)] >= first_k[size_t(kt)];
      for (const Segment& q : team(qt))
        for (const Segment& k : team(kt))
          if (kept_pairs(s, q.pos0, q.rows, k.pos0, k.rows) > 0) return true;
      return false;
    };
    // The last step with pairs, from the end of the ring back (the rank t hops on is the one G - t
    // hops back): mostly the first one looked at.
    for (int origin = 0; origin < s.P; ++origin) {
      int last = 0;
      for (int t = L.G - 1; t >= 1; --t) {
        if (pairs(L.back(origin, L.G - t), t)) {
          last = t;
          break;
        }
      }
      hops[size_t(origin)] = last;
    }
  }
  if (recent.size() == 4) recent.pop_back();
  recent.push_front({std::move(key), std::move(hops)});
  return recent.front().hops;
}

// The segments of the teams of C ranks of s's configuration (team_segments), each team listed when
// first asked for and kept with its configuration's (the latest few per thread): every rank's
// schedule asks for the teams whose blocks it holds at each step.
// Teams of at least this many blocks keep the summed pairs of their steps' computes: below, summing
// them again costs less than keeping them.
constexpr int kTeamSumsKept = 8;

class TeamSegments {
 public:
  static std::shared_ptr<TeamSegments> of(const Schedule& s, int C) {
    thread_local std::deque<std::shared_ptr<TeamSegments>> recent;  // newest first
    HopsKey key = hops_key(s, -2 - C);
    for (const auto& e : recent)
      if (e->key_ == key) return e;
    if (recent.size() == 4) recent.pop_back();
    recent.push_front(std::make_shared<TeamSegments>(std::move(key), s.cfg, s.P, C));
    return recent.front();
  }
  TeamSegments(HopsKey key, const AttnConfig& cfg, int P, int C)
      : key_(std::move(key)), cfg_(cfg), P_(P), C_(C), teams_(size_t(P / C)) {}
  const std::vector<Segment>& team(int t) {
    auto& segs = teams_[size_t(t)];
    if (!segs) segs = team_segments(cfg_, P_, C_, t);
    return *segs;
  }
  // The summed pairs of team qt's queries against team kt's keys (sum_pairs) for s's summed
  // computes (s of this configuration): the C ranks of a team and the forward and the backward
  // ask for the same ones.
  const PairSums& sums(const Schedule& s, int qt, int kt) {
    const uint64_t key = uint64_t(uint32_t(qt)) << 32 | uint32_t(kt);
    const auto tiles = std::pair{s.summed->tile_q, s.summed->tile_k};
    if (tiles != tiles_) sums_.clear(), tiles_ = tiles;
    auto it = sums_.find(key);
    if (it == sums_.end())
      it = sums_.emplace(key, sum_pairs(s, team(qt), team(kt), tiles.first, tiles.second)).first;
    return it->second;
  }

 private:
  HopsKey key_;
  AttnConfig cfg_;
  int P_, C_;
  std::vector<std::optional<std::vector<Segment>>> teams_;
  std::pair<int, int> tiles_{-1, -1};  // of the sums kept
  std::unordered_map<uint64_t, PairSums> sums_;
};

// The ring steps built: G, or the first Schedule::ring_steps of them.
int steps_built(const Schedule& s, const RingGeometry& L) {
  return s.ring_steps > 0 ? std::min(s.ring_steps, L.G) : L.G;
}

// Per ring step, the hops of the block that rank r holds then: r holds it when step <= hops, and
// passes it on when step < hops.
// A cut ring (Schedule::ring_steps) has its steps alone: hops up to its last step.
std::vector<int> hops_per_step(const Schedule& s, const RingGeometry& L, int r, Travel travel) {
  const int steps = steps_built(s, L);
  std::vector<int> hops(static_cast<size_t>(steps));
  const std::vector<int>& all = origin_hops(s, L, travel);  // used before the next call
  for (int step = 0; step < steps; ++step)
    hops[size_t(step)] = std::min(all[size_t(L.back(r, step))], steps - 1);
  return hops;
}

// Ring, zigzag ring, WallFacer-C (ring = WallFacer-1) and their Ulysses hybrids. The team buffers
// (C blocks, block a of member a's rows) come from an all-gather in the team (WallFacer) or from
// Ulysses' all-to-all in the team, which trades the members' rows for heads: member a then holds
// the team's rows of heads slice a (H/u heads, Hkv/u kv heads) and the ring runs on those. Ulysses
// x WallFacer-C does both: the all-to-all gives ring rank j its u blocks of heads slice m, and
// WallFacer's all-gather in the InnerTeam group their C*u blocks of the WallFacer team.
// The steps, in order: the forward's team gather and placement, its ring, the return of O; the
// backward's team gather and placement, its ring, the return of the gradients.
class TeamRing {
 public:
  TeamRing(Schedule& s, Builder& b)
      : s_(s),
        b_(b),
        c_(s.cfg),
        r_(s.rank),
        L_(s.cfg, s.P),
        C_(L_.C),
        u_(L_.u),
        wc_(L_.inner.C),
        hybrid_(L_.hybrid()),
        wgroup_(hybrid_ ? Group::InnerTeam : Group::Team),
        G_(L_.G),
        H_(c_.heads / u_),
        K_(c_.kv_heads / u_),
        w_(c_.dtype),
        place_dst_(L_.placement_dst(r_)),
        place_src_(L_.placement_src(r_)),
        placed_(place_dst_ != r_),
        keep_(c_.keep_kv && wc_ > 1),
        teams_(TeamSegments::of(s, C_)),
        my_team_(teams_->team(r_ / C_)),
        resident_(teams_->team(L_.kv_team(r_, 0))) {}

  void build() {
    b_.phase(&s_.fwd);
    forward_gather();
    forward_ring();
    forward_output();
    b_.phase(&s_.bwd);
    backward_gather();
    backward_ring();
    gradient_return();
  }

 private:
  // Ulysses' all-to-all in the team: `src` (u blocks, block j for member j) -> a new buffer.
  int trade(int src, const std::string& name) {
    const BufferSpec spec = s_.buffers[size_t(src)];
    const int dst = b_.buffer(name, spec.fmt, u_, spec.heads, spec.dtype);
    b_.collective(CollKind::AllToAll, Group::Team, u_, src, dst);
    return dst;
  }

  // WallFacer's all-gather in its team (wc_ > 1): `src` (this ring rank's blocks) -> a new team
  // buffer of C_ blocks.
  int gather(int src, const std::string& name, bool kept = false) {
    const BufferSpec spec = s_.buffers[size_t(src)];
    const int dst = b_.buffer(name, spec.fmt, C_, spec.heads, spec.dtype, kept);
    b_.collective(CollKind::AllGather, wgroup_, wc_, src, dst);
    return dst;
  }

  const std::vector<Segment>& team(int t) const { return teams_->team(t); }
  // The summed pairs of a step's computes, kept per configuration where a team holds many blocks
  // (kTeamSumsKept; nullptr: summed by the builder, or computes listed one by one).
  const PairSums* sums(int qt, int kt) const {
    return s_.summed && C_ >= kTeamSumsKept ? &teams_->sums(s_, qt, kt) : nullptr;
  }

  // Forward: K,V packed and gathered in the team (or traded), the ring buffers, the placement hop
  // and the team's queries.
  void forward_gather() {
    const int C = C_, K = K_, H = H_;
    const Dtype w = w_;
    // kvl_: this ring rank's K,V rows (a hybrid's traded from the u members, its heads slice).
    if (hybrid_) {
      kvs_ = b_.buffer("kv_shards", Fmt::KV, u_, K, w);
      b_.local(LocalKind::PackKV, -1, kvs_, -1, u_);
      kvl_ = trade(kvs_, wc_ > 1 ? "kv_local" : "kv_team");
    } else {
      kvl_ = b_.buffer("kv_local", Fmt::KV, 1, K, w);
      b_.local(LocalKind::PackKV, -1, kvl_);
    }
    kvt_ =
        wc_ > 1 ? gather(kvl_, keep_ && !placed_ ? "kv_kept" : "kv_team", keep_ && !placed_) : kvl_;
    // The K,V blocks that circulate, and the placed one: the block of forward step 0 and the
    // backward's resident K,V (or, when K,V travel, the block of its step 0). Without keep_kv it
    // lives in kv_ring0, which the ring first writes at step 1, when step 0 is done with it (and
    // which a backward that moves the query packages leaves alone).
    ring0_ = G_ > 1 ? b_.buffer("kv_ring0", Fmt::KV, C, K, w) : -1;
    ring1_ = G_ > 1 ? b_.buffer("kv_ring1", Fmt::KV, C, K, w) : -1;
    if (placed_)
      kv_placed_ = keep_    ? b_.buffer("kv_kept", Fmt::KV, C, K, w, true)
                   : G_ > 1 ? b_.alias("kv_placed", ring0_)
                            : b_.buffer("kv_placed", Fmt::KV, C, K, w);
    kv_first_ = kvt_;
    int ps = -1, pr = -1;
    if (placed_) {
      kv_first_ = kv_placed_;
      ps = b_.send(kvt_, place_dst_, kTagPlace);
      pr = b_.recv(kv_first_, place_src_, kTagPlace);
      b_.next_round();
    }
    if (hybrid_) {
      const int qs = b_.buffer("q_shards", Fmt::Rows, u_, H, w);
      b_.local(LocalKind::Shard, kInQ, qs, -1, u_);
      qt_ = trade(qs, wc_ > 1 ? "q_local" : "q_team");
    }
    if (wc_ > 1) qt_ = gather(qt_, "q_team");
    b_.wait({ps, pr});
  }

  // Forward ring: G steps, each computing the team's queries against the K,V block it holds while
  // the block goes on, only while a later rank of the sub-ring has a query that sees it.
  void forward_ring() {
    const int C = C_, G = steps_built(s_, L_), r = r_;
    // The kernels accumulate O in fp32: the caller's o when it is fp32 and no team merges.
    if (C > 1 || w_ != kAcc) oacc_ = b_.buffer("o_team", Fmt::Rows, C, H_, kAcc);
    if (C > 1) lacc_ = b_.buffer("lse_team", Fmt::Stat, C, H_, kAcc);
    b_.local(LocalKind::InitOut, -1, oacc_, lacc_);
    const std::vector<int> hops = hops_per_step(s_, L_, r, Travel::KV);
    for (int step = 0; step < G; ++step) {
      const int cur = step == 0 ? kv_first_ : (step % 2 ? ring1_ : ring0_);
      int sa = -1, ra = -1;
      if (step < G - 1) {
        if (step < hops[size_t(step)]) sa = b_.send(cur, L_.next(r), kTagKV);
        if (step < hops[size_t(step) + 1])
          ra = b_.recv(step % 2 ? ring0_ : ring1_, L_.prev(r), kTagKV);
      }
      const int kt = L_.kv_team(r, step);
      b_.computes(false, qt_, cur, oacc_, lacc_, my_team_, team(kt), H_, K_, sums(r / C, kt));
      if (step < G - 1) {
        b_.wait({sa, ra});
        b_.next_round();
      }
    }
  }

  // O and LSE back to the rows' owners: reduce-scattered with the LSE combine in the team
  // (WallFacer), then traded back and merged (hybrid).
  void forward_output() {
    // The partial O travel as the tensors do (rounded to bf16 once); LSE stays fp32.
    int o = oacc_, lse = lacc_;
    if (wc_ > 1) {
      const int owire = b_.as_dtype(oacc_, "o_team_wire", w_);
      o = hybrid_ ? b_.buffer("o_heads", Fmt::Rows, u_, H_, w_) : kOutO;
      lse = hybrid_ ? b_.buffer("lse_heads", Fmt::Stat, u_, H_, kAcc) : kOutLse;
      b_.collective(CollKind::ReduceScatterLse, wgroup_, wc_, owire, o, lacc_, lse);
    }
    if (hybrid_) {
      const int os = trade(wc_ > 1 ? o : b_.as_dtype(oacc_, "o_team_wire", w_), "o_shards");
      const int ls = trade(lse, "lse_shards");
      b_.local(LocalKind::Merge, os, kOutO, -1, u_);
      b_.local(LocalKind::Merge, ls, kOutLse, -1, u_);
    } else if (o != kOutO) {
      b_.local(LocalKind::Copy, o, kOutO);
    }
  }

  // Backward: K,V packed, gathered and placed again (unless kept from the forward), the query
  // packages packed and gathered in the team (or traded).
  void backward_gather() {
    const int H = H_;
    const Dtype w = w_;
    kv_resident_ = placed_ ? kv_placed_ : kvt_;  // with keep_kv: the forward's kv_kept
    int ps = -1, pr = -1;
    if (!keep_) {  // else kept from the forward
      if (hybrid_) {
        b_.local(LocalKind::PackKV, -1, kvs_, -1, u_);
        b_.collective(CollKind::AllToAll, Group::Team, u_, kvs_, kvl_);
      } else {
        b_.local(LocalKind::PackKV, -1, kvl_);
      }
      if (wc_ > 1) b_.collective(CollKind::AllGather, wgroup_, wc_, kvl_, kvt_);
    }
    if (placed_ && !keep_) {
      ps = b_.send(kvt_, place_dst_, kTagPlace);
      pr = b_.recv(kv_placed_, place_src_, kTagPlace);
      b_.next_round();
    }
    if (hybrid_) {
      const int qps = b_.buffer("qpack_shards", Fmt::QPack, u_, H, w);
      b_.local(LocalKind::PackQPack, -1, qps, -1, u_);
      qpt_ = trade(qps, wc_ > 1 ? "qpack_local" : "qpack_team");
    } else {
      qpt_ = b_.buffer("qpack_local", Fmt::QPack, 1, H, w);
      b_.local(LocalKind::PackQPack, -1, qpt_);
    }
    if (wc_ > 1) qpt_ = gather(qpt_, "qpack_team");
    b_.wait({ps, pr});
  }

  // Backward ring. One side stays resident, the other travels the sub-ring with its gradient
  // accumulator: query packages (q, dout, lse, delta; dQ travels) while K,V stay, or K,V blocks
  // (dK,dV travel) while the team's queries stay, whichever moves fewer bytes
  // (backward_moves_kv). Gradients travel and are summed in fp32 (docs/numerics.md).
  void backward_ring() {
    const int C = C_, G = steps_built(s_, L_), r = r_, H = H_, K = K_;
    const bool move_kv = s_.bwd_moves_kv;
    // Accumulators: dQ of the team block and dK,dV of the placed K,V block. The resident side's
    // accumulator stays; the travelling side's ends in `home`.
    dq_team_ = C > 1 || w_ != kAcc ? b_.buffer("dq_team", Fmt::Rows, C, H, kAcc) : kOutDq;
    dkv_team_ = b_.buffer("dkv_acc", Fmt::KV, C, K, kAcc);
    const int res_acc = move_kv ? dq_team_ : dkv_team_;
    const int home = move_kv ? dkv_team_ : dq_team_;
    const Fmt tfmt = move_kv ? Fmt::KV : Fmt::QPack, afmt = move_kv ? Fmt::KV : Fmt::Rows;
    const int theads = move_kv ? K : H;
    const int first = move_kv ? kv_resident_ : qpt_;
    const int tag_t = move_kv ? kTagKV : kTagQPack;
    b_.local(LocalKind::Zero, -1, res_acc);
    int ring[2] = {-1, -1}, slot[2] = {home, -1}, acc_in = -1;
    if (G_ > 1) {
      ring[0] = move_kv ? ring0_ : b_.buffer("qpack_ring0", tfmt, C, theads, w_);
      ring[1] = move_kv ? ring1_ : b_.buffer("qpack_ring1", tfmt, C, theads, w_);
      slot[0] = b_.buffer("grad_part0", afmt, C, theads, kAcc);
      slot[1] = b_.buffer("grad_part1", afmt, C, theads, kAcc);
      acc_in = b_.buffer("grad_in", afmt, C, theads, kAcc);
    }
    int acc_send[2] = {-1, -1};
    // The travelling block goes on only while a later rank has pairs with it (as in the
    // forward); its gradient accumulator follows it one hop behind and goes from the last rank
    // that holds it straight home (from rank prev(r) after the last step, as a ring hop, when the
    // block makes every hop; none when it stays home: it is computed in `home`). Ranks after that
    // last one neither receive nor send the block or its accumulator.
    const std::vector<int> hops = hops_per_step(s_, L_, r, move_kv ? Travel::KV : Travel::Queries);
    const int own_hops = hops[0];
    int home_in = -1;
    if (own_hops > 0 && own_hops < G - 1) {
      int last = r;
      for (int i = 0; i < own_hops; ++i) last = L_.next(last);
      home_in = b_.recv(home, last, kTagHome);
    }
    for (int step = 0; step < G; ++step) {
      const int cur = step == 0 ? first : ring[step % 2];
      const int at = hops[size_t(step)];  // hops of the block this rank holds now
      int ta = -1, tb = -1, ain = -1;
      if (step < G - 1) {
        if (step < at) ta = b_.send(cur, L_.next(r), tag_t);
        if (step < hops[size_t(step) + 1]) tb = b_.recv(ring[(step + 1) % 2], L_.prev(r), tag_t);
      }
      if (step <= at) {  // this rank holds the block
        if (step > 0) ain = b_.recv(acc_in, L_.prev(r), kTagGrad);
        const bool stays = at == 0;  // the rank's own block, needed nowhere else
        const int acc = stays ? home : slot[step % 2];
        b_.wait({acc_send[step % 2]});
        acc_send[step % 2] = -1;
        b_.local(LocalKind::Zero, -1, acc);
        if (move_kv) {
          const int kt = L_.kv_team(r, step);
          b_.computes(true, qpt_, cur, res_acc, acc, my_team_, team(kt), H, K, sums(r / C, kt));
        } else {
          const int qt = L_.query_team(r, step);
          b_.computes(true, cur, kv_resident_, acc, res_acc, team(qt), resident_, H, K,
                      sums(qt, L_.kv_team(r, 0)));
        }
        if (step > 0) {
          b_.wait({ain});
          b_.local(LocalKind::Add, acc_in, acc);
        }
        if (stays) {
          // computed in place
        } else if (step < at || step == G - 1) {
          acc_send[step % 2] = b_.send(acc, L_.next(r), kTagGrad);
        } else {
          acc_send[step % 2] = b_.send(acc, L_.back(r, step), kTagHome);
        }
      }
      b_.wait({ta, tb});
      b_.next_round();
    }
    if (G > 1) {
      // The last ring hop brings the gradient of the block prev(r) holds at the last step, when
      // that block makes every hop: in the whole ring this rank's own (own_hops == G - 1).
      const Travel travel = move_kv ? Travel::KV : Travel::Queries;
      const bool last_in = hops_per_step(s_, L_, L_.prev(r), travel)[size_t(G - 1)] == G - 1;
      const int h = last_in ? b_.recv(home, L_.prev(r), kTagGrad) : -1;
      b_.wait({h, home_in, acc_send[0], acc_send[1]});
    }
  }

  // dQ and dK,dV back to the rows' owners: dK,dV along the inverse placement while dQ is
  // reduce-scattered in the team, then dK,dV reduce-scattered (WallFacer); traded back and merged
  // in fp32, rounded once by the merge (hybrid).
  void gradient_return() {
    const int C = C_;
    int dkvt = dkv_team_, rs = -1, rr = -1;
    if (placed_) {
      dkvt = b_.buffer("dkv_team", Fmt::KV, C, K_, kAcc);
      rs = b_.send(dkv_team_, place_src_, kTagReturn);
      rr = b_.recv(dkvt, place_dst_, kTagReturn);
    }
    int dq = dq_team_;
    if (wc_ > 1) {
      dq = hybrid_      ? b_.buffer("dq_heads", Fmt::Rows, u_, H_, kAcc)
           : w_ != kAcc ? b_.buffer("dq_local", Fmt::Rows, 1, H_, kAcc)
                        : kOutDq;
      b_.collective(CollKind::ReduceScatterSum, wgroup_, wc_, dq_team_, dq);
    }
    if (hybrid_)
      b_.local(LocalKind::Merge, trade(dq, "dq_shards"), kOutDq, -1, u_);
    else if (dq != kOutDq)
      b_.local(LocalKind::Copy, dq, kOutDq);
    b_.wait({rs, rr});
    int dkvl = dkvt;
    if (wc_ > 1) {
      dkvl = b_.buffer(hybrid_ ? "dkv_heads" : "dkv_local", Fmt::KV, u_, K_, kAcc);
      b_.collective(CollKind::ReduceScatterSum, wgroup_, wc_, dkvt, dkvl);
    }
    if (hybrid_)
      b_.local(LocalKind::UnpackKV, trade(dkvl, "dkv_shards"), -1, -1, u_);
    else
      b_.local(LocalKind::UnpackKV, dkvl, -1);
  }

  // The accumulators (and the gradients that travel) are fp32; w_: the tensors and their messages.
  static constexpr Dtype kAcc = Dtype::fp32;

  Schedule& s_;
  Builder& b_;
  const AttnConfig& c_;
  const int r_;
  const RingGeometry L_;
  // C_: blocks of a team buffer (world ranks of a team), u_: Ulysses degree, wc_: WallFacer's C.
  const int C_, u_, wc_;
  const bool hybrid_;
  const Group wgroup_;   // the group of WallFacer's team collectives
  const int G_, H_, K_;  // H_, K_: the heads the ring computes (a hybrid's slice)
  const Dtype w_;
  const int place_dst_, place_src_;
  const bool placed_;
  // keep_kv: the K,V block this rank computes with at the first ring step (received by the
  // placement, or its own team's) stays from the forward to the backward.
  const bool keep_;
  const std::shared_ptr<TeamSegments> teams_;  // the configuration's teams, listed once
  const std::vector<Segment> my_team_, resident_;
  // Buffers: K,V (local, shards, team, ring, placed, of forward step 0, of the backward's
  // resident side), the team's queries and query packages, O and LSE, dQ and dK,dV accumulators.
  int kvl_ = -1, kvs_ = -1, kvt_ = -1, ring0_ = -1, ring1_ = -1, kv_placed_ = -1, kv_first_ = -1;
  int kv_resident_ = -1, qt_ = kInQ, qpt_ = -1, oacc_ = kOutO, lacc_ = kOutLse;
  int dq_team_ = -1, dkv_team_ = -1;
};

// Double ring (DoubleRingGeometry): the forward keeps the rank's rows and moves K,V blocks: each
// phase's outer block over the outer ring (posted at the phase's first step, it has the whole phase
// to arrive) and copies of it over the inner ring. Every hop is made (a mask skips none). The
// backward moves, the same way, whichever side moves fewer bytes (backward_moves_kv): K,V blocks
// against the resident query package (their dK,dV accumulators travel, dQ stays), or query
// packages (q, dout, lse, delta) against the resident K,V (their dQ accumulators travel, dK,dV
// stay). Within a phase the travelling block's accumulator follows its visits over the inner ring
// (from its holder at step s-1 to its holder at step s), and at the phase's last step the group's
// partial goes home, where the home rank adds the G partials in phase order. No accumulator
// crosses groups on the way: the outer hops carry only blocks, and a partial's trip home has two
// phases to arrive (the home posts its receive at the phase's start and waits for it two phases
// later), so no step waits on a hop between nodes. Every step computes into a fresh partial and
// then adds the accumulator received, so that an inner hop overlaps the next step's compute.
class DoubleRing {
 public:
  DoubleRing(Schedule& s, Builder& b)
      : s_(s), b_(b), L_(s.P, s.cfg.inner), r_(s.rank), mine_(team_segments(s.cfg, s.P, 1, r_)) {}

  void build() {
    const int H = s_.cfg.heads, K = s_.cfg.kv_heads;
    const Dtype w = s_.cfg.dtype;
    const Transport kv = transport("kv", Fmt::KV, K, kTagKV);

    b_.phase(&s_.fwd);
    b_.local(LocalKind::PackKV, -1, kv.local);
    const int oacc = w != kAcc ? b_.buffer("o_acc", Fmt::Rows, 1, H, kAcc) : kOutO;
    b_.local(LocalKind::InitOut, -1, oacc, kOutLse);
    steps(kv, [&](int step, int cur) {
      b_.computes(false, kInQ, cur, oacc, kOutLse, mine_, block(L_.origin(r_, step)), H, K);
    });
    if (oacc != kOutO) b_.local(LocalKind::Copy, oacc, kOutO);

    b_.phase(&s_.bwd);
    const bool move_kv = s_.bwd_moves_kv;
    b_.local(LocalKind::PackKV, -1, kv.local);
    const Transport qp = move_kv ? Transport{b_.buffer("qpack_local", Fmt::QPack, 1, H, w)}
                                 : transport("qpack", Fmt::QPack, H, kTagQPack);
    b_.local(LocalKind::PackQPack, -1, qp.local);
    const int dq = w != kAcc ? b_.buffer("dq_acc", Fmt::Rows, 1, H, kAcc) : kOutDq;
    const int dkv = b_.buffer("dkv_acc", Fmt::KV, 1, K, kAcc);
    b_.local(LocalKind::Zero, -1, dq);
    b_.local(LocalKind::Zero, -1, dkv);
    // The travelling side's accumulator (ends in `home`) and its format.
    const int home = move_kv ? dkv : dq;
    const Fmt afmt = move_kv ? Fmt::KV : Fmt::Rows;
    const int aheads = move_kv ? K : H;
    const int P = s_.P, W = L_.W, G = L_.G;
    // part: the partials of a phase's first W-1 steps (sent on over the inner ring); out: those of
    // its last step (sent home); in: the partials of this rank's block arriving home.
    int part[2] = {home, home}, out[2] = {home, home}, in[2] = {-1, -1}, acc_in = -1;
    int part_send[2] = {-1, -1}, out_send[2] = {-1, -1}, in_recv[2] = {-1, -1};
    if (P > 1) {
      for (int x = 0; x < 2; ++x) {
        part[x] = b_.buffer(fmt::format("grad_part{}", x), afmt, 1, aheads, kAcc);
        out[x] = b_.buffer(fmt::format("grad_out{}", x), afmt, 1, aheads, kAcc);
        in[x] = b_.buffer(fmt::format("grad_home{}", x), afmt, 1, aheads, kAcc);
      }
      if (W > 1) acc_in = b_.buffer("grad_in", afmt, 1, aheads, kAcc);
    }
    // The partial of phase o of this rank's own block: received into in[o % 2] (added at the
    // start of phase o + 2, or at the end), or computed here (W = 1, phase 0: added at once).
    auto arrive = [&](int o) {
      if (in_recv[o % 2] < 0) return;
      b_.wait({in_recv[o % 2]});
      in_recv[o % 2] = -1;
      b_.local(LocalKind::Add, in[o % 2], home);
    };
    steps(move_kv ? kv : qp, [&](int step, int cur) {
      const int b = L_.origin(r_, step), o = step / W, j = step % W;
      const bool last = j == W - 1;
      if (j == 0 && P > 1) {
        if (o >= 2) arrive(o - 2);
        const int from = L_.holder(r_, o * W + W - 1);
        if (from != r_) in_recv[o % 2] = b_.recv(in[o % 2], from, kTagHome);
      }
      const int ain = j > 0 ? b_.recv(acc_in, L_.holder(b, step - 1), kTagGrad) : -1;
      int* pending = last ? &out_send[o % 2] : &part_send[step % 2];
      b_.wait({*pending});
      *pending = -1;
      const int acc = last ? out[o % 2] : part[step % 2];
      b_.local(LocalKind::Zero, -1, acc);
      if (move_kv)
        b_.computes(true, qp.local, cur, dq, acc, mine_, block(b), H, K);
      else
        b_.computes(true, cur, kv.local, acc, dkv, block(b), mine_, H, K);
      if (j > 0) {
        b_.wait({ain});
        b_.local(LocalKind::Add, acc_in, acc);
      }
      if (!last) {
        *pending = b_.send(acc, L_.holder(b, step + 1), kTagGrad);
      } else if (b != r_) {
        *pending = b_.send(acc, b, kTagHome);
      } else if (acc != home) {
        b_.local(LocalKind::Add, acc, home);  // W = 1, phase 0: this rank's own block
      }
    });
    for (int o = std::max(G - 2, 0); o < G; ++o) arrive(o);
    b_.wait({part_send[0], part_send[1], out_send[0], out_send[1]});
    if (dq != kOutDq) b_.local(LocalKind::Copy, dq, kOutDq);
    b_.local(LocalKind::UnpackKV, dkv, -1);
  }

 private:
  // A travelling block's buffers: the rank's own (`local`), the outer ring's two and the inner
  // ring's two (none where that ring has one rank), and the tag of its inner hops.
  struct Transport {
    int local = -1;
    int outer[2] = {-1, -1}, ring[2] = {-1, -1};
    int tag = kTagKV;
  };
  Transport transport(std::string_view name, Fmt f, int heads, int tag) {
    const Dtype w = s_.cfg.dtype;
    Transport t{b_.buffer(fmt::format("{}_local", name), f, 1, heads, w)};
    t.tag = tag;
    for (int x = 0; x < 2; ++x) {
      if (L_.G > 1) t.outer[x] = b_.buffer(fmt::format("{}_outer{}", name, x), f, 1, heads, w);
      if (L_.W > 1) t.ring[x] = b_.buffer(fmt::format("{}_ring{}", name, x), f, 1, heads, w);
    }
    return t;
  }

  std::vector<Segment> block(int b) const { return team_segments(s_.cfg, s_.P, 1, b); }

  // The transport of t's blocks through a forward or backward: for every step, at_step(step, the
  // buffer of the block held) between posting the step's hops and waiting for them. The outer
  // block of phase o is the rank's own (o = 0) or outer[o % 2]; the inner steps j >= 1 use
  // ring[j % 2].
  template <class F>
  void steps(const Transport& t, F&& at_step) {
    const int W = L_.W, G = L_.G;
    auto outer = [&](int o) { return o == 0 ? t.local : t.outer[o % 2]; };
    int os = -1, orv = -1;
    for (int o = 0; o < G; ++o) {
      for (int j = 0; j < W; ++j) {
        const int cur = j == 0 ? outer(o) : t.ring[j % 2];
        if (j == 0 && o < G - 1) {
          os = b_.send(cur, L_.outer_next(r_), kTagOuter);
          orv = b_.recv(outer(o + 1), L_.outer_prev(r_), kTagOuter);
        }
        int is = -1, ir = -1;
        if (j < W - 1) {
          is = b_.send(cur, L_.inner_next(r_), t.tag);
          ir = b_.recv(t.ring[(j + 1) % 2], L_.inner_prev(r_), t.tag);
        }
        at_step(o * W + j, cur);
        b_.wait({is, ir});
        if (j == W - 1) {
          b_.wait({os, orv});
          os = orv = -1;
        }
        b_.next_round();
      }
    }
  }

  static constexpr Dtype kAcc = Dtype::fp32;  // the accumulators and the gradients that travel

  Schedule& s_;
  Builder& b_;
  const DoubleRingGeometry L_;
  const int r_;
  const std::vector<Segment> mine_;
};

// Ulysses: all-to-all from sequence shards to head shards, full attention on H/P heads, back.
void build_ulysses(Schedule& s, Builder& b) {
  const auto& c = s.cfg;
  const int P = s.P;
  const int h = c.heads / P, k = c.kv_heads / P;
  const Dtype w = c.dtype, f = Dtype::fp32;
  std::vector<Segment> segs;
  for (int i = 0; i < P; ++i)
    for (const auto& run : local_runs(c, P, i)) segs.push_back({i, run.row0, run.rows, run.pos0});
  auto a2a = [&](int src, const std::string& name, Fmt fmt, int heads) {
    if (P == 1) return src;
    const int dst = b.buffer(name, fmt, P, heads, b.dtype(src));
    b.collective(CollKind::AllToAll, Group::World, P, src, dst);
    return dst;
  };

  b.phase(&s.fwd);
  const int kvs = b.buffer("kv_shards", Fmt::KV, P, k, w);
  b.local(LocalKind::PackKV, -1, kvs, -1, P);
  const int kvh = a2a(kvs, "kv_heads", Fmt::KV, k);
  const int qs = b.buffer("q_shards", Fmt::Rows, P, h, w);
  b.local(LocalKind::Shard, kInQ, qs, -1, P);
  const int qh = a2a(qs, "q_heads", Fmt::Rows, h);
  const int oh = b.buffer("o_heads", Fmt::Rows, P, h, f);
  const int lh = b.buffer("lse_heads", Fmt::Stat, P, h, f);
  b.local(LocalKind::InitOut, -1, oh, lh);
  b.computes(false, qh, kvh, oh, lh, segs, segs, h, k);
  // O travels as the tensors do (rounded to bf16 once); LSE stays fp32.
  const int os = a2a(P > 1 ? b.as_dtype(oh, "o_heads_wire", w) : oh, "o_shards", Fmt::Rows, h);
  const int ls = a2a(lh, "lse_shards", Fmt::Stat, h);
  b.local(LocalKind::Merge, os, kOutO, -1, P);
  b.local(LocalKind::Merge, ls, kOutLse, -1, P);

  b.phase(&s.bwd);
  b.local(LocalKind::PackKV, -1, kvs, -1, P);
  if (P > 1) b.collective(CollKind::AllToAll, Group::World, P, kvs, kvh);
  const int qps = b.buffer("qpack_shards", Fmt::QPack, P, h, w);
  b.local(LocalKind::PackQPack, -1, qps, -1, P);
  const int qph = a2a(qps, "qpack_heads", Fmt::QPack, h);
  const int dqh = b.buffer("dq_heads", Fmt::Rows, P, h, f);
  const int dkvh = b.buffer("dkv_heads", Fmt::KV, P, k, f);
  b.local(LocalKind::Zero, -1, dqh);
  b.local(LocalKind::Zero, -1, dkvh);
  b.computes(true, qph, kvh, dqh, dkvh, segs, segs, h, k);
  const int dqs = a2a(dqh, "dq_shards", Fmt::Rows, h);
  const int dkvs = a2a(dkvh, "dkv_shards", Fmt::KV, k);
  b.local(LocalKind::Merge, dqs, kOutDq, -1, P);
  b.local(LocalKind::UnpackKV, dkvs, -1, -1, P);
}

}  // namespace

void build_team_ring_schedule(Schedule& s) {
  Builder b(s);
  TeamRing(s, b).build();
}

void build_ulysses_schedule(Schedule& s) {
  Builder b(s);
  build_ulysses(s, b);
}

void build_double_ring_schedule(Schedule& s) {
  Builder b(s);
  DoubleRing(s, b).build();
}

int64_t block_bytes(const BufferSpec& spec, int batch, int head_dim) {
  const int64_t rows = int64_t(batch) * spec.rows * spec.heads, e = dtype_bytes(spec.dtype);
  switch (spec.fmt) {
    case Fmt::Rows:
      return rows * head_dim * e;
    case Fmt::KV:
      return rows * 2 * head_dim * e;
    case Fmt::Stat:
      return rows * 4;
    case Fmt::QPack:
      return rows * (2 * int64_t(head_dim) * e + 2 * 4);
  }
  return 0;
}

int64_t block_elements(const BufferSpec& spec, int batch, int head_dim) {
  const int64_t rows = int64_t(batch) * spec.rows * spec.heads;
  switch (spec.fmt) {
    case Fmt::Rows:
      return rows * head_dim;
    case Fmt::KV:
      return rows * 2 * head_dim;
    case Fmt::Stat:
      return rows;
    case Fmt::QPack:
      return rows * (2 * int64_t(head_dim) + 2);
  }
  return 0;
}

WallFacerGeometry::WallFacerGeometry(int P_, int C_) : P(P_), C(C_), G(P_ / (C_ * C_)), T(P_ / C_) {
  WF_CHECK(C >= 1 && P % (C * C) == 0, "team size {} needs C^2 dividing P = {}", C, P);
}

int WallFacerGeometry::placement_dst(int r) const {
  const int t = r / C, a = r % C;
  return (a * G + t / C) * C + t % C;
}

int WallFacerGeometry::placement_src(int r) const {
  const int tau = r / C, m = r % C;
  const int t = (tau % G) * C + m, a = tau / G;
  return t * C + a;
}

int WallFacerGeometry::next(int r) const {
  const int tau = r / C, m = r % C;
  return (((tau % G) + 1) % G + G * (tau / G)) * C + m;
}

int WallFacerGeometry::prev(int r) const {
  const int tau = r / C, m = r % C;
  return (((tau % G) + G - 1) % G + G * (tau / G)) * C + m;
}

int WallFacerGeometry::kv_team(int r, int step) const {
  const int tau = r / C, m = r % C;
  return (((tau % G) - step % G + G) % G) * C + m;
}

int WallFacerGeometry::query_team(int r, int step) const {
  const int tau = r / C;
  return G * (tau / G) + ((tau % G) - step % G + G) % G;
}

DoubleRingGeometry::DoubleRingGeometry(int P_, int W_) : P(P_), W(W_), G(P_ / std::max(W_, 1)) {
  WF_CHECK(W >= 1 && P % W == 0, "inner ring length {} needs W dividing P = {}", W, P);
}

int DoubleRingGeometry::inner_next(int r) const { return r / W * W + (r % W + 1) % W; }
int DoubleRingGeometry::inner_prev(int r) const { return r / W * W + (r % W + W - 1) % W; }
int DoubleRingGeometry::outer_next(int r) const { return (r / W + 1) % G * W + r % W; }
int DoubleRingGeometry::outer_prev(int r) const { return (r / W + G - 1) % G * W + r % W; }

int DoubleRingGeometry::origin(int r, int step) const {
  const int o = step / W, j = step % W;
  return (r / W - o % G + G) % G * W + (r % W - j + W) % W;
}

int DoubleRingGeometry::holder(int b, int step) const {
  const int o = step / W, j = step % W;
  return (b / W + o) % G * W + (b % W + j) % W;
}

int64_t attention_pairs(int64_t qpos0, int64_t qrows, int64_t kpos0, int64_t krows, bool causal) {
  if (!causal) return qrows * krows;
  // Row at position p keeps clamp(p - kpos0 + 1, 0, krows) keys.
  const int64_t a = qpos0, e = qpos0 + qrows, lo = kpos0, hi = kpos0 + krows - 1;
  int64_t total = 0;
  const int64_t x0 = std::max(a, lo), x1 = std::min(e, hi);
  if (x1 > x0) {
    const int64_t v0 = x0 - kpos0 + 1, v1 = x1 - kpos0;
    total += (v0 + v1) * (x1 - x0) / 2;
  }
  const int64_t x2 = std::max(a, hi);
  if (e > x2) total += (e - x2) * krows;
  return total;
}

int64_t attention_tile_pairs(int64_t qpos0, int64_t qrows, int64_t kpos0, int64_t krows,
                             bool causal, int tile_q, int tile_k) {
  if (tile_q <= 0 || tile_k <= 0) return attention_pairs(qpos0, qrows, kpos0, krows, causal);
  if (!causal) return qrows * krows;
  int64_t total = 0;
  for (int64_t i0 = 0; i0 < qrows; i0 += tile_q) {
    const int64_t nq = std::min<int64_t>(tile_q, qrows - i0);
    const int64_t last = qpos0 + i0 + nq - 1;  // the tile's last query position
    if (last < kpos0) continue;
    // Key tiles starting at or before `last` are computed.
    const int64_t tiles = std::min((last - kpos0) / tile_k + 1, (krows + tile_k - 1) / tile_k);
    const int64_t keys = std::min(tiles * tile_k, krows);
    total += nq * keys;
  }
  return total;
}

int64_t attention_tile_pairs(const kernels::DocBounds& docs, int64_t qpos0, int64_t qrows,
                             int64_t kpos0, int64_t krows, bool causal, int tile_q, int tile_k,
                             int64_t window) {
  if (!causal) window = 0;
  if (tile_q <= 0 || tile_k <= 0) {
    if (docs.starts.empty())
      return kernels::kept_pairs({qpos0, qpos0 + qrows}, {kpos0, kpos0 + krows}, causal, window);
    return kernels::kept_pairs(docs, {qpos0, qpos0 + qrows}, {kpos0, kpos0 + krows}, causal,
                               window);
  }
  if (docs.starts.empty() && window == 0)
    return attention_tile_pairs(qpos0, qrows, kpos0, krows, causal, tile_q, tile_k);
  const bool with_docs = !docs.starts.empty();
  int64_t total = 0;
  for (int64_t i0 = 0; i0 < qrows; i0 += tile_q) {
    const int64_t nq = std::min<int64_t>(tile_q, qrows - i0);
    const int64_t qa = qpos0 + i0, qb = qa + nq - 1;  // first and last query position
    const int qd0 = with_docs ? docs.doc_at(qa) : 0, qd1 = with_docs ? docs.doc_at(qb) : 0;
    for (int64_t j0 = 0; j0 < krows; j0 += tile_k) {
      const int64_t nk = std::min<int64_t>(tile_k, krows - j0);
      const int64_t ka = kpos0 + j0, kb = ka + nk - 1;
      if (causal && qb < ka) continue;
      if (window > 0 && qa - kb >= window) continue;  // older than every query's window
      if (with_docs && (docs.doc_at(kb) < qd0 || docs.doc_at(ka) > qd1)) continue;
      total += nq * nk;
    }
  }
  return total;
}

int64_t kept_pairs(const Schedule& s, int64_t qpos0, int64_t qrows, int64_t kpos0, int64_t krows) {
  if (s.docs.starts.empty())
    return kernels::kept_pairs({qpos0, qpos0 + qrows}, {kpos0, kpos0 + krows}, s.cfg.causal,
                               s.cfg.window);
  return kernels::kept_pairs(s.docs, {qpos0, qpos0 + qrows}, {kpos0, kpos0 + krows}, s.cfg.causal,
                             s.cfg.window);
}

int64_t compute_tile_pairs(const Schedule& s, const Op& o, int tile_q, int tile_k) {
  if (s.summed) {
    WF_CHECK(s.summed->tile_q == tile_q && s.summed->tile_k == tile_k,
             "a schedule summed for tiles {}x{} timed with tiles {}x{}", s.summed->tile_q,
             s.summed->tile_k, tile_q, tile_k);
    return o.tile_pairs;
  }
  return segment_tile_pairs(s, o.qseg, o.kseg, o.masked, tile_q, tile_k);
}

namespace {

// The team size of cfg's schedule (Schedule::team_ranks).
int schedule_team_ranks(const AttnConfig& cfg) {
  return cfg.ulysses > 1 ? cfg.ulysses : team_size(cfg);
}

// backward_moves_kv, counted.
bool count_backward_moves_kv(const AttnConfig& cfg, int P) {
  // The choice ignores the documents: they change from call to call (set_documents) while the
  // buffers, which depend on the choice, stay.
  Schedule s;
  s.cfg = cfg;
  s.cfg.doc_lengths.clear();
  s.P = P;
  s.team_ranks = schedule_team_ranks(cfg);
  const RingGeometry L(s.cfg, P);
  const int64_t G = L.G, D = cfg.head_dim, H = cfg.heads, K = cfg.kv_heads;
  const int64_t e = dtype_bytes(cfg.dtype);
  if (G == 1) return false;  // no hops either way
  // Bytes per team row of one hop of the travelling block and of its gradient accumulator.
  const int64_t kv_hop = 2 * K * D * e, kv_grad = 2 * K * D * 4;
  const int64_t q_hop = H * (2 * D * e + 2 * 4), q_grad = H * D * 4;
  // Without a mask every hop is made: the closed forms. So too for the balanced layout without a
  // window: that layout is refined for the side the backward moves, so the choice cannot count
  // the hops the layout skips.
  if (!cfg.causal || (cfg.layout == Layout::Balanced && cfg.window == 0))
    return (G - 1) * kv_hop + G * kv_grad < (G - 1) * q_hop + G * q_grad;
  // A causal mask (with or without a window) may skip hops: rank x sends, at step t, the block it
  // holds on when t < h (the block's hops) and its gradient accumulator when t <= h and h > 0.
  // The side whose busiest rank sends fewer bytes travels (on a tie, the one with fewer bytes over
  // all ranks).
  const std::vector<int> hk = origin_hops(s, L, Travel::KV),
                         hq = origin_hops(s, L, Travel::Queries);
  int64_t kv_max = 0, q_max = 0, kv_sum = 0, q_sum = 0;
  for (int x = 0; x < P; ++x) {
    int64_t kv = 0, q = 0;
    for (int t = 0; t < G; ++t) {
      const int o = L.back(x, t);  // the block's origin
      const int a = hk[size_t(o)], b = hq[size_t(o)];
      kv += (t < a ? kv_hop : 0) + (t <= a && a > 0 ? kv_grad : 0);
      q += (t < b ? q_hop : 0) + (t <= b && b > 0 ? q_grad : 0);
    }
    kv_max = std::max(kv_max, kv);
    q_max = std::max(q_max, q);
    kv_sum += kv;
    q_sum += q;
  }
  return kv_max != q_max ? kv_max < q_max : kv_sum < q_sum;
}

}  // namespace

// Every rank's schedule asks: counted once per configuration (the latest few kept per thread).
bool backward_moves_kv(const AttnConfig& cfg, int P) {
  const BackwardTravel travel = traits(cfg.strategy).backward;
  if (travel == BackwardTravel::None) return false;
  validate(cfg, P);
  if (travel == BackwardTravel::EveryHop) {
    // Every hop is made (DoubleRing): P-1 hops of the block and P - [W = 1] of its accumulator,
    // per row, whatever the mask; a tie moves the query packages, as WallFacer's rule does.
    const int64_t e = dtype_bytes(cfg.dtype), H = cfg.heads, K = cfg.kv_heads, D = cfg.head_dim;
    const int64_t hops = P - 1, acc_hops = P - (cfg.inner == 1 ? 1 : 0);
    return P > 1 && hops * 2 * K * D * e + acc_hops * 2 * K * D * 4 <
                        hops * H * (2 * D * e + 2 * 4) + acc_hops * H * D * 4;
  }
  Schedule s;
  s.cfg = cfg;
  s.cfg.doc_lengths.clear();
  s.P = P;
  s.team_ranks = schedule_team_ranks(cfg);
  thread_local std::deque<std::pair<HopsKey, bool>> recent;  // newest first
  HopsKey key = hops_key(s, -1);
  for (const auto& [k, moves] : recent)
    if (k == key) return moves;
  const bool moves = count_backward_moves_kv(cfg, P);
  if (recent.size() == 4) recent.pop_back();
  recent.push_front({std::move(key), moves});
  return moves;
}

Schedule make_schedule(const AttnConfig& cfg, int P, int rank, int ring_steps,
                       std::optional<SummedComputes> summed) {
  validate(cfg, P);
  WF_CHECK(rank >= 0 && rank < P, "rank {} outside a group of {}", rank, P);
  WF_CHECK(ring_steps >= 0 &&
               (ring_steps == 0 || traits(cfg.strategy).build == build_team_ring_schedule),
           "ring_steps {} for {}: only a team ring (ring, zigzag, wallfacer) is cut", ring_steps,
           traits(cfg.strategy).name);
  Schedule s;
  s.ring_steps = ring_steps;
  s.summed = summed;
  s.cfg = cfg;
  s.P = P;
  s.rank = rank;
  s.team_ranks = schedule_team_ranks(cfg);
  s.inner_team_ranks = cfg.ulysses > 1 ? team_size(cfg) : 1;
  s.n = cfg.seq / P;
  s.bwd_moves_kv = backward_moves_kv(cfg, P);
  if (!cfg.doc_lengths.empty()) s.docs = doc_bounds(cfg);
  const int H = cfg.heads, K = cfg.kv_heads;
  // The caller's tensors are of cfg.dtype (dq, dk, dv rounded once at the end), lse and delta fp32.
  const Dtype w = cfg.dtype, f = Dtype::fp32;
  s.buffers = {
      {"q", Fmt::Rows, 1, s.n, H, false, w},      {"k", Fmt::Rows, 1, s.n, K, false, w},
      {"v", Fmt::Rows, 1, s.n, K, false, w},      {"o_in", Fmt::Rows, 1, s.n, H, false, w},
      {"lse_in", Fmt::Stat, 1, s.n, H, false, f}, {"dout", Fmt::Rows, 1, s.n, H, false, w},
      {"o", Fmt::Rows, 1, s.n, H, false, w},      {"lse", Fmt::Stat, 1, s.n, H, false, f},
      {"dq", Fmt::Rows, 1, s.n, H, false, w},     {"dk", Fmt::Rows, 1, s.n, K, false, w},
      {"dv", Fmt::Rows, 1, s.n, K, false, w},     {"delta_in", Fmt::Stat, 1, s.n, H, false, f},
  };
  traits(cfg.strategy).build(s);
  return s;
}

int64_t kept_elements(const AttnConfig& cfg, int P) {
  // A hybrid's team block: C*u blocks of seq/P rows of kv_heads/u heads, as many elements.
  if (!cfg.keep_kv || team_size(cfg) <= 1) return 0;
  return int64_t(cfg.batch) * cfg.teams * (cfg.seq / P) * 2 * cfg.kv_heads * cfg.head_dim;
}

std::vector<int> group_ranks(const Schedule& s, Group g) {
  std::vector<int> ranks;
  switch (g) {
    case Group::World:
      for (int r = 0; r < s.P; ++r) ranks.push_back(r);
      break;
    case Group::Team:
      for (int r = s.rank / s.team_ranks * s.team_ranks, a = 0; a < s.team_ranks; ++a)
        ranks.push_back(r + a);
      break;
    case Group::InnerTeam: {
      // Ring rank j = rank/u = t*C + a_r: the ring ranks t*C .. t*C+C-1 with member index m.
      const int u = s.team_ranks, C = s.inner_team_ranks, j = s.rank / u, m = s.rank % u;
      for (int a = 0; a < C; ++a) ranks.push_back((j / C * C + a) * u + m);
      break;
    }
  }
  return ranks;
}

ScheduleTotals schedule_totals(const Schedule& s) {
  ScheduleTotals t;
  auto sum = [](const std::vector<Op>& ops, int64_t& p2p, int64_t& coll, int64_t& steps,
                int64_t& sends, double& flops) {
    std::set<int> rounds;
    for (const auto& op : ops) {
      if (op.kind == OpKind::Send) {
        p2p += op.bytes;
        ++sends;
        rounds.insert(op.round);
      } else if (op.kind == OpKind::Collective) {
        coll += op.counted_bytes;
      } else if (op.kind == OpKind::Compute) {
        flops += op.flops;
      }
    }
    steps = int64_t(rounds.size());
  };
  sum(s.fwd, t.p2p_bytes_fwd, t.coll_bytes_fwd, t.p2p_steps_fwd, t.p2p_sends_fwd, t.flops_fwd);
  sum(s.bwd, t.p2p_bytes_bwd, t.coll_bytes_bwd, t.p2p_steps_bwd, t.p2p_sends_bwd, t.flops_bwd);
  return t;
}

ScheduleTotals operator+(const ScheduleTotals& a, const ScheduleTotals& b) {
  ScheduleTotals t;
  t.p2p_bytes_fwd = a.p2p_bytes_fwd + b.p2p_bytes_fwd;
  t.p2p_bytes_bwd = a.p2p_bytes_bwd + b.p2p_bytes_bwd;
  t.coll_bytes_fwd = a.coll_bytes_fwd + b.coll_bytes_fwd;
  t.coll_bytes_bwd = a.coll_bytes_bwd + b.coll_bytes_bwd;
  t.p2p_steps_fwd = a.p2p_steps_fwd + b.p2p_steps_fwd;
  t.p2p_steps_bwd = a.p2p_steps_bwd + b.p2p_steps_bwd;
  t.p2p_sends_fwd = a.p2p_sends_fwd + b.p2p_sends_fwd;
  t.p2p_sends_bwd = a.p2p_sends_bwd + b.p2p_sends_bwd;
  t.flops_fwd = a.flops_fwd + b.flops_fwd;
  t.flops_bwd = a.flops_bwd + b.flops_bwd;
  return t;
}

ScheduleTotals formula_totals(const AttnConfig& cfg, int P, int rank) {
  validate(cfg, P);
  if (cfg.ulysses > 1) {
    const auto h = hybrid_configs(cfg, P);
    ScheduleTotals t =
        formula_totals(h.outer, h.u, rank % h.u) + formula_totals(h.inner, h.rings, rank / h.u);
    // keep_kv: the backward's K,V are the forward's traded and gathered ones, not traded again.
    if (kept_elements(cfg, P) > 0)
      t.coll_bytes_bwd -= int64_t(h.u - 1) * cfg.batch * (cfg.seq / P) * 2 * (cfg.kv_heads / h.u) *
                          cfg.head_dim * dtype_bytes(cfg.dtype);
    return t;
  }
  return traits(cfg.strategy).totals(cfg, P, rank);
}

// e: bytes of a tensor element (q, k, v, o, dout); f: of a statistic (lse, delta) and of a
// gradient that travels (dq, dk, dv), fp32 whatever the dtype.
ScheduleTotals ulysses_totals(const AttnConfig& cfg, int P, int) {
  ScheduleTotals t;
  const int64_t B = cfg.batch, n = cfg.seq / P, H = cfg.heads, K = cfg.kv_heads, D = cfg.head_dim,
                e = dtype_bytes(cfg.dtype), f = 4;
  // all-to-all: (P-1)/P of the local buffer, per tensor: forward q, K,V, O (e) and LSE (f);
  // backward the query package (q, dout: e; lse, delta: f), K,V (e), dQ and dK,dV (f).
  const int64_t h = H / P, k = K / P;
  t.coll_bytes_fwd = (P - 1) * B * n * ((h * D + 2 * k * D + h * D) * e + h * f);
  t.coll_bytes_bwd =
      (P - 1) * B * n * ((2 * h * D + 2 * k * D) * e + (2 * h + h * D + 2 * k * D) * f);
  return t;
}

ScheduleTotals double_ring_totals(const AttnConfig& cfg, int P, int) {
  ScheduleTotals t;
  const int64_t B = cfg.batch, n = cfg.seq / P, H = cfg.heads, K = cfg.kv_heads, D = cfg.head_dim,
                e = dtype_bytes(cfg.dtype), f = 4;
  // Every hop is made. Forward: P-1 K,V hops, W-1 inner ones per phase in its first W-1 steps
  // (rounds) and one outer hop in each phase but the last. Backward: the same hops of the side
  // that travels (K,V, or the query packages: q, dout, lse, delta) and its accumulator's (dK,dV,
  // or dQ): W-1 inner hops in each of the G phases and each phase's partial home (but the one
  // that is home already: W = 1, phase 0), one round per step.
  const DoubleRingGeometry L(P, cfg.inner);
  const int64_t kv = B * n * 2 * K * D;  // elements of one K,V block
  t.p2p_bytes_fwd = (P - 1) * kv * e;
  t.p2p_sends_fwd = P - 1;
  t.p2p_steps_fwd = L.W > 1 ? int64_t(L.G) * (L.W - 1) : L.G - 1;
  if (P > 1) {
    const int64_t acc_hops = P - (L.W == 1 ? 1 : 0);
    t.p2p_bytes_bwd = backward_moves_kv(cfg, P) ? (P - 1) * kv * e + acc_hops * kv * f
                                                : (P - 1) * B * n * H * (2 * D * e + 2 * f) +
                                                      acc_hops * B * n * H * D * f;
    t.p2p_sends_bwd = P - 1 + acc_hops;
    t.p2p_steps_bwd = P;
  }
  return t;
}

ScheduleTotals team_ring_totals(const AttnConfig& cfg, int P, int rank) {
  ScheduleTotals t;
  const int64_t B = cfg.batch, n = cfg.seq / P, H = cfg.heads, K = cfg.kv_heads, D = cfg.head_dim,
                e = dtype_bytes(cfg.dtype), f = 4;
  const int64_t C = team_size(cfg);
  const WallFacerGeometry L(P, int(C));
  const int64_t G = L.G, m = C * n;  // team rows
  const int64_t moves = L.placement_dst(rank) != rank ? 1 : 0;
  const int64_t kv = B * m * 2 * K * D;  // elements of one team K,V block
  // forward: placement hop + G-1 ring hops of K,V; gather Q, K, V and reduce-scatter (O, LSE).
  t.p2p_bytes_fwd = (moves + G - 1) * kv * e;
  t.p2p_steps_fwd = moves + G - 1;
  t.p2p_sends_fwd = t.p2p_steps_fwd;
  t.coll_bytes_fwd = (C - 1) * B * n * ((H * D + 2 * K * D + H * D) * e + H * f);
  // backward: placement hop again, G-1 hops of the travelling side (query package q, dout, lse,
  // delta, or K,V), G hops of its gradient (dQ, or dK,dV; the last one home), dK,dV back along the
  // inverse placement; gather the query package and K, V, reduce-scatter dQ and dK, dV.
  const int64_t ring = G > 1 ? 1 : 0;
  const int64_t travel = backward_moves_kv(cfg, P) ? (G - 1) * kv * e + ring * G * kv * f
                                                   : (G - 1) * B * m * H * (2 * D * e + 2 * f) +
                                                         ring * G * B * m * H * D * f;
  // keep_kv: the forward's placed K,V stay, so neither the placement hop nor the K,V gather again.
  const bool kept = kept_elements(cfg, P) > 0;
  const int64_t place = kept ? 0 : moves;
  t.p2p_bytes_bwd = place * kv * e + moves * kv * f + travel;
  t.p2p_steps_bwd = place + moves + ring * G;
  t.p2p_sends_bwd = place + moves + (G - 1) + ring * G;
  const int64_t kv_gather = kept ? 0 : 2 * K * D;
  t.coll_bytes_bwd =
      (C - 1) * B * n * ((2 * H * D + kv_gather) * e + 2 * H * f + (H * D + 2 * K * D) * f);
  if (C == 1 && cfg.causal && !uses_zigzag_layout(cfg) && cfg.layout == Layout::Strategy &&
      cfg.doc_lengths.empty()) {
    // A contiguous causal ring (docs/documents.md, "The causal mask alone: bytes"; with a window
    // W, "Sliding windows: bytes"): the keys of rank o are seen by the queries of the d ranks after
    // it (no rank before it), d = P - 1 without a window and d = ceil((W-1)/n) with one, so its K,V
    // block makes h(o) = min(d, P-1-o) hops: rank x sends the blocks of ranks x-d+1..x that go on,
    // min(x+1, d) of them (none from rank P-1). Each message in a round of its own.
    const int64_t d = cfg.window > 0 ? (cfg.window - 1 + n - 1) / n : P - 1, x = rank;
    const int64_t hops = x < P - 1 ? std::min(x + 1, d) : 0;
    t.p2p_bytes_fwd = hops * kv * e;
    t.p2p_steps_fwd = t.p2p_sends_fwd = hops;
    if (backward_moves_kv(cfg, P)) {
      // K,V the same hops, dK,dV one hop behind each and from the last rank that holds a block
      // straight home: rank x < P-1 sends the one of rank x-d (when x >= d), rank P-1 those of the
      // min(d, P-1) blocks that stop there.
      const int64_t homes = x < P - 1 ? (d >= 1 && x >= d ? 1 : 0) : std::min<int64_t>(d, P - 1);
      t.p2p_bytes_bwd = hops * kv * (e + f) + homes * kv * f;
      t.p2p_steps_bwd = hops + homes;
      t.p2p_sends_bwd = 2 * hops + homes;
    } else {
      // The query packages (small P, no grouped-query heads): the package of rank o >= 1 needs
      // the keys of ranks max(0, o-d)..o-1, the last of them reached at the last hop, so it makes
      // all P-1 hops (rank 0's none, d = 0: none at all); rank x passes on P-2 of them (x = P-1:
      // P-1) and sends the P-1 dQ accumulators of the packages it holds, in P-1 rounds.
      const int64_t on = d == 0 ? 0 : P - 2 + (x == P - 1 ? 1 : 0), grads = d == 0 ? 0 : P - 1;
      t.p2p_bytes_bwd = on * B * n * H * (2 * D * e + 2 * f) + grads * B * n * H * D * f;
      t.p2p_steps_bwd = grads;
      t.p2p_sends_bwd = on + grads;
    }
  }
  return t;
}

}  // namespace wallfacer::seqpar
