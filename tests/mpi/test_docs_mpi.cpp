// Packed documents through distributed attention on the ranks of one mpirun launch: every strategy
// (ring, zigzag, Ulysses, WallFacer-C in both placements, Ulysses x ring hybrids), causal and full,
// in the strategy's layout and the balanced one, with documents that put a one-token document,
// a document spanning every rank and boundaries on rank and kernel tile borders; the results
// against the naive fp64 reference of the whole sequence and against the fp32 kernels on one
// process, and the work counter (forward FLOPs of all ranks) against a pair-by-pair count of the
// mask. The random documents are set on a DistAttention built without them
// (DistAttention::set_documents; in the balanced layout the rows then move to local_positions()).
// Sliding windows (AttnConfig::window) run the same way: of one token, of a rank's rows, across
// rank and tile borders and longer than several ranks' rows, with the documents (the random ones
// too, set later: the balanced layout counts the window, so the rows move where it puts them),
// and every rank's byte counters against its schedule's sums; then the bytes of a contiguous ring
// with windows of up to several ranks' rows against their closed form. Usage: mpirun -np P
// test_docs_mpi

#include <fmt/format.h>

#include <cstdio>
#include <numeric>
#include <string>
#include <vector>

#include "wallfacer/comm/communicator.h"
#include "wallfacer/core/error.h"
#include "wallfacer/plan/placement.h"
#include "wallfacer/plan/planner.h"
#include "wallfacer/seqpar/attention.h"
#include "wallfacer/seqpar/doc_layout.h"
#include "wallfacer/seqpar/harness.h"
#include "wallfacer/seqpar/schedule.h"

using namespace wallfacer;
using namespace wallfacer::seqpar;

namespace {

// Forward and backward on `group`; the outputs gathered in natural order, this rank's stats and
// the forward FLOPs of all ranks. `set_later`: the DistAttention is built with one document and
// runs once, then gets c's documents from set_documents.
AttnTensors run(comm::Communicator& group, const AttnConfig& c, const AttnTensors& in,
                bool set_later, double& flops, AttnStats& stats) {
  const int P = group.size(), rank = group.rank();
  const auto q = local_rows(in.q, c, P, rank, c.heads),
             k = local_rows(in.k, c, P, rank, c.kv_heads),
             v = local_rows(in.v, c, P, rank, c.kv_heads),
             dout = local_rows(in.dout, c, P, rank, c.heads);
  std::vector<float> o(q.size()), lse(size_t(c.batch) * c.heads * (c.seq / P)), dq(q.size()),
      dk(k.size()), dv(v.size());
  AttnConfig built = c;
  if (set_later) built.doc_lengths.clear();
  DistAttention attn(built, group);
  if (set_later) {
    attn.forward(q.data(), k.data(), v.data(), o.data(), lse.data());
    attn.backward(q.data(), k.data(), v.data(), o.data(), lse.data(), dout.data(), dq.data(),
                  dk.data(), dv.data());
    attn.set_documents(c.doc_lengths.data(), int(c.doc_lengths.size()));
    // The balanced layout moves the rows to the layout of the new documents.
    WF_CHECK(attn.local_positions() == local_positions(c, P, rank),
             "set_documents: local_positions() is not the layout of the documents");
  }
  attn.forward(q.data(), k.data(), v.data(), o.data(), lse.data());
  attn.backward(q.data(), k.data(), v.data(), o.data(), lse.data(), dout.data(), dq.data(),
                dk.data(), dv.data());
  stats = attn.stats();
  flops = stats.attn_flops;
  group.all_reduce_sum(&flops, 1);
  return gather_outputs(group, c, o.data(), lse.data(), dq.data(), dk.data(), dv.data());
}

// Pairs the mask keeps over the whole sequence, one by one from the lengths (window > 0: only
// keys less than `window` positions back).
int64_t brute_pairs(const std::vector<int64_t>& lengths, bool causal, int64_t window) {
  std::vector<int> ids;
  for (size_t d = 0; d < lengths.size(); ++d) ids.insert(ids.end(), size_t(lengths[d]), int(d));
  int64_t n = 0;
  for (size_t i = 0; i < ids.size(); ++i)
    for (size_t j = 0; j < ids.size(); ++j)
      n += ids[i] == ids[j] && (!causal || i >= j) && (window == 0 || int64_t(i - j) < window);
  return n;
}

}  // namespace

int main(int argc, char** argv) {
  comm::MpiSession session(&argc, &argv);
  auto world = comm::Communicator::world();
  const int P = world.size(), rank = world.rank();
  int failures = 0, configs = 0;
  auto check = [&](bool ok, const std::string& what) {
    if (!ok) {
      ++failures;
      std::fprintf(stderr, "rank %d: FAIL %s\n", rank, what.c_str());
    }
  };
  // 512 positions: kernel tiles of 128 query and 256 key rows; rank borders at multiples of 512/P.
  const int64_t S = 512;
  const std::vector<std::vector<int64_t>> doc_sets = {
      {1, 63, 64, 128, 5, 251},              // one token; borders at 64, 128, 256
      {1, 509, 2},                           // a document over every rank
      random_doc_lengths_count(S, 16, 11)};  // long-tailed lengths
  const AttnTolerance tol = attn_tolerance(Dtype::fp32);
  const AttnTolerance tol2{2 * tol.out, 2 * tol.lse, 2 * tol.grad};
  // The masks: full, causal, and causal with sliding windows.
  struct Mask {
    bool causal = false;
    int64_t window = 0;
  };
  for (size_t set = 0; set < doc_sets.size(); ++set) {
    const auto& docs = doc_sets[set];
    std::vector<Mask> masks = {{false, 0}, {true, 0}};
    if (set == 0)
      for (int64_t w : {int64_t(1), S / 8, int64_t(300)}) masks.push_back({true, w});
    if (set == 1) masks.push_back({true, 100});
    if (set == 2) masks.push_back({true, 40});
    for (const Mask& mask : masks) {
      const bool causal = mask.causal;
      AttnConfig base;
      base.seq = S;
      base.heads = 8;
      base.kv_heads = 8;
      base.head_dim = 16;
      base.causal = causal;
      base.window = mask.window;
      base.doc_lengths = docs;
      const auto in = make_inputs(base, 77);
      AttnTensors ref, one;
      if (rank == 0) {
        ref = reference_attention(base, in, /*fp64=*/true);
        one = reference_attention(base, in, /*fp64=*/false);
      }
      const double want_flops =
          4.0 * double(brute_pairs(docs, causal, mask.window)) * base.heads * base.head_dim;
      struct Case {
        Strategy s;
        int C = 1, u = 1;
        bool ring_intra = false;
        int inner = 0;  // double ring: W
      };
      std::vector<Case> cases = {{Strategy::Ring}, {Strategy::Zigzag}, {Strategy::WallFacer}};
      if (base.kv_heads % P == 0) cases.push_back({Strategy::Ulysses});
      if (P >= 4) {
        cases.push_back({Strategy::WallFacer, 2});
        cases.push_back({Strategy::WallFacer, 2, 1, true});
        cases.push_back({Strategy::Ring, 1, 2});
        cases.push_back({Strategy::Zigzag, 1, 2});
      }
      for (int W = 2; W < P; W *= 2) cases.push_back({Strategy::DoubleRing, 1, 1, false, W});
      if (P == 2) cases.push_back({Strategy::DoubleRing, 1, 1, false, 1});
      if (P % 8 == 0) cases.push_back({Strategy::WallFacer, 2, 2});  // Ulysses 2 x WallFacer-2
      for (const Case& k : cases)
        for (Layout layout : {Layout::Strategy, Layout::Balanced}) {
          AttnConfig c = base;
          c.strategy = k.s;
          c.teams = k.C;
          c.ulysses = k.u;
          c.inner = k.inner;
          c.layout = layout;
          const std::string name = fmt::format(
              "{}{} C={} u={} W={} {} window {} {} layout, {} docs",
              k.ring_intra ? "ring-intra " : "", strategy_name(k.s), k.C, k.u, k.inner,
              causal ? "causal" : "full", mask.window, layout_name(layout), docs.size());
          auto group = world;
          if (k.ring_intra) {
            const auto device_of =
                plan::candidate_devices({k.s, k.C, k.u, plan::Placement::RingIntra, false}, P);
            group = world.split(0, plan::inverse_order(device_of)[size_t(rank)]);
          }
          double flops = 0;
          AttnStats st;
          // The random documents come from set_documents (the balanced layout: rows moved).
          const bool set_later = set == 2;
          const AttnTensors got = run(group, c, in, set_later, flops, st);
          ++configs;
          // The counters are the schedule's sums (hops no query needs are not made).
          const ScheduleTotals t = schedule_totals(make_schedule(c, P, group.rank()));
          check(st.p2p_bytes_fwd == t.p2p_bytes_fwd && st.p2p_bytes_bwd == t.p2p_bytes_bwd,
                fmt::format("{}: p2p bytes {} {}, the schedule sends {} {}", name, st.p2p_bytes_fwd,
                            st.p2p_bytes_bwd, t.p2p_bytes_fwd, t.p2p_bytes_bwd));
          check(flops == want_flops, fmt::format("{}: forward FLOPs {} of all ranks, the mask "
                                                 "keeps {}",
                                                 name, flops, want_flops));
          if (rank != 0) continue;
          const AttnErrors e = attention_errors(got, ref), e1 = attention_errors(got, one);
          check(e.within(tol), fmt::format("{}: against fp64 out {:.2e} lse {:.2e} dq {:.2e} dk "
                                           "{:.2e} dv {:.2e}",
                                           name, e.out, e.lse, e.dq, e.dk, e.dv));
          // With W = 1 every row sees only its own key: dQ and dK are exactly 0 and the fp32
          // results on both sides only rounding noise, which the fp64 check above bounds.
          check(mask.window == 1 || e1.within(tol2),
                fmt::format("{}: against one process out {:.2e} lse {:.2e} dq "
                            "{:.2e} dk {:.2e} dv {:.2e}",
                            name, e1.out, e1.lse, e1.dq, e1.dk, e1.dv));
        }
    }
  }

  // Bytes of a contiguous ring with a window, against their closed form (formula_totals; docs/
  // documents.md, "Sliding windows: bytes"): rank r's K,V block goes on to the last rank whose
  // queries see its keys (with W <= n = S/P rows: rank r + 1; rank P-1's: nowhere), and in the
  // backward K,V travel the same hops (grouped-query heads, 8 query and 2 kv, but the window
  // alone would choose them), dK,dV one hop behind and from there straight home.
  for (int64_t window : {S / P, S / (2 * P), S / P + 1, 3 * S / P + 5}) {
    if (window >= S) continue;
    AttnConfig c;
    c.seq = S;
    c.heads = 8;
    c.kv_heads = 2;
    c.head_dim = 16;
    c.causal = true;
    c.window = window;
    const auto in = make_inputs(c, 79);
    AttnStats st;
    double flops = 0;
    const AttnTensors got = run(world, c, in, false, flops, st);
    ++configs;
    const ScheduleTotals want = formula_totals(c, P, rank);
    check(st.p2p_bytes_fwd == want.p2p_bytes_fwd && st.p2p_bytes_bwd == want.p2p_bytes_bwd,
          fmt::format("ring window {}: p2p bytes fwd {} bwd {}, the formula gives {} {}", window,
                      st.p2p_bytes_fwd, st.p2p_bytes_bwd, want.p2p_bytes_fwd, want.p2p_bytes_bwd));
    if (rank == 0) {
      const AttnErrors e = attention_errors(got, reference_attention(c, in, /*fp64=*/true));
      check(e.within(tol), fmt::format("ring window {} (GQA): against fp64 out {:.2e} dq {:.2e} "
                                       "dk {:.2e}",
                                       window, e.out, e.dq, e.dk));
    }
  }
  double failed = failures;
  world.all_reduce_sum(&failed, 1);
  if (rank == 0)
    std::printf("%d configurations with documents and windows on %d ranks: %s\n", configs, P,
                failed > 0 ? "FAIL" : "ok");
  return failed > 0 ? 1 : 0;
}
