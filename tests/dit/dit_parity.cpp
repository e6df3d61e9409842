// DiT training on P ranks gives the losses of one rank: the reference runs alone on rank 0, then
// every strategy runs on the whole world (sp = P; also Ulysses 2 x ring) and with dp = 2. Exit code
// 1 on a mismatch.
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "wallfacer/comm/communicator.h"
#include "wallfacer/train/trainer.h"

using namespace wallfacer;

namespace {

train::TrainOptions options(const std::string& out) {
  train::TrainOptions o;
  auto& c = o.cfg;
  c.kind = train::ModelKind::Dit;
  c.frames = 2;
  c.size = 8;
  c.patch = 2;
  c.channels = 3;
  c.clips = 16;
  c.model.layers = 2;
  c.model.dim = 24;
  c.model.heads = 4;
  c.model.mlp_ratio = 2;
  c.freq_dim = 16;
  c.classes = 4;
  c.batch = 2;
  c.steps = 5;
  c.lr = 3e-3;
  c.min_lr = 3e-3;
  c.warmup = 0;
  c.eval_every = 5;
  c.derive();
  o.out_dir = out;
  o.progress = "none";
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  comm::MpiSession mpi(&argc, &argv);
  comm::Communicator world = comm::Communicator::world();
  const int P = world.size(), rank = world.rank();
  const std::string base = std::filesystem::temp_directory_path() /
                           ("wallfacer-dit-parity-" + std::to_string(::getpid() - rank));
  comm::Communicator self = world.split(rank, 0);
  std::vector<double> ref;
  if (rank == 0) ref = train::run_training(self, options(base + "/ref")).losses;
  world.barrier();

  struct Case {
    std::string strategy;
    int sp, teams, ulysses;
  };
  const std::vector<Case> cases = {{"wallfacer", P, 2, 1},
                                   {"ulysses", P, 1, 1},
                                   {"zigzag", P, 1, 1},
                                   {"ring", P / 2, 1, 1},
                                   {"ring", P, 1, 2}};  // Ulysses 2 x ring P/2
  int bad = 0;
  for (const auto& k : cases) {
    auto o =
        options(base + "/" + k.strategy + std::to_string(k.sp) + "u" + std::to_string(k.ulysses));
    o.cfg.parallel.strategy = seqpar::parse_strategy(k.strategy);
    o.cfg.sp = k.sp;
    o.cfg.parallel.teams = k.teams;
    o.cfg.parallel.ulysses = k.ulysses;
    const auto got = train::run_training(world, o).losses;
    if (rank != 0) continue;
    for (size_t i = 0; i < ref.size(); ++i) {
      const double err = std::abs(got[i] - ref[i]) / std::abs(ref[i]);
      std::printf("%-9s sp %d ulysses %d step %zu: loss %.6f  single rank %.6f  rel err %.1e\n",
                  k.strategy.c_str(), k.sp, k.ulysses, i + 1, got[i], ref[i], err);
      if (!(err <= 1e-4)) ++bad;
    }
  }
  // The loss must move: a run that does not train would match trivially.
  if (rank == 0 && !(ref.back() < ref.front())) {
    std::printf("loss did not fall: %.6f -> %.6f\n", ref.front(), ref.back());
    ++bad;
  }
  world.barrier();
  if (rank == 0) std::filesystem::remove_all(base);
  if (rank == 0) std::printf(bad ? "FAILED: %d mismatches\n" : "OK\n", bad);
  return bad ? 1 : 0;
}
