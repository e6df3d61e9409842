// Distributed attention on the ranks of one mpirun launch: every strategy, causal and full, with
// and without GQA, against the naive fp64 reference of the whole sequence; counted bytes and steps
// against the schedule counter and the closed-form formulas; work balance; WallFacer-C volume
// against ring; reuse of one DistAttention across calls. Ulysses x ring hybrids (every degree u
// with 1 < u < P dividing P and the heads): results, and bytes against the sum of their two
// schedules, the closed form and the planner's simulated program.
// Usage: mpirun -np P test_seqpar_mpi [ring-wallfacer]   (only ring and WallFacer with C >= 2)

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "wallfacer/comm/communicator.h"
#include "wallfacer/core/error.h"
#include "wallfacer/plan/attention_program.h"
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
  std::vector<double> flops;  // per rank
};

std::vector<float> local_rows(const std::vector<float>& full, const AttnConfig& c, int P, int rank,
                              int heads) {
  const auto pos = local_positions(c, P, rank);
  const int64_t n = int64_t(pos.size()), w = int64_t(heads) * c.head_dim;
  std::vector<float> out(size_t(c.batch * n * w));
  for (int64_t b = 0; b < c.batch; ++b)
    for (int64_t i = 0; i < n; ++i)
      std::copy_n(full.data() + (b * c.seq + pos[size_t(i)]) * w, w, out.data() + (b * n + i) * w);
  return out;
}

Run run(comm::Communicator& world, const AttnConfig& c, const AttnTensors& in, int& failures) {
  const int P = world.size(), rank = world.rank();
  const int64_t n = c.seq / P;
  const auto q = local_rows(in.q, c, P, rank, c.heads),
             k = local_rows(in.k, c, P, rank, c.kv_heads),
             v = local_rows(in.v, c, P, rank, c.kv_heads),
             dout = local_rows(in.dout, c, P, rank, c.heads);
  std::vector<float> o(q.size()), lse(size_t(c.batch * c.heads * n)), dq(q.size()), dk(k.size()),
      dv(v.size());
  DistAttention attn(c, world);
  Run r;
  std::vector<float> first;
  for (int call = 0; call < 2; ++call) {  // the second call reuses the buffers: same bits
    attn.forward(q.data(), k.data(), v.data(), o.data(), lse.data());
    if (c.keep_kv && call == 0) {
      // Another layer's forward and backward in between (as in training): the kept K,V are last
      // in, first out, so the outer backward still sees its own.
      std::vector<float> q2 = q, k2 = k, v2 = v, o2(o.size()), lse2(lse.size()), d2(dq.size()),
                         dk2(dk.size()), dv2(dv.size());
      for (auto* t : {&q2, &k2, &v2})
        for (auto& x : *t) x = 0.5f - x;
      attn.forward(q2.data(), k2.data(), v2.data(), o2.data(), lse2.data());
      attn.backward(q2.data(), k2.data(), v2.data(), o2.data(), lse2.data(), dout.data(), d2.data(),
                    dk2.data(), dv2.data());
    }
    attn.backward(q.data(), k.data(), v.data(), o.data(), lse.data(), dout.data(), dq.data(),
                  dk.data(), dv.data());
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
  r.got.o = gather_rows(world, c, o.data(), c.heads);
  r.got.lse = gather_stat(world, c, lse.data(), c.heads);
  r.got.dq = gather_rows(world, c, dq.data(), c.heads);
  r.got.dk = gather_rows(world, c, dk.data(), c.kv_heads);
  r.got.dv = gather_rows(world, c, dv.data(), c.kv_heads);
  r.flops.assign(size_t(P), 0.0);
  r.flops[size_t(rank)] = r.stats.attn_flops;
  world.all_reduce_sum(r.flops.data(), P);
  return r;
}

int64_t max_over_ranks(comm::Communicator& world, int64_t x) {
  std::vector<double> v(size_t(world.size()), 0.0);
  v[size_t(world.rank())] = double(x);
  world.all_reduce_sum(v.data(), int64_t(v.size()));
  return int64_t(*std::max_element(v.begin(), v.end()));
}

// The Communicator's collectives and point-to-point calls: values and counted bytes (ring
// algorithm) on `P` ranks.
int test_comm(comm::Communicator& world) {
  const int P = world.size(), me = world.rank();
  int failures = 0;
  auto check = [&](bool ok, const char* what) {
    if (!ok) {
      ++failures;
      std::fprintf(stderr, "rank %d: FAIL comm %s\n", me, what);
    }
  };
  auto& ctr = world.counters();
  ctr.reset();
  const int64_t n = 3;
  {
    std::vector<float> send(n), recv(size_t(P * n));
    for (int64_t i = 0; i < n; ++i) send[size_t(i)] = float(me * 10 + i);
    world.all_gather(send.data(), n, recv.data());
    bool ok = true;
    for (int r = 0; r < P; ++r)
      for (int64_t i = 0; i < n; ++i) ok = ok && recv[size_t(r * n + i)] == float(r * 10 + i);
    check(ok && ctr.coll_bytes == (P - 1) * n * 4, "all_gather");
  }
  {
    ctr.reset();
    std::vector<float> send(size_t(P * n)), recv(n);
    for (int j = 0; j < P; ++j)
      for (int64_t i = 0; i < n; ++i) send[size_t(j * n + i)] = float(me + j + i);
    world.reduce_scatter_sum(send.data(), recv.data(), n);
    bool ok = true;
    for (int64_t i = 0; i < n; ++i)
      ok = ok && recv[size_t(i)] == float(P * (P - 1) / 2 + P * (me + i));
    check(ok && ctr.coll_bytes == (P - 1) * n * 4, "reduce_scatter_sum");
  }
  {
    ctr.reset();
    std::vector<float> send(size_t(P * n)), recv(size_t(P * n));
    for (int j = 0; j < P; ++j)
      for (int64_t i = 0; i < n; ++i) send[size_t(j * n + i)] = float(me * 100 + j * 10 + i);
    world.all_to_all(send.data(), recv.data(), n);
    bool ok = true;
    for (int r = 0; r < P; ++r)
      for (int64_t i = 0; i < n; ++i)
        ok = ok && recv[size_t(r * n + i)] == float(r * 100 + me * 10 + i);
    check(ok && ctr.coll_bytes == (P - 1) * n * 4, "all_to_all");
  }
  {
    ctr.reset();
    double x[4] = {double(me), 1, 2, 3};
    world.all_reduce_sum(x, 4);
    check(x[0] == P * (P - 1) / 2.0 && x[3] == 3.0 * P && ctr.coll_bytes == 2 * (P - 1) * 4 * 8 / P,
          "all_reduce_sum");
  }
  {
    // Rank s holds, for every block, o = s + 1 and lse = log(s + 1): merged, lse = log(sum) and
    // o = sum (s+1)^2 / sum (s+1).
    ctr.reset();
    const int B = 2, rows = 3, H = 2, D = 4;
    const int64_t ob = int64_t(B) * rows * H * D, lb = int64_t(B) * H * rows;
    std::vector<float> o(size_t(P * ob), float(me + 1)), l(size_t(P * lb), std::log(float(me + 1)));
    std::vector<float> oo(static_cast<size_t>(ob)), lo(static_cast<size_t>(lb));
    world.reduce_scatter_lse(o.data(), l.data(), oo.data(), lo.data(), B, rows, H, D);
    double s1 = 0, s2 = 0;
    for (int s = 1; s <= P; ++s) {
      s1 += s;
      s2 += double(s) * s;
    }
    bool ok = true;
    for (float v : oo) ok = ok && std::abs(v - s2 / s1) <= 1e-5 * s2 / s1;
    for (float v : lo) ok = ok && std::abs(v - std::log(s1)) <= 1e-6 * std::log(s1) + 1e-6;
    check(ok && ctr.coll_bytes == (P - 1) * (ob + lb) * 4, "reduce_scatter_lse");
  }
  {
    ctr.reset();
    std::vector<float> send(5, float(me)), recv(5, -1.0f);
    auto r = world.irecv(recv.data(), 5, (me + P - 1) % P, 7);
    auto s = world.isend(send.data(), 5, (me + 1) % P, 7);
    s.wait();
    while (!r.test()) {
    }
    check(recv[4] == float((me + P - 1) % P) && ctr.p2p_bytes == 20 && ctr.p2p_sends == 1,
          "isend/irecv");
  }
  if (P % 2 == 0) {
    auto team = world.split(me / 2, me);
    check(team.size() == 2 && team.rank() == me % 2, "split");
  }
  bool threw = false;
  try {
    world.isend(nullptr, 1, P, 0);
  } catch (const Error& e) {
    threw = std::string(e.what()).find("destination") != std::string::npos;
  }
  check(threw, "isend to a rank outside the group raises a clear error");
  ctr.reset();
  return failures;
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
    const auto res = plan::simulate(plan::attention_program(c, P, bwd, 4.0), m);
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
  for (Strategy s : {Strategy::Ulysses, Strategy::WallFacer}) {
    c.strategy = s;
    refused(c, 4, "ulysses 2 with strategy ulysses or wallfacer");
  }
  // Ulysses 3 x zigzag 2 on 6 ranks: 18 tokens split over the ranks but not into the 4
  // half-chunks of the zigzag ring; 24 do both.
  c.strategy = Strategy::Zigzag;
  c.heads = c.kv_heads = 6;
  c.ulysses = 3;
  c.seq = 18;
  refused(c, 6, "zigzag hybrid with seq 18 on 6 ranks");
  c.seq = 24;
  validate(c, 6);
  // keep_kv keeps WallFacer's placed K,V: nothing to keep for a ring, C = 1 or a hybrid.
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
  const bool wallfacer_only = argc > 1 && std::string(argv[1]) == "ring-wallfacer";
  int failures = test_comm(world) + (rank == 0 ? test_bad_hybrids() : 0), configs = 0;
  auto check = [&](bool ok, const std::string& what) {
    if (!ok) {
      ++failures;
      std::fprintf(stderr, "rank %d: FAIL %s\n", rank, what.c_str());
    }
  };
  const AttnTolerance tol;
  const int H = 8, D = 8;
  const int64_t S = std::max(64, 16 * P);
  for (bool causal : {false, true}) {
    for (int kv_div : {1, 2, 4}) {
      if (kv_div == 2 && (wallfacer_only || P < 4)) continue;  // GQA of the hybrids only
      AttnConfig base;
      base.seq = S;
      base.heads = H;
      base.kv_heads = H / kv_div;
      base.head_dim = D;
      base.causal = causal;
      base.batch = kv_div > 1 ? 2 : 1;
      const auto in = make_inputs(base, 1234 + kv_div);
      AttnTensors ref;
      if (rank == 0) ref = reference_attention(base, in, /*fp64=*/true);

      std::vector<AttnConfig> cfgs;
      auto add = [&](Strategy s, int C, int u = 1, bool keep_kv = false) {
        AttnConfig c = base;
        c.strategy = s;
        c.teams = C;
        c.ulysses = u;
        c.keep_kv = keep_kv;
        cfgs.push_back(c);
      };
      if (kv_div != 2) {
        add(Strategy::Ring, 1);
        if (!wallfacer_only) {
          add(Strategy::Zigzag, 1);
          if (H % P == 0 && base.kv_heads % P == 0) add(Strategy::Ulysses, 1);
        }
        for (int C = wallfacer_only ? 2 : 1; C * C <= P; ++C) {
          if (P % (C * C) != 0) continue;
          add(Strategy::WallFacer, C);
          if (C > 1) add(Strategy::WallFacer, C, 1, /*keep_kv=*/true);
        }
      }
      for (int u = 2; u < P && !wallfacer_only; ++u) {
        if (P % u != 0 || H % u != 0 || base.kv_heads % u != 0) continue;
        add(Strategy::Ring, 1, u);
        if (causal) add(Strategy::Zigzag, 1, u);
      }

      int64_t ring_fwd = -1;
      std::vector<float> ring_o;
      for (const auto& c : cfgs) {
        ++configs;
        const auto r = run(world, c, in, failures);
        const std::string name = fmt::format(
            "{}{} C={}{} causal={} Hkv={} B={} P={}",
            c.ulysses > 1 ? fmt::format("ulysses{} x ", c.ulysses) : "", strategy_name(c.strategy),
            c.teams, c.keep_kv ? " keep-kv" : "", c.causal, c.kv_heads, c.batch, P);
        // Bytes and steps: measured == schedule counter == closed form, on every rank (hybrids:
        // their Ulysses and ring schedules summed, and the planner's program of the two).
        const auto sched =
            c.ulysses > 1 ? hybrid_totals(c, P, rank) : schedule_totals(make_schedule(c, P, rank));
        const auto form = formula_totals(c, P, rank);
        const auto& st = r.stats;
        const int64_t measured[] = {st.p2p_bytes_fwd,  st.p2p_bytes_bwd, st.coll_bytes_fwd,
                                    st.coll_bytes_bwd, st.p2p_steps_fwd, st.p2p_steps_bwd};
        const int64_t counted[] = {sched.p2p_bytes_fwd,  sched.p2p_bytes_bwd, sched.coll_bytes_fwd,
                                   sched.coll_bytes_bwd, sched.p2p_steps_fwd, sched.p2p_steps_bwd};
        const int64_t closed[] = {form.p2p_bytes_fwd,  form.p2p_bytes_bwd, form.coll_bytes_fwd,
                                  form.coll_bytes_bwd, form.p2p_steps_fwd, form.p2p_steps_bwd};
        for (int i = 0; i < 6; ++i)
          check(measured[i] == counted[i] && counted[i] == closed[i],
                fmt::format("{}: counter {} measured {} schedule {} formula {}", name, i,
                            measured[i], counted[i], closed[i]));
        check(st.attn_flops == sched.flops_fwd, name + ": flops differ from the schedule");
        if (c.ulysses > 1) {
          const auto planned = planned_bytes(c, P, rank);
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
        const int64_t p2p_fwd = max_over_ranks(world, st.p2p_bytes_fwd);
        const int64_t hop = 2 * c.batch * (c.seq / P) * c.kv_heads * c.head_dim * 4;
        if (c.strategy == Strategy::Ring && c.ulysses == 1) ring_fwd = p2p_fwd;
        // (C = 1 is ring; C > 1: C times the volume, placement included, is ring's plus one hop.)
        if (c.strategy == Strategy::WallFacer && ring_fwd >= 0 && P > 1)
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
          // WallFacer-1 on the contiguous layout is ring, bit for bit.
          if (c.strategy == Strategy::Ring && c.ulysses == 1) ring_o = r.got.o;
          if (c.strategy == Strategy::WallFacer && c.teams == 1 && !c.causal && !ring_o.empty())
            check(r.got.o == ring_o, name + ": differs from ring");
        }
        world.all_reduce_sum(errs, 5);
      }
    }
  }
  double total = failures;
  world.all_reduce_sum(&total, 1);
  if (rank == 0)
    std::printf("seqpar mpi P=%d: %d configurations, %d failures\n", P, configs, int(total));
  return total == 0 ? 0 : 1;
}
