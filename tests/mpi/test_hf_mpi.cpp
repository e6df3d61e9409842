// Llama-family models imported from the transformers fixtures of tests/golden/hf, spread over the
// ranks of one sequence-parallel group as training spreads them (train::DistGpt): for every
// fixture and every strategy that fits the ranks (ring, zigzag, Ulysses, WallFacer C = 2, Ulysses
// x zigzag; llama-docs with its packed documents in the balanced layout and the strategy's), the
// logits gathered from the ranks and the loss within 1e-5 of transformers', every gradient
// (all-reduced over the ranks) within 1e-4, relative to the largest value (per tensor for the
// gradients). Layouts a rank count cannot hold are skipped and named: WallFacer C = 2 needs 4
// ranks, Ulysses alone needs the 2 kv heads divisible by P. Argument: nothing (every fixture), or
// one fixture's name.
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "../unit/hf_fixture.h"
#include "mpi_check.h"
#include "wallfacer/comm/communicator.h"
#include "wallfacer/core/error.h"
#include "wallfacer/train/config.h"
#include "wallfacer/train/dist_model.h"

using namespace wallfacer;

namespace {

struct Layout {
  std::string name;
  std::vector<std::string> sets;  // TrainConfig::set assignments
};

std::vector<Layout> layouts(int P) {
  std::vector<Layout> l = {{"ring", {"parallel.strategy=ring"}},
                           {"zigzag", {"parallel.strategy=zigzag"}},
                           {"ulysses", {"parallel.strategy=ulysses"}}};
  if (P >= 2) l.push_back({"wallfacer C=2", {"parallel.strategy=wallfacer", "parallel.teams=2"}});
  if (P >= 4)
    l.push_back({"ulysses 2 x zigzag", {"parallel.strategy=zigzag", "parallel.ulysses=2"}});
  return l;
}

}  // namespace

int main(int argc, char** argv) {
  comm::MpiSession session(&argc, &argv);
  auto world = comm::Communicator::world();
  const int P = world.size(), rank = world.rank();
  std::vector<std::string> names;
  if (argc > 1) {
    names.push_back(argv[1]);
  } else {
    for (const char* n : testing::kHfFixtures) names.push_back(n);
  }
  int runs = 0;
  for (const std::string& name : names) {
    const testing::HfFixture f = testing::load_hf_fixture(name);
    const int B = f.batch;
    const int64_t S = f.seq;
    const int V = f.model.vocab;
    const bool docs = !f.doc_lengths.empty();
    for (const Layout& lay : layouts(P)) {
      for (const char* layout :
           docs ? std::vector<const char*>{"balanced", "strategy"} : std::vector<const char*>{""}) {
        train::TrainConfig cfg;
        cfg.model = f.model;
        cfg.seq = S;
        cfg.batch = B;
        cfg.sp = P;
        cfg.dtype = Dtype::fp32;
        for (const auto& s : lay.sets) cfg.set(s);
        if (docs) {
          cfg.set("train.packing=documents");
          cfg.set(std::string("parallel.layout=") + layout);
        }
        const std::string what =
            fmt::format("{} P={} {}{}{}", name, P, lay.name, docs ? ", layout " : "", layout);
        try {
          cfg.validate(P);
        } catch (const UsageError& e) {
          // Only what the layout cannot hold: WallFacer C = 2 on fewer than C^2 ranks, Ulysses
          // with fewer kv heads (2) than ranks (the hybrid covers P = 4).
          const bool cannot = (lay.name == "wallfacer C=2" && P < 4) ||
                              (lay.name == "ulysses" && f.model.kv_heads % P != 0);
          testing::check(cannot, fmt::format("{}: refused: {}", what, e.what()));
          if (rank == 0) std::printf("skip %s: %s\n", what.c_str(), e.what());
          continue;
        }
        train::DistGpt run(cfg, world);
        std::copy(f.params.begin(), f.params.end(), run.model().params());
        double loss = run.forward(f.tokens.data(), f.doc_lengths, S);
        // Each rank's rows into the whole logits; the others' are zero, the sum gathers them.
        std::vector<float> logits(size_t(B) * S * V, 0.0f);
        const auto& pos = run.row_positions();
        const float* mine = run.model().logits();
        for (size_t n = 0; n < pos.size(); ++n) {
          const int64_t b = int64_t(n) / run.rows();
          std::copy_n(mine + n * size_t(V), V, logits.data() + (b * S + pos[n]) * V);
        }
        world.all_reduce_sum(logits.data(), int64_t(logits.size()));
        world.all_reduce_sum(&loss, 1);
        loss /= double(B) * double(S);
        run.model().zero_grads();
        run.model().backward(float(1.0 / (double(B) * double(S))));
        const int64_t n = run.model().num_params();
        world.all_reduce_sum(run.model().grads(), n);
        const double le =
            testing::rel_error(logits.data(), f.logits.data(), int64_t(logits.size()));
        const double lo = std::fabs(loss - f.loss) / f.loss;
        std::string worst;
        const double ge =
            testing::hf_tensors_error(f, run.model().grads(), f.dir + "/grads.safetensors", &worst);
        testing::check(le <= 1e-5, fmt::format("{}: logits {:.3g}", what, le));
        testing::check(lo <= 1e-5, fmt::format("{}: loss {} vs {}", what, loss, f.loss));
        testing::check(ge <= 1e-4, fmt::format("{}: gradient of {} {:.3g}", what, worst, ge));
        if (rank == 0)
          std::printf("%s: logits %.2e, loss %.2e, gradients %.2e (%s)\n", what.c_str(), le, lo, ge,
                      worst.c_str());
        ++runs;
      }
    }
  }
  return testing::finish(world, fmt::format("{} fixture runs on {} ranks", runs, P));
}
