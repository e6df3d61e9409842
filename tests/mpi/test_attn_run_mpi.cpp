// seqpar::AttnRun, the run behind `wallfacer attn`, on the ranks of one mpirun launch: WallFacer
// C = 2 (causal, GQA, two iterations) with the ranks in reversed order, --check, --dump and a
// trace. Checked against independent references: the layout rank each process is given, the
// schedules' bytes summed without running them, the seeded inputs and the fp64 reference of the
// whole sequence against the dumped files, and the trace file's metadata.
// Usage: mpirun -np 4 test_attn_run_mpi DIR

#include <fmt/format.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "mpi_check.h"
#include "wallfacer/comm/communicator.h"
#include "wallfacer/core/file.h"
#include "wallfacer/core/npy.h"
#include "wallfacer/seqpar/attn_run.h"
#include "wallfacer/seqpar/harness.h"

using namespace wallfacer;
using namespace wallfacer::seqpar;
using testing::check;

namespace {

std::vector<float> load(const std::string& dir, const char* name) {
  std::vector<int64_t> shape;
  return read_npy(dir + "/" + name, shape);
}

// Rank 0: the dumped files against the seeded inputs and the fp64 reference, and the check's
// reported errors against those of the dumped outputs.
void check_dump(const AttnConfig& cfg, uint64_t seed, const std::string& dump, const AttnCheck& c) {
  const AttnTensors in = make_inputs(cfg, seed);
  check(load(dump, "q.npy") == in.q && load(dump, "k.npy") == in.k && load(dump, "v.npy") == in.v &&
            load(dump, "do.npy") == in.dout,
        "dumped inputs are the seeded inputs");
  AttnTensors got;
  got.o = load(dump, "o.npy");
  got.lse = load(dump, "lse.npy");
  got.dq = load(dump, "dq.npy");
  got.dk = load(dump, "dk.npy");
  got.dv = load(dump, "dv.npy");
  const AttnErrors e = attention_errors(got, reference_attention(cfg, in, true));
  check(e.within(AttnTolerance{}), fmt::format("dumped outputs against the fp64 reference: out "
                                               "{:.2e} lse {:.2e} dq {:.2e} dk {:.2e} dv {:.2e}",
                                               e.out, e.lse, e.dq, e.dk, e.dv));
  check(c.checked && c.fp64 && c.errors.out == e.out && c.errors.lse == e.lse &&
            c.errors.dq == e.dq && c.errors.dk == e.dk && c.errors.dv == e.dv,
        "the check reports the errors of the outputs it dumped");
}

void check_trace(const std::string& path) {
  const auto j = nlohmann::json::parse(read_file(path));
  check(j["otherData"]["command"] == "attn-run-test", "trace metadata is the caller's");
  check(!j["traceEvents"].empty(), "trace has events");
}

}  // namespace

int main(int argc, char** argv) {
  const std::string dir = argc > 1 ? argv[1] : ".";
  AttnConfig cfg;
  cfg.strategy = Strategy::WallFacer;
  cfg.teams = 2;
  cfg.causal = true;
  cfg.seq = 64;
  cfg.heads = 4;
  cfg.kv_heads = 2;
  cfg.head_dim = 8;
  AttnRunOptions opts;
  opts.seed = 7;
  opts.iters = 2;
  opts.check = true;
  opts.dump = dir + "/attn_run_mpi.dump";
  opts.trace = dir + "/attn_run_mpi.trace.json";
  AttnRun run(cfg, opts);
  auto world = comm::Communicator::world();
  const int P = run.ranks(), me = world.rank();
  check(P == world.size(), "ranks() is the world's size");
  std::vector<int> layout_rank_of(size_t(P), 0);
  for (int w = 0; w < P; ++w) layout_rank_of[size_t(w)] = P - 1 - w;
  run.place(layout_rank_of);
  check(run.rank() == P - 1 - me, fmt::format("world rank {} runs layout rank {}", me, run.rank()));
  check(std::filesystem::is_directory(opts.dump), "the dump folder exists after place()");

  run.iterate();
  const RunSummary sum = run.summarize();
  const ScheduleTotals worst = summarize_schedules(cfg, P).worst;
  check(sum.p2p_bytes_fwd == worst.p2p_bytes_fwd && sum.p2p_bytes_bwd == worst.p2p_bytes_bwd &&
            sum.coll_bytes_fwd == worst.coll_bytes_fwd &&
            sum.coll_bytes_bwd == worst.coll_bytes_bwd &&
            sum.p2p_steps_fwd == worst.p2p_steps_fwd && sum.p2p_steps_bwd == worst.p2p_steps_bwd,
        "measured bytes and steps are the schedules'");
  check(sum.fwd_ms > 0 && sum.bwd_ms > 0, "times measured");

  run.write_trace({{"command", "attn-run-test"}});
  const AttnCheck c = run.check_and_dump();
  check(c.pass, "the check passes on every rank");
  if (run.rank() == 0) {  // layout rank 0 checks and writes
    check_dump(cfg, opts.seed, opts.dump, c);
    check_trace(opts.trace);
  } else {
    check(!c.checked, "only rank 0 holds the check's errors");
  }
  run.finish();
  const int rc = testing::finish(world, fmt::format("AttnRun on {} ranks", P));
  if (me == 0) {
    std::error_code ec;
    std::filesystem::remove_all(opts.dump, ec);
    std::filesystem::remove(opts.trace, ec);
  }
  return rc;
}
