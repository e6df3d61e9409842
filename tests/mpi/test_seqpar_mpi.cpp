// Distributed attention on the ranks of one mpirun launch: every strategy, causal and full, with
// and without GQA, against the naive fp64 reference of the whole sequence; bytes and steps against
// the schedule counter and the closed-form formulas; work balance; WallFacer-C volume against ring;
// reuse of one DistAttention across calls. Ulysses x ring hybrids (every degree u with 1 < u < P
// dividing P and the heads): results, and bytes against the sum of their two schedules, the closed
// form and the planner's simulated program. WallFacer-C runs in both placements (team-intra and
// ring-intra, where the two differ).
//
// Bytes are counted where they leave the program (mpi_bytes.h, the MPI profiling interface): per
// phase, what each rank handed to MPI's point-to-point sends, per peer and tag, equals the
// schedule's sends and the closed form; what it handed to each kind of collective equals a closed
// form of what each collective call carries; every byte sent was posted to be received; and the
// Communicator's own counters agree with what MPI was handed.
// Every configuration runs in fp32 and in bf16 (AttnConfig::dtype): bf16 against the fp64 reference
// of its bf16 inputs with the bf16 tolerances, against the same attention on one rank, and with
// exactly half of fp32's forward bytes (K,V) and the closed forms with 2-byte tensor elements.
// Usage: mpirun -np P test_seqpar_mpi [ring-wallfacer] [bf16]
//   ring-wallfacer: only ring and WallFacer with C >= 2, fp32 only; bf16: only the bf16 runs.

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <numeric>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "mpi_bytes.h"
#include "wallfacer/comm/communicator.h"
#include "wallfacer/core/error.h"
#include "wallfacer/kernels/attention.h"
#include "wallfacer/plan/attention_program.h"
#include "wallfacer/plan/placement.h"
#include "wallfacer/plan/planner.h"
#include "wallfacer/seqpar/attention.h"
#include "wallfacer/seqpar/harness.h"
#include "wallfacer/seqpar/schedule.h"

using namespace wallfacer;
using namespace wallfacer::seqpar;

namespace {

struct Run {
  AttnTensors got;  // gathered, natural order
  AttnStats stats;
  std::vector<double> flops;               // per rank
  std::array<mpi_bytes::Tally, 2> handed;  // what the last forward and backward handed to MPI
};

// The tensors of one rank, fp32 or bf16, and DistAttention's forward and backward on them.
template <class T>
struct Tensors {
  std::vector<T> q, k, v, dout, o, dq, dk, dv;
  std::vector<float> lse;
  void forward(DistAttention& a) { a.forward(q.data(), k.data(), v.data(), o.data(), lse.data()); }
  void backward(DistAttention& a) {
    a.backward(q.data(), k.data(), v.data(), o.data(), lse.data(), dout.data(), dq.data(),
               dk.data(), dv.data());
  }
};

// Forward (and the layer in between, for keep_kv) and backward on the tensors of `t`; the
// outputs widened to fp32 in o, lse, dq, dk, dv.
template <class T>
void run_calls(DistAttention& attn, const AttnConfig& c, Tensors<T>& t, Run& r,
               std::vector<float>* out[5]) {
  const mpi_bytes::Tally before = mpi_bytes::tally();
  t.forward(attn);
  r.handed[0] = mpi_bytes::since(before);
  if (c.keep_kv) {
    // Another layer's forward and backward in between (as in training): the kept K,V are last
    // in, first out, so the outer backward still sees its own.
    Tensors<T> t2 = t;
    for (auto* x : {&t2.q, &t2.k, &t2.v})
      for (auto& e : *x) e = T(0.5f - float(e));
    t2.forward(attn);
    t2.backward(attn);
  }
  const mpi_bytes::Tally between = mpi_bytes::tally();
  t.backward(attn);
  r.handed[1] = mpi_bytes::since(between);
  const std::vector<T>* got[5] = {&t.o, nullptr, &t.dq, &t.dk, &t.dv};
  for (int i = 0; i < 5; ++i)
    if (got[i]) {
      out[i]->clear();
      for (const T& e : *got[i]) out[i]->push_back(float(e));
    }
  *out[1] = t.lse;
}

// bf16 <-> float for the template above.
struct Half {
  bf16 x;
  Half() = default;
  explicit Half(float f) : x(to_bf16(f)) {}
  explicit operator float() const { return to_float(x); }
};
static_assert(sizeof(Half) == sizeof(bf16));

template <>
void Tensors<Half>::forward(DistAttention& a) {
  auto b = [](auto& t) { return reinterpret_cast<bf16*>(t.data()); };
  a.forward(b(q), b(k), b(v), b(o), lse.data());
}
template <>
void Tensors<Half>::backward(DistAttention& a) {
  auto b = [](auto& t) { return reinterpret_cast<bf16*>(t.data()); };
  a.backward(b(q), b(k), b(v), b(o), lse.data(), b(dout), b(dq), b(dk), b(dv));
}

template <class T>
Tensors<T> make_tensors(const AttnConfig& c, int P, int rank, const AttnTensors& in) {
  auto rows = [&](const std::vector<float>& full, int heads) {
    const auto x = local_rows(full, c, P, rank, heads);
    std::vector<T> out;
    for (float e : x) out.push_back(T(e));
    return out;
  };
  Tensors<T> t;
  t.q = rows(in.q, c.heads);
  t.k = rows(in.k, c.kv_heads);
  t.v = rows(in.v, c.kv_heads);
  t.dout = rows(in.dout, c.heads);
  t.o.resize(t.q.size());
  t.dq.resize(t.q.size());
  t.dk.resize(t.k.size());
  t.dv.resize(t.v.size());
  t.lse.resize(size_t(c.batch) * c.heads * (c.seq / P));
  return t;
}

Run run(comm::Communicator& group, const AttnConfig& c, const AttnTensors& in, int& failures) {
  const int P = group.size(), rank = group.rank();
  std::vector<float> o, lse, dq, dk, dv;
  std::vector<float>* out[5] = {&o, &lse, &dq, &dk, &dv};
  DistAttention attn(c, group);
  Run r;
  std::vector<float> first;
  Tensors<float> t32;
  Tensors<Half> t16;
  if (c.dtype == Dtype::bf16)
    t16 = make_tensors<Half>(c, P, rank, in);
  else
    t32 = make_tensors<float>(c, P, rank, in);
  for (int call = 0; call < 2; ++call) {  // the second call reuses the buffers: same bits
    if (c.dtype == Dtype::bf16)
      run_calls(attn, c, t16, r, out);
    else
      run_calls(attn, c, t32, r, out);
    std::vector<float> all = o;
    for (auto* x : {&lse, &dq, &dk, &dv}) all.insert(all.end(), x->begin(), x->end());
    if (call == 0) {
      first = all;
    } else if (all != first) {
      ++failures;
      std::fprintf(stderr, "rank %d: a second call on the same DistAttention differs\n", rank);
    }
  }
  r.stats = attn.stats();
  r.got.o = gather_rows(group, c, o.data(), c.heads);
  r.got.lse = gather_stat(group, c, lse.data(), c.heads);
  r.got.dq = gather_rows(group, c, dq.data(), c.heads);
  r.got.dk = gather_rows(group, c, dk.data(), c.kv_heads);
  r.got.dv = gather_rows(group, c, dv.data(), c.kv_heads);
  r.flops.assign(size_t(P), 0.0);
  r.flops[size_t(rank)] = r.stats.attn_flops;
  group.all_reduce_sum(r.flops.data(), P);
  return r;
}

int64_t max_over_ranks(comm::Communicator& world, int64_t x) {
  std::vector<double> v(size_t(world.size()), 0.0);
  v[size_t(world.rank())] = double(x);
  world.all_reduce_sum(v.data(), int64_t(v.size()));
  return int64_t(*std::max_element(v.begin(), v.end()));
}

// ---------------------------------------------------------------------------------------------
// Bytes handed to MPI (mpi_bytes.h) against what the schedule and the closed forms say.

// What one rank's schedules send in one phase: bytes to each (world rank of the peer, tag), the
// number of sends and the tags they use.
struct ScheduledSends {
  std::map<std::pair<int, int>, int64_t> bytes;
  int64_t sends = 0;
  std::set<int> tags;
};

// Forward and backward of rank `rank` of the sequence-parallel group; world_of[r] is the world
// rank of group rank r. A hybrid runs its Ulysses schedule in its team of u consecutive ranks and
// its ring (zigzag ring, WallFacer-C) over the ranks with the same member index.
std::array<ScheduledSends, 2> scheduled_sends(const AttnConfig& c, int P, int rank,
                                              const std::vector<int>& world_of) {
  std::array<ScheduledSends, 2> out;
  auto add = [&](const Schedule& s, auto&& to_group) {
    for (int phase = 0; phase < 2; ++phase) {
      for (const Op& op : phase ? s.bwd : s.fwd) {
        if (op.kind != OpKind::Send) continue;
        out[size_t(phase)].bytes[{world_of[size_t(to_group(op.peer))], op.tag}] += op.bytes;
        out[size_t(phase)].sends += 1;
        out[size_t(phase)].tags.insert(op.tag);
      }
    }
  };
  if (c.ulysses > 1) {
    const auto h = hybrid_configs(c, P);
    const int team = rank / h.u, member = rank % h.u;
    add(make_schedule(h.outer, h.u, member), [&](int p) { return team * h.u + p; });
    add(make_schedule(h.inner, h.rings, team), [&](int p) { return p * h.u + member; });
  } else {
    add(make_schedule(c, P, rank), [](int p) { return p; });
  }
  return out;
}

// What one rank hands to MPI's collectives in one phase, from what each collective call carries.
struct CollectiveBytes {
  mpi_bytes::Count all_gather;  // MPI_Allgather calls and their own blocks
  mpi_bytes::Count all_to_all;  // MPI_Alltoall calls and their whole send buffers
  int64_t exchange = 0;         // reduce-scatter by MPI_Isend: to each team member (itself too)
};

std::array<CollectiveBytes, 2> collective_bytes(const AttnConfig& c, int P) {
  // e: bytes of a tensor element (4, or 2 in bf16); f: of a statistic and of a gradient that
  // travels (fp32 in both).
  const int64_t B = c.batch, n = c.seq / P, f = 4, e = c.dtype == Dtype::bf16 ? 2 : 4;
  const int64_t rows_q = B * n * c.heads * c.head_dim,
                rows_kv = B * n * 2 * c.kv_heads * c.head_dim;
  // This rank's rows of q (also o, dout), of k and v together, of lse (delta), of the gradients.
  const int64_t q = rows_q * e, kv = rows_kv * e, stat = B * n * c.heads * f;
  const int64_t dq = rows_q * f, dkv = rows_kv * f;
  const int64_t qpack = 2 * q + 2 * stat;  // q, dout, lse, delta
  std::array<CollectiveBytes, 2> out;
  if (c.ulysses > 1 && c.strategy == Strategy::WallFacer && c.teams > 1) {
    // Ulysses x WallFacer-C: a ring rank's rows on heads/u heads are as many bytes as the rank's
    // own on all heads. Forward: the four all-to-alls of the Ulysses team (k,v, q, o, lse), the
    // WallFacer team's all-gathers of k,v and q and its reduce-scatter of (o, lse) (two
    // all-to-alls of C blocks). Backward: the all-to-alls of k,v (unless kept), the query package,
    // dq and dk,dv; the team's all-gathers of the query package and k,v (unless kept), its
    // reduce-scatters of dq and dk,dv.
    const int64_t C = c.teams;
    out[0].all_gather = {2, kv + q};
    out[0].all_to_all = {6, kv + q + q + stat + C * (q + stat)};
    out[1].all_gather = c.keep_kv ? mpi_bytes::Count{1, qpack} : mpi_bytes::Count{2, qpack + kv};
    out[1].all_to_all = c.keep_kv ? mpi_bytes::Count{3, qpack + dq + dkv}
                                  : mpi_bytes::Count{4, kv + qpack + dq + dkv};
    out[1].exchange = dq + dkv;
  } else if (c.ulysses > 1 || (c.strategy == Strategy::Ulysses && P > 1)) {
    // Each local tensor goes to head shards or comes back in one all-to-all of the team (all P
    // ranks for Ulysses): forward k,v, q, o, lse; backward k,v, the query package, dq, dk,dv.
    out[0].all_to_all = {4, kv + q + q + stat};
    out[1].all_to_all = {4, kv + qpack + dq + dkv};
  } else if (c.strategy == Strategy::WallFacer && c.teams > 1) {
    // Team of C. Forward: all-gather of k,v and of q; the reduce-scatter of the partial (o, lse)
    // is an all-to-all of C blocks of each. Backward: all-gather of the query package and, unless
    // the forward's k,v were kept, of k,v; reduce-scatter of dq and of dk,dv.
    out[0].all_gather = {2, kv + q};
    out[0].all_to_all = {2, c.teams * (q + stat)};
    out[1].all_gather = c.keep_kv ? mpi_bytes::Count{1, qpack} : mpi_bytes::Count{2, qpack + kv};
    out[1].exchange = dq + dkv;
  }
  return out;
}

// One phase's tally, sorted: sends on the schedule's tags (its point-to-point transfers), sends on
// other tags (the Communicator's pairwise exchanges), collectives by kind; and the bytes the
// Communicator's counters should show for it: point-to-point, and its ring-algorithm volume of the
// collectives (all-gather (n-1) blocks, all-to-all and reduce-scatter (n-1)/n of the buffer,
// all-reduce 2(n-1)/n, an exchange what goes to the other ranks).
struct Handed {
  std::map<std::pair<int, int>, int64_t> p2p;
  int64_t p2p_bytes = 0, p2p_sends = 0;
  std::map<int, int64_t> exchange;  // world rank of the peer -> bytes
  mpi_bytes::Count all_gather, all_to_all;
  mpi_bytes::Count other;   // all-reduce, reduce-scatter, broadcast, barrier
  int64_t addressed = 0;    // collective bytes addressed to other ranks, from the sizes handed
  int64_t ring_volume = 0;  // the ring algorithm's volume of the same calls
};

Handed sort_handed(const mpi_bytes::Tally& t, const std::set<int>& tags, int me_world) {
  using mpi_bytes::Kind;
  Handed h;
  for (const auto& [k, v] : t) {
    const int64_t n = k.group_size;
    switch (k.kind) {
      case Kind::Send:
        if (tags.count(k.tag)) {
          h.p2p[{k.peer, k.tag}] += v.bytes;
          h.p2p_bytes += v.bytes;
          h.p2p_sends += v.calls;
        } else {
          h.exchange[k.peer] += v.bytes;
          if (k.peer != me_world) h.addressed += v.bytes, h.ring_volume += v.bytes;
        }
        break;
      case Kind::Recv:
        break;
      case Kind::AllGather:
        h.all_gather += v;
        h.addressed += (n - 1) * v.bytes;  // the send block, to each other rank
        h.ring_volume += (n - 1) * v.bytes;
        break;
      case Kind::AllToAll:
        h.all_to_all += v;
        h.addressed += (n - 1) * v.bytes / n;  // the blocks of the other ranks
        h.ring_volume += (n - 1) * v.bytes / n;
        break;
      case Kind::AllReduce:
      case Kind::ReduceScatter:
      case Kind::Bcast:
      case Kind::Barrier:
        h.other += v;
        h.addressed += k.kind == Kind::AllReduce ? (n - 1) * v.bytes : (n - 1) * v.bytes / n;
        h.ring_volume += (k.kind == Kind::AllReduce ? 2 : 1) * (n - 1) * v.bytes / n;
        break;
    }
  }
  return h;
}

std::string peer_name(int world_rank) { return fmt::format("rank {}", world_rank); }
std::string peer_name(const std::pair<int, int>& peer_tag) {
  return fmt::format("rank {} tag {}", peer_tag.first, peer_tag.second);
}

// "" when the maps are equal, else their first difference.
template <class Map>
std::string first_difference(const Map& got, const Map& want) {
  for (const auto& [k, v] : want) {
    auto it = got.find(k);
    if (it == got.end() || it->second != v)
      return fmt::format("expected {} B to {}, handed {}", v, peer_name(k),
                         it == got.end() ? 0 : it->second);
  }
  for (const auto& [k, v] : got)
    if (!want.count(k)) return fmt::format("handed {} B to {}, expected none", v, peer_name(k));
  return "";
}

// The Communicator's collectives and point-to-point calls on the `P` ranks of the world: values,
// what each hands to MPI, and its counted bytes (ring algorithm).
int test_comm(comm::Communicator& world) {
  using mpi_bytes::Kind;
  const int P = world.size(), me = world.rank();
  int failures = 0;
  auto check = [&](bool ok, const char* what) {
    if (!ok) {
      ++failures;
      std::fprintf(stderr, "rank %d: FAIL comm %s\n", me, what);
    }
  };
  // The one record of `t` of this kind holds `calls` calls and `bytes` bytes, on all P ranks.
  auto one_call = [&](const mpi_bytes::Tally& t, Kind kind, int64_t bytes) {
    return t.size() == 1 && t.begin()->first.kind == kind && t.begin()->first.group_size == P &&
           t.begin()->second == mpi_bytes::Count{1, bytes};
  };
  auto& ctr = world.counters();
  ctr.reset();
  const int64_t n = 3, f = sizeof(float);
  {
    std::vector<float> send(n), recv(size_t(P * n));
    for (int64_t i = 0; i < n; ++i) send[size_t(i)] = float(me * 10 + i);
    const auto t0 = mpi_bytes::tally();
    world.all_gather(send.data(), n, recv.data());
    const auto handed = mpi_bytes::since(t0);
    bool ok = true;
    for (int r = 0; r < P; ++r)
      for (int64_t i = 0; i < n; ++i) ok = ok && recv[size_t(r * n + i)] == float(r * 10 + i);
    check(ok && ctr.coll_bytes == (P - 1) * n * f && ctr.coll_formula_bytes == (P - 1) * n * f,
          "all_gather");
    check(one_call(handed, Kind::AllGather, n * f), "all_gather hands MPI its block once");
  }
  {
    ctr.reset();
    std::vector<float> send(size_t(P * n)), recv(n);
    for (int j = 0; j < P; ++j)
      for (int64_t i = 0; i < n; ++i) send[size_t(j * n + i)] = float(me + j + i);
    const auto t0 = mpi_bytes::tally();
    world.reduce_scatter_sum(send.data(), recv.data(), n);
    const auto handed = mpi_bytes::since(t0);
    bool ok = true;
    for (int64_t i = 0; i < n; ++i)
      ok = ok && recv[size_t(i)] == float(P * (P - 1) / 2 + P * (me + i));
    check(ok && ctr.coll_bytes == (P - 1) * n * f && ctr.coll_formula_bytes == (P - 1) * n * f,
          "reduce_scatter_sum");
    // A pairwise exchange: one block sent to and received from every rank, itself included.
    std::map<int, int64_t> sent, posted;
    for (const auto& [k, v] : handed) {
      if (k.kind == Kind::Send && v.calls == 1) sent[k.peer] += v.bytes;
      if (k.kind == Kind::Recv && v.calls == 1) posted[k.peer] += v.bytes;
    }
    std::map<int, int64_t> each;
    for (int j = 0; j < P; ++j) each[j] = n * f;
    check(handed.size() == size_t(2 * P) && sent == each && posted == each,
          "reduce_scatter_sum hands MPI one block for each rank");
  }
  {
    ctr.reset();
    std::vector<float> send(size_t(P * n)), recv(size_t(P * n));
    for (int j = 0; j < P; ++j)
      for (int64_t i = 0; i < n; ++i) send[size_t(j * n + i)] = float(me * 100 + j * 10 + i);
    const auto t0 = mpi_bytes::tally();
    world.all_to_all(send.data(), recv.data(), n);
    const auto handed = mpi_bytes::since(t0);
    bool ok = true;
    for (int r = 0; r < P; ++r)
      for (int64_t i = 0; i < n; ++i)
        ok = ok && recv[size_t(r * n + i)] == float(r * 100 + me * 10 + i);
    check(ok && ctr.coll_bytes == (P - 1) * n * f && ctr.coll_formula_bytes == (P - 1) * n * f,
          "all_to_all");
    check(one_call(handed, Kind::AllToAll, P * n * f), "all_to_all hands MPI its buffer once");
  }
  {
    ctr.reset();
    double x[4] = {double(me), 1, 2, 3};
    const auto t0 = mpi_bytes::tally();
    world.all_reduce_sum(x, 4);
    const auto handed = mpi_bytes::since(t0);
    // Counted: the 4 doubles for each of the P-1 other ranks; the ring formula 2(P-1)/P of them.
    check(x[0] == P * (P - 1) / 2.0 && x[3] == 3.0 * P && ctr.coll_bytes == (P - 1) * 4 * 8 &&
              ctr.coll_formula_bytes == 2 * (P - 1) * 4 * 8 / P,
          "all_reduce_sum");
    check(one_call(handed, Kind::AllReduce, 4 * 8), "all_reduce_sum hands MPI its buffer once");
  }
  {
    // Rank s holds, for every block, o = s + 1 and lse = log(s + 1): merged, lse = log(sum) and
    // o = sum (s+1)^2 / sum (s+1).
    ctr.reset();
    const int B = 2, rows = 3, H = 2, D = 4;
    const int64_t ob = int64_t(B) * rows * H * D, lb = int64_t(B) * H * rows;
    std::vector<float> o(size_t(P * ob), float(me + 1)), l(size_t(P * lb), std::log(float(me + 1)));
    std::vector<float> oo(static_cast<size_t>(ob)), lo(static_cast<size_t>(lb));
    const auto t0 = mpi_bytes::tally();
    world.reduce_scatter_lse(o.data(), l.data(), oo.data(), lo.data(), B, rows, H, D,
                             kernels::lse_merge_rows);
    const auto handed = mpi_bytes::since(t0);
    double s1 = 0, s2 = 0;
    for (int s = 1; s <= P; ++s) {
      s1 += s;
      s2 += double(s) * s;
    }
    bool ok = true;
    for (float v : oo) ok = ok && std::abs(v - s2 / s1) <= 1e-5 * s2 / s1;
    for (float v : lo) ok = ok && std::abs(v - std::log(s1)) <= 1e-6 * std::log(s1) + 1e-6;
    check(ok && ctr.coll_bytes == (P - 1) * (ob + lb) * f &&
              ctr.coll_formula_bytes == (P - 1) * (ob + lb) * f,
          "reduce_scatter_lse");
    // Two all-to-alls: the O blocks, then the LSE blocks.
    check(handed.size() == 1 && handed.begin()->first.kind == Kind::AllToAll &&
              handed.begin()->second == mpi_bytes::Count{2, P * (ob + lb) * f},
          "reduce_scatter_lse hands MPI its O and LSE buffers once");
  }
  {
    ctr.reset();
    std::vector<float> send(5, float(me)), recv(5, -1.0f);
    const auto t0 = mpi_bytes::tally();
    auto r = world.irecv(recv.data(), 5, (me + P - 1) % P, 7);
    auto s = world.isend(send.data(), 5, (me + 1) % P, 7);
    s.wait();
    while (!r.test()) {
    }
    const auto handed = mpi_bytes::since(t0);
    check(recv[4] == float((me + P - 1) % P) && ctr.p2p_bytes == 20 && ctr.p2p_sends == 1,
          "isend/irecv");
    const mpi_bytes::Tally want{{{Kind::Send, P, (me + 1) % P, 7}, {1, 20}},
                                {{Kind::Recv, P, (me + P - 1) % P, 7}, {1, 20}}};
    check(handed == want, "isend/irecv hand MPI one message each, to and from the right ranks");
  }
  if (P % 2 == 0) {
    auto team = world.split(me / 2, me);
    check(team.size() == 2 && team.rank() == me % 2, "split");
    // A team's messages name world ranks.
    std::vector<float> send(4, float(me)), recv(4);
    const auto t0 = mpi_bytes::tally();
    auto r = team.irecv(recv.data(), 4, 1 - team.rank(), 9);
    team.isend(send.data(), 4, 1 - team.rank(), 9).wait();
    r.wait();
    const auto handed = mpi_bytes::since(t0);
    const int partner = me ^ 1;
    const mpi_bytes::Tally want{{{Kind::Send, 2, partner, 9}, {1, 16}},
                                {{Kind::Recv, 2, partner, 9}, {1, 16}}};
    check(recv[0] == float(partner) && handed == want, "team isend/irecv name the world ranks");
  }
  bool threw = false;
  try {
    world.isend(static_cast<const float*>(nullptr), 1, P, 0);
  } catch (const Error& e) {
    threw = std::string(e.what()).find("destination") != std::string::npos;
  }
  check(threw, "isend to a rank outside the group raises a clear error");
  ctr.reset();
  return failures;
}

// A configuration to run: the group's ranks in layout order are world ranks world_of.
struct Case {
  AttnConfig c;
  std::vector<int> world_of;
  bool ring_intra = false;
};

// What rank `me` of the group handed to MPI in each phase of `r` against its schedule (sends per
// peer and tag, their number), the closed forms (`form`: point-to-point; collective_bytes), and
// the Communicator's counters.
void check_handed(const Run& r, const AttnConfig& c, int P, int me,
                  const std::vector<int>& world_of, const ScheduleTotals& form,
                  const std::string& name,
                  const std::function<void(bool, const std::string&)>& check) {
  const auto sends = scheduled_sends(c, P, me, world_of);
  const auto coll = collective_bytes(c, P);
  const int me_world = world_of[size_t(me)];
  for (int phase = 0; phase < 2; ++phase) {
    const std::string what = name + (phase ? " backward" : " forward");
    const auto& want = sends[size_t(phase)];
    const auto& cb = coll[size_t(phase)];
    const Handed h = sort_handed(r.handed[size_t(phase)], want.tags, me_world);
    const std::string diff = first_difference(h.p2p, want.bytes);
    check(diff.empty(),
          fmt::format("{}: point-to-point sends differ from the schedule: {}", what, diff));
    const int64_t form_bytes = phase ? form.p2p_bytes_bwd : form.p2p_bytes_fwd;
    const int64_t form_sends = phase ? form.p2p_sends_bwd : form.p2p_sends_fwd;
    check(h.p2p_bytes == form_bytes && h.p2p_sends == want.sends && want.sends == form_sends,
          fmt::format("{}: handed MPI {} B in {} sends; schedule {} sends; formula {} B in {}",
                      what, h.p2p_bytes, h.p2p_sends, want.sends, form_bytes, form_sends));
    // Collectives. The reduce-scatters of WallFacer-C send a block to every member of the team
    // (a Ulysses hybrid's: the ring ranks j of the team, group ranks j*u + m).
    std::map<int, int64_t> exchange;
    if (cb.exchange > 0) {
      const int u = c.ulysses, C = c.teams, j = me / u;
      for (int a = 0; a < C; ++a)
        exchange[world_of[size_t((j / C * C + a) * u + me % u)]] = cb.exchange;
    }
    const std::string ediff = first_difference(h.exchange, exchange);
    check(ediff.empty(),
          fmt::format("{}: sends on other tags than the schedule's (reduce-scatter exchange): {}",
                      what, ediff));
    auto calls_bytes = [](const mpi_bytes::Count& n) {
      return fmt::format("{} calls, {} B", n.calls, n.bytes);
    };
    check(h.all_gather == cb.all_gather,
          fmt::format("{}: MPI_Allgather handed {}; closed form {}", what,
                      calls_bytes(h.all_gather), calls_bytes(cb.all_gather)));
    check(h.all_to_all == cb.all_to_all,
          fmt::format("{}: MPI_Alltoall handed {}; closed form {}", what, calls_bytes(h.all_to_all),
                      calls_bytes(cb.all_to_all)));
    check(h.other == mpi_bytes::Count{},
          fmt::format("{}: {} unexpected all-reduce, reduce-scatter, broadcast or barrier calls "
                      "({} B)",
                      what, h.other.calls, h.other.bytes));
    // The Communicator counts what MPI was handed.
    const auto& st = r.stats;
    const int64_t p2p = phase ? st.p2p_bytes_bwd : st.p2p_bytes_fwd;
    const int64_t coll_counted = phase ? st.coll_bytes_bwd : st.coll_bytes_fwd;
    const int64_t coll_formula = phase ? st.coll_formula_bytes_bwd : st.coll_formula_bytes_fwd;
    check(p2p == h.p2p_bytes && coll_counted == h.addressed,
          fmt::format("{}: the Communicator counted {} B sent and {} B of collectives; MPI was "
                      "handed {} B and {} B for other ranks",
                      what, p2p, coll_counted, h.p2p_bytes, h.addressed));
    check(coll_formula == h.ring_volume,
          fmt::format("{}: collective ring formula {} B; of what MPI was handed {} B", what,
                      coll_formula, h.ring_volume));
  }
}

// Every byte handed to MPI for another rank (both phases of `r`) was posted to be received there
// from this rank: the same on every rank.
bool sends_match_receives(comm::Communicator& world, const Run& r) {
  const int P = world.size(), me = world.rank();
  std::vector<double> sent(size_t(P * P), 0.0), posted(size_t(P * P), 0.0);  // [from * P + to]
  for (const auto& t : r.handed) {
    for (const auto& [k, v] : t) {
      if (k.kind == mpi_bytes::Kind::Send) sent[size_t(me * P + k.peer)] += double(v.bytes);
      if (k.kind == mpi_bytes::Kind::Recv) posted[size_t(k.peer * P + me)] += double(v.bytes);
    }
  }
  world.all_reduce_sum(sent.data(), int64_t(sent.size()));
  world.all_reduce_sum(posted.data(), int64_t(posted.size()));
  return sent == posted;
}

// Bytes the planner's attention program of a hybrid sends from `rank` (simulated on one node):
// p2p and collective, forward and backward.
std::vector<int64_t> planned_bytes(const AttnConfig& c, int P, int rank) {
  plan::Machine m;
  m.intra = m.inter = {1e9, 1e-6};
  m.devices_per_node = P;
  for (int r = 0; r < P; ++r) m.device_of.push_back(r);
  std::vector<int64_t> out;
  for (bool bwd : {false, true}) {
    const auto res = plan::simulate(plan::attention_program(c, P, bwd), m);
    out.push_back(int64_t(res.ranks[size_t(rank)].p2p_bytes));
    out.push_back(int64_t(res.ranks[size_t(rank)].coll_bytes));
  }
  return out;
}

// Bad hybrid configurations are refused with a UsageError.
int test_bad_hybrids() {
  int failures = 0;
  auto refused = [&](AttnConfig c, int ranks, const char* what) {
    try {
      validate(c, ranks);
    } catch (const UsageError&) {
      return;
    }
    ++failures;
    std::fprintf(stderr, "FAIL: %s is accepted\n", what);
  };
  AttnConfig c;
  c.seq = 64;
  c.heads = 8;
  c.kv_heads = 8;
  c.head_dim = 8;
  c.strategy = Strategy::Ring;
  c.ulysses = 3;
  refused(c, 6, "ulysses 3 with 8 heads");
  c.ulysses = 2;
  c.kv_heads = 1;
  refused(c, 4, "ulysses 2 with 1 kv head");
  c.kv_heads = 8;
  c.ulysses = 4;
  refused(c, 2, "ulysses 4 on 2 ranks");
  c.ulysses = 4;
  refused(c, 12, "ulysses 4 not dividing P = 12");
  c.ulysses = 0;
  refused(c, 4, "ulysses 0");
  c.ulysses = 2;
  c.strategy = Strategy::Ulysses;
  refused(c, 4, "ulysses 2 with strategy ulysses");
  // Ulysses x WallFacer-C: C^2 divides the P/u ranks of the ring over the Ulysses teams.
  c.strategy = Strategy::WallFacer;
  c.teams = 2;
  refused(c, 4, "ulysses 2 x wallfacer 2 on 4 ranks");
  c.keep_kv = true;
  validate(c, 8);
  c.keep_kv = false;
  c.teams = 1;
  // Ulysses 3 x zigzag 2 on 6 ranks: 18 tokens split over the ranks but not into the 4
  // half-chunks of the zigzag ring; 24 do both.
  c.strategy = Strategy::Zigzag;
  c.heads = c.kv_heads = 6;
  c.ulysses = 3;
  c.seq = 18;
  refused(c, 6, "zigzag hybrid with seq 18 on 6 ranks");
  c.seq = 24;
  validate(c, 6);
  // keep_kv keeps WallFacer's placed K,V: nothing to keep for a ring, C = 1 or a ring hybrid.
  c.keep_kv = true;
  refused(c, 6, "keep_kv with a zigzag hybrid");
  c.ulysses = 1;
  refused(c, 4, "keep_kv with zigzag");
  c.strategy = Strategy::WallFacer;
  c.teams = 1;
  refused(c, 4, "keep_kv with wallfacer C = 1");
  c.teams = 2;
  validate(c, 4);
  return failures;
}

}  // namespace

int main(int argc, char** argv) {
  comm::MpiSession session(&argc, &argv);
  auto world = comm::Communicator::world();
  const int P = world.size(), rank = world.rank();
  bool wallfacer_only = false, bf16_only = false;
  for (int i = 1; i < argc; ++i) {
    wallfacer_only = wallfacer_only || std::string(argv[i]) == "ring-wallfacer";
    bf16_only = bf16_only || std::string(argv[i]) == "bf16";
  }
  // The P = 16 launch (ring-wallfacer) runs fp32 only, to stay short; bf16 runs at P <= 8.
  std::vector<Dtype> dtypes{Dtype::fp32, Dtype::bf16};
  if (bf16_only) dtypes = {Dtype::bf16};
  if (wallfacer_only) dtypes = {Dtype::fp32};
  int failures = test_comm(world) + (rank == 0 ? test_bad_hybrids() : 0), configs = 0;
  auto check = [&](bool ok, const std::string& what) {
    if (!ok) {
      ++failures;
      std::fprintf(stderr, "rank %d: FAIL %s\n", rank, what.c_str());
    }
  };
  const int H = 8, D = 8;
  const int64_t S = std::max(64, 16 * P);
  for (bool causal : {false, true}) {
    for (int kv_div : {1, 2, 4}) {
      if (kv_div == 2 && (wallfacer_only || P < 4)) continue;  // GQA of the hybrids only
      std::map<std::string, int64_t> fp32_p2p_fwd;  // by configuration: this rank's forward sends
      for (Dtype dtype : dtypes) {
        AttnConfig base;
        base.dtype = dtype;
        base.seq = S;
        base.heads = H;
        base.kv_heads = H / kv_div;
        base.head_dim = D;
        base.causal = causal;
        base.batch = kv_div > 1 ? 2 : 1;
        // bf16: the inputs rounded to bf16, and the reference of the rounded inputs.
        const auto in = make_inputs(base, 1234 + kv_div);
        AttnTensors ref;
        if (rank == 0) ref = reference_attention(base, in, /*fp64=*/true);
        const AttnTolerance tol = attn_tolerance(dtype);
        // bf16: the same attention on one rank (every rank alone), which the distributed results
        // must match within the bf16 tolerances.
        Run single;
        if (dtype == Dtype::bf16 && P > 1) {
          auto alone = world.split(rank, 0);
          single = run(alone, base, in, failures);
        }

        std::vector<Case> cases;
        auto add = [&](Strategy s, int C, int u = 1, bool keep_kv = false, int inner = 0) {
          Case k;
          k.c = base;
          k.c.strategy = s;
          k.c.teams = C;
          k.c.inner = inner;
          k.c.ulysses = u;
          k.c.keep_kv = keep_kv;
          k.world_of.resize(size_t(P));
          std::iota(k.world_of.begin(), k.world_of.end(), 0);
          cases.push_back(k);
          if (s != Strategy::WallFacer || C == 1) return;
          // WallFacer-C ring-intra: the sub-rings on consecutive ranks (when that is another
          // order).
          k.world_of = plan::candidate_devices({s, C, u, plan::Placement::RingIntra, keep_kv}, P);
          if (k.world_of == cases.back().world_of) return;
          k.ring_intra = true;
          cases.push_back(k);
        };
        if (kv_div != 2) {
          // Every strategy of the table (the ring first: the others compare with it).
          for (const StrategyTraits& t : strategies()) {
            if (wallfacer_only && !t.has_teams && t.id != Strategy::Ring) continue;
            if (t.splits_heads && (H % P != 0 || base.kv_heads % P != 0)) continue;
            if (t.has_inner) {
              // Inner rings of W = 2 (and 4) ranks; W = P/2 on 2 ranks is the outer ring alone.
              for (int W : {1, 2, 4})
                if (P % W == 0 && W < P && (W > 1 || P == 2)) add(t.id, 1, 1, false, W);
            } else if (t.has_teams) {
              for (int C = wallfacer_only ? 2 : 1; C * C <= P; ++C) {
                if (P % (C * C) != 0) continue;
                add(t.id, C);
                if (C > 1) add(t.id, C, 1, /*keep_kv=*/true);
              }
            } else {
              add(t.id, 1);
            }
          }
        }
        for (int u = 2; u < P; ++u) {
          if (P % u != 0 || H % u != 0 || base.kv_heads % u != 0) continue;
          if (!wallfacer_only) {
            add(Strategy::Ring, 1, u);
            if (causal) add(Strategy::Zigzag, 1, u);
          }
          // Ulysses x WallFacer-C (P = 8: u = 2, C = 2, G = 1; P = 16 also G = 2 and ring-intra).
          for (int C = 2; C * C <= P / u; ++C) {
            if ((P / u) % (C * C) != 0 || (wallfacer_only && u != 2)) continue;
            add(Strategy::WallFacer, C, u);
            add(Strategy::WallFacer, C, u, /*keep_kv=*/true);
          }
        }

        int64_t ring_fwd = -1;
        std::vector<float> ring_o;
        for (const auto& [c, world_of, ring_intra] : cases) {
          ++configs;
          // The group numbered by layout rank: group rank r is world rank world_of[r].
          auto group =
              ring_intra ? world.split(0, plan::inverse_order(world_of)[size_t(rank)]) : world;
          const int me = group.rank();
          const auto r = run(group, c, in, failures);
          const std::string config = fmt::format(
              "{}{} C={}{}{}{} causal={} Hkv={} B={} P={}",
              c.ulysses > 1 ? fmt::format("ulysses{} x ", c.ulysses) : "",
              strategy_name(c.strategy), c.teams, c.inner > 0 ? fmt::format(" W={}", c.inner) : "",
              ring_intra ? " ring-intra" : "", c.keep_kv ? " keep-kv" : "", c.causal, c.kv_heads,
              c.batch, P);
          const std::string name = c.dtype == Dtype::bf16 ? config + " bf16" : config;
          // Bytes and steps: the Communicator's counters == schedule counter == closed form, on
          // every rank (hybrids: the closed forms of their Ulysses and ring parts summed, and the
          // planner's program too); what MPI was handed against all three.
          const auto sched = schedule_totals(make_schedule(c, P, me));
          const auto form = formula_totals(c, P, me);
          const auto& st = r.stats;
          // Collectives: what was handed to MPI for other ranks (4, 5) and the ring formula
          // (6, 7); the attention's collectives (all-gather, all-to-all, the pairwise
          // reduce-scatters) address to other ranks exactly the ring volume.
          const int64_t measured[] = {st.p2p_bytes_fwd,          st.p2p_bytes_bwd,
                                      st.p2p_steps_fwd,          st.p2p_steps_bwd,
                                      st.coll_bytes_fwd,         st.coll_bytes_bwd,
                                      st.coll_formula_bytes_fwd, st.coll_formula_bytes_bwd};
          const int64_t counted[] = {sched.p2p_bytes_fwd,  sched.p2p_bytes_bwd,
                                     sched.p2p_steps_fwd,  sched.p2p_steps_bwd,
                                     sched.coll_bytes_fwd, sched.coll_bytes_bwd,
                                     sched.coll_bytes_fwd, sched.coll_bytes_bwd};
          const int64_t closed[] = {form.p2p_bytes_fwd,  form.p2p_bytes_bwd,  form.p2p_steps_fwd,
                                    form.p2p_steps_bwd,  form.coll_bytes_fwd, form.coll_bytes_bwd,
                                    form.coll_bytes_fwd, form.coll_bytes_bwd};
          for (int i = 0; i < 8; ++i)
            check(measured[i] == counted[i] && counted[i] == closed[i],
                  fmt::format("{}: counter {} measured {} schedule {} formula {}", name, i,
                              measured[i], counted[i], closed[i]));
          check_handed(r, c, P, me, world_of, form, name, check);
          check(sends_match_receives(world, r), name + ": bytes sent differ from bytes received");
          check(st.attn_flops == sched.flops_fwd, name + ": flops differ from the schedule");
          if (c.strategy == Strategy::DoubleRing) {
            // What this rank handed MPI for the other groups: forward the G-1 outer K,V hops;
            // backward the G-1 outer hops of the side that travels (K,V, or the query packages:
            // q, dout, lse, delta) and the G-1 partials of its accumulator (dK,dV, or dQ) sent
            // home from other groups (the partial of the phase in the home's own group stays in
            // the group).
            const int W = c.inner, G = P / W;
            const int64_t rows = c.batch * (c.seq / P), e = dtype_bytes(c.dtype);
            const int64_t kv = 2 * rows * c.kv_heads * c.head_dim;
            const bool bwd_kv = backward_moves_kv(c, P);
            const int64_t hop = bwd_kv ? kv * e : rows * c.heads * (2 * c.head_dim * e + 8);
            const int64_t acc = bwd_kv ? kv * 4 : rows * c.heads * c.head_dim * 4;
            const int64_t want[] = {(G - 1) * kv * e, (G - 1) * (hop + acc)};
            for (int phase = 0; phase < 2; ++phase) {
              const int64_t cross =
                  mpi_bytes::sum(r.handed[size_t(phase)], [&](const auto& k) {
                    return k.kind == mpi_bytes::Kind::Send && k.peer / W != rank / W;
                  }).bytes;
              check(cross == want[phase], fmt::format("{}: phase {} sent {} B to other groups, "
                                                      "closed form {}",
                                                      name, phase, cross, want[phase]));
            }
          }
          if (c.ulysses > 1) {
            const auto planned = planned_bytes(c, P, me);
            const int64_t got[] = {st.p2p_bytes_fwd, st.coll_bytes_fwd, st.p2p_bytes_bwd,
                                   st.coll_bytes_bwd};
            for (int i = 0; i < 4; ++i)
              check(got[i] == planned[size_t(i)], fmt::format("{}: bytes {} measured {} planner {}",
                                                              name, i, got[i], planned[size_t(i)]));
          }
          // Work balance.
          double mx = 0, sum = 0;
          for (double f : r.flops) {
            mx = std::max(mx, f);
            sum += f;
          }
          const double imbalance = mx / (sum / P);
          if (c.causal && c.strategy != Strategy::Ring)
            check(imbalance <= 1.05, fmt::format("{}: work imbalance {}", name, imbalance));
          // WallFacer-C sends 1/C of ring's point-to-point volume, up to the placement hop.
          const int64_t p2p_fwd =
              max_over_ranks(world, mpi_bytes::sum(r.handed[0], [](const auto& k) {
                                      return k.kind == mpi_bytes::Kind::Send;
                                    }).bytes);
          const int64_t hop =
              2 * c.batch * (c.seq / P) * c.kv_heads * c.head_dim * dtype_bytes(c.dtype);
          // Every forward point-to-point byte is K,V: bf16 sends exactly half of fp32's.
          const int64_t my_p2p_fwd = mpi_bytes::sum(r.handed[0], [](const auto& k) {
                                       return k.kind == mpi_bytes::Kind::Send;
                                     }).bytes;
          if (c.dtype == Dtype::fp32) fp32_p2p_fwd[config] = my_p2p_fwd;
          if (c.dtype == Dtype::bf16 && fp32_p2p_fwd.count(config))
            check(2 * my_p2p_fwd == fp32_p2p_fwd[config],
                  fmt::format("{}: forward sends {} B, fp32 {} B (not half)", name, my_p2p_fwd,
                              fp32_p2p_fwd[config]));
          if (c.strategy == Strategy::Ring && c.ulysses == 1) ring_fwd = p2p_fwd;
          // (C = 1 is ring; C > 1: C times the volume, placement included, is ring's plus one hop.)
          if (c.strategy == Strategy::DoubleRing && ring_fwd >= 0)
            check(p2p_fwd == ring_fwd,
                  fmt::format("{}: p2p {} vs ring {}", name, p2p_fwd, ring_fwd));
          if (c.strategy == Strategy::WallFacer && c.ulysses == 1 && ring_fwd >= 0 && P > 1)
            check(c.teams == 1 ? p2p_fwd == ring_fwd : c.teams * p2p_fwd == ring_fwd + hop,
                  fmt::format("{}: p2p {} vs ring {}", name, p2p_fwd, ring_fwd));
          // Results.
          double errs[5] = {0, 0, 0, 0, 0};
          if (rank == 0) {
            const auto e = attention_errors(r.got, ref);
            errs[0] = e.out;
            errs[1] = e.lse;
            errs[2] = e.dq;
            errs[3] = e.dk;
            errs[4] = e.dv;
            std::printf(
                "%-44s err o %.1e lse %.1e dq %.1e dk %.1e dv %.1e  p2p %lld+%lld B  "
                "coll %lld+%lld B  steps %lld+%lld  imbalance %.3f\n",
                name.c_str(), e.out, e.lse, e.dq, e.dk, e.dv, (long long)st.p2p_bytes_fwd,
                (long long)st.p2p_bytes_bwd, (long long)st.coll_bytes_fwd,
                (long long)st.coll_bytes_bwd, (long long)st.p2p_steps_fwd,
                (long long)st.p2p_steps_bwd, imbalance);
            check(e.within(tol), name + ": error above tolerance");
            if (!single.got.o.empty()) {
              const auto d = attention_errors(r.got, single.got);
              std::printf("%-44s vs P=1: o %.1e lse %.1e dq %.1e dk %.1e dv %.1e\n", name.c_str(),
                          d.out, d.lse, d.dq, d.dk, d.dv);
              check(d.within(tol), name + ": differs from the same attention on one rank");
            }
            // WallFacer-1 on the contiguous layout is ring, bit for bit.
            if (c.strategy == Strategy::Ring && c.ulysses == 1) ring_o = r.got.o;
            if (c.strategy == Strategy::WallFacer && c.teams == 1 && !c.causal && !ring_o.empty())
              check(r.got.o == ring_o, name + ": differs from ring");
          }
          world.all_reduce_sum(errs, 5);
        }
      }
    }
  }
  // Ulysses 2 x WallFacer-2 (P = 8; P = 16, fp32: sub-rings of 2, whose hops the masks can skip;
  // GQA with kv_heads = U) under the masks that skip hops:
  // documents (full and causal, the strategy's and the balanced layout) and a sliding window, fp32
  // and bf16, against the fp64 reference and (bf16) the same attention on one rank; the counters
  // are the schedule's sums (hops no query needs are not made).
  if ((P == 8 && !wallfacer_only) || (P == 16 && wallfacer_only)) {
    struct Mask {
      bool causal;
      int64_t window;
      bool docs;
      Layout layout;
    };
    for (const Mask& mask : {Mask{false, 0, true, Layout::Strategy},
                             Mask{true, 0, true, Layout::Strategy},
                             Mask{true, 0, true, Layout::Balanced}, Mask{true, S / 5, false,
                                                                         Layout::Strategy},
                             Mask{true, S / 8 + 3, true, Layout::Balanced}}) {
      for (Dtype dtype : dtypes) {
        AttnConfig c;
        c.strategy = Strategy::WallFacer;
        c.teams = 2;
        c.ulysses = 2;
        c.seq = S;
        c.heads = H;
        c.kv_heads = 2;
        c.head_dim = D;
        c.causal = mask.causal;
        c.window = mask.window;
        c.layout = mask.layout;
        c.dtype = dtype;
        c.keep_kv = mask.causal;
        if (mask.docs) c.doc_lengths = {S / 4 + 3, 1, S / 2 - 9, S / 4 + 5};
        const std::string name = fmt::format(
            "ulysses2 x wallfacer C=2{} {} window {} {} layout docs {} Hkv=2 P={} {}",
            c.keep_kv ? " keep-kv" : "", c.causal ? "causal" : "full", c.window,
            layout_name(c.layout), c.doc_lengths.size(), P, dtype_name(dtype));
        const auto in = make_inputs(c, 4321);
        Run single;
        if (dtype == Dtype::bf16) {  // the same attention, as a ring of one rank
          AttnConfig one = c;
          one.strategy = Strategy::Ring;
          one.teams = one.ulysses = 1;
          one.keep_kv = false;
          one.layout = Layout::Strategy;
          auto alone = world.split(rank, 0);
          single = run(alone, one, in, failures);
        }
        const auto r = run(world, c, in, failures);
        ++configs;
        const auto sched = schedule_totals(make_schedule(c, P, rank));
        const auto& st = r.stats;
        check(st.p2p_bytes_fwd == sched.p2p_bytes_fwd && st.p2p_bytes_bwd == sched.p2p_bytes_bwd &&
                  st.coll_bytes_fwd == sched.coll_bytes_fwd &&
                  st.coll_bytes_bwd == sched.coll_bytes_bwd,
              fmt::format("{}: counters {} {} {} {}, schedule {} {} {} {}", name, st.p2p_bytes_fwd,
                          st.p2p_bytes_bwd, st.coll_bytes_fwd, st.coll_bytes_bwd,
                          sched.p2p_bytes_fwd, sched.p2p_bytes_bwd, sched.coll_bytes_fwd,
                          sched.coll_bytes_bwd));
        check(sends_match_receives(world, r), name + ": bytes sent differ from bytes received");
        if (rank == 0) {
          const auto e = attention_errors(r.got, reference_attention(c, in, /*fp64=*/true));
          std::printf("%-72s err o %.1e lse %.1e dq %.1e dk %.1e dv %.1e\n", name.c_str(), e.out,
                      e.lse, e.dq, e.dk, e.dv);
          check(e.within(attn_tolerance(dtype)), name + ": error above tolerance");
          if (!single.got.o.empty())
            check(attention_errors(r.got, single.got).within(attn_tolerance(dtype)),
                  name + ": differs from the same attention on one rank");
        }
      }
    }
  }
  double total = failures;
  world.all_reduce_sum(&total, 1);
  if (rank == 0)
    std::printf("seqpar mpi P=%d: %d configurations, %d failures\n", P, configs, int(total));
  return total == 0 ? 0 : 1;
}
