// seqpar::dist_attention_memory, the memory estimate the trainer's check uses before it builds its
// attentions, against what an executor of the same schedule allocates (scratch) and against
// seqpar::kept_elements, the closed form of what keep_kv holds per forward (kept). Every strategy
// that runs on this many ranks, causal and full, with a window, grouped-query heads, batch 1 and 2,
// fp32 and bf16, on every rank.
// Usage: mpirun -np P test_attn_memory

#include <fmt/format.h>

#include <cstdio>
#include <string>
#include <vector>

#include "wallfacer/comm/communicator.h"
#include "wallfacer/core/error.h"
#include "wallfacer/seqpar/attention.h"
#include "wallfacer/seqpar/executor.h"
#include "wallfacer/seqpar/schedule.h"

using namespace wallfacer;
using namespace wallfacer::seqpar;

int main(int argc, char** argv) {
  comm::MpiSession session(&argc, &argv);
  auto world = comm::Communicator::world();
  const int P = world.size(), rank = world.rank();
  int failures = 0, configs = 0;
  struct Kind {
    Strategy strategy;
    int teams, ulysses;
    bool keep_kv;
    int inner = 0;
  };
  std::vector<Kind> kinds = {{Strategy::Ring, 1, 1, false},
                             {Strategy::Zigzag, 1, 1, false},
                             {Strategy::Ulysses, 1, 1, false}};
  if (P % 4 == 0) {
    kinds.push_back({Strategy::WallFacer, 2, 1, false});
    kinds.push_back({Strategy::WallFacer, 2, 1, true});
  }
  if (P % 2 == 0 && P > 2) kinds.push_back({Strategy::Ring, 1, 2, false});
  kinds.push_back({Strategy::DoubleRing, 1, 1, false, P % 2 == 0 ? 2 : 1});  // inner rings of 2
  if (P % 8 == 0) {  // Ulysses 2 x WallFacer-2
    kinds.push_back({Strategy::WallFacer, 2, 2, false});
    kinds.push_back({Strategy::WallFacer, 2, 2, true});
  }
  for (const Kind& k : kinds)
    for (const bool causal : {false, true})
      for (const int64_t window : {int64_t(0), int64_t(64)})
        for (const int kv_heads : {4, 2})
          for (const int batch : {1, 2})
            for (const Dtype dtype : {Dtype::fp32, Dtype::bf16}) {
              if (window > 0 && !causal) continue;
              const AttnConfig cfg{.strategy = k.strategy,
                                   .teams = k.teams,
                                   .inner = k.inner,
                                   .batch = batch,
                                   .seq = 512,
                                   .heads = 4,
                                   .kv_heads = kv_heads,
                                   .head_dim = 16,
                                   .causal = causal,
                                   .ulysses = k.ulysses,
                                   .keep_kv = k.keep_kv,
                                   .dtype = dtype,
                                   .doc_lengths = {},
                                   .layout = Layout::Strategy,
                                   .window = window};
              try {
                validate(cfg, P);
              } catch (const UsageError&) {
                continue;  // not runnable on P ranks (the same verdict on every rank)
              }
              ++configs;
              const DistAttentionMemory want = dist_attention_memory(cfg, P, rank);
              const Executor ex(make_schedule(cfg, P, rank), world);
              const int64_t kept = kept_elements(cfg, P) * (dtype == Dtype::bf16 ? 2 : 4);
              const std::string what = fmt::format(
                  "strategy {} C={} u={} keep_kv={} causal={} window={} kv_heads={} batch={} "
                  "{}: estimate scratch {} kept {}, executor {} and kept_elements {}",
                  int(k.strategy), k.teams, k.ulysses, k.keep_kv, causal, window, kv_heads, batch,
                  dtype_name(dtype), want.scratch, want.kept_per_forward, ex.scratch_bytes(), kept);
              if (want.scratch != ex.scratch_bytes() || want.kept_per_forward != kept ||
                  (want.scratch <= 0 && P > 1)) {
                ++failures;
                std::fprintf(stderr, "rank %d: FAIL %s\n", rank, what.c_str());
              } else if (rank == 0 && batch == 2 && dtype == Dtype::fp32 && kv_heads == 4) {
                std::printf("ok: %s\n", what.c_str());
              }
            }
  double bad = failures;
  world.all_reduce_sum(&bad, 1);
  if (rank == 0) std::printf("%d configs on %d ranks, %.0f failures\n", configs, P, bad);
  return bad == 0 ? 0 : 1;
}
