// wallfacer score: the mean next-token loss of token sequences under a checkpoint of a text model
// (GPT or Llama), computed across the ranks of the job with a sequence-parallel strategy.
//
// Each sequence of FILE (rows of a (batch, seq + 1) array, or one (seq + 1) array) is scored on
// its own, spread over all P ranks: inputs [:-1], targets [1:]. A seq that the layout cannot
// split (not a multiple of P, of 2P for zigzag, ...) is padded at the end with token 0 up to the
// next length the layout takes; the padded rows are computed and left out of the loss, and being
// last in a causal sequence they change no earlier row. The loss is the mean over the batch x seq
// targets of the cross-entropy (fp64 sum of the rows' fp32 losses).

#include <fmt/format.h>

#include <cmath>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>

#include "command.h"
#include "wallfacer/comm/communicator.h"
#include "wallfacer/core/error.h"
#include "wallfacer/core/npy.h"
#include "wallfacer/core/timer.h"
#include "wallfacer/model/gpt.h"
#include "wallfacer/plan/placement.h"
#include "wallfacer/plan/planner.h"
#include "wallfacer/train/checkpoint.h"
#include "wallfacer/train/config.h"
#include "wallfacer/train/dist_model.h"

namespace wallfacer::cli {
namespace {

struct ScoreArgs {
  std::string ckpt, tokens;
  std::string strategy = "ring";
  int teams = 1, ulysses = 1;
  std::string placement = "team-intra";
  std::string dtype = "fp32";
  bool json = false;
};

// The shortest length >= seq that cfg's layout splits over P ranks (cfg.seq set to it).
int64_t padded_length(train::TrainConfig& cfg, int64_t seq, int P) {
  std::string first_error;
  for (int64_t s = std::max<int64_t>(seq, 2); s <= seq + 64 * int64_t(P) * P; ++s) {
    cfg.seq = s;
    try {
      cfg.validate(P);
      return s;
    } catch (const UsageError& e) {
      if (first_error.empty()) first_error = e.what();
      // A problem that is not the length stays whatever the length.
      if (s > seq + 4 * int64_t(P) * P) break;
    }
  }
  throw UsageError(first_error);
}

int run_score(const ScoreArgs& a) {
  comm::MpiSession mpi(nullptr, nullptr);
  auto world = comm::Communicator::world();
  const int P = world.size();
  WF_USAGE_CHECK(!a.ckpt.empty(), "--ckpt DIR is required");
  WF_USAGE_CHECK(!a.tokens.empty(), "--tokens FILE.npy is required");
  std::string dir;
  train::TrainConfig cfg;
  std::vector<int64_t> shape, ids;
  world.agree([&] {
    dir = train::resolve_checkpoint(a.ckpt);
    cfg = train::TrainConfig::from_record(train::checkpoint_config(dir), dir);
    WF_USAGE_CHECK(cfg.kind == train::ModelKind::Gpt,
                   "'{}' is a DiT checkpoint; score takes a text model (GPT or Llama)", dir);
    ids = read_npy_ints(a.tokens, shape);
  });
  WF_USAGE_CHECK(shape.size() == 1 || shape.size() == 2,
                 "{}: shape ({}) ; give (batch, seq + 1) or (seq + 1) token ids", a.tokens,
                 fmt::join(shape, ", "));
  const int64_t B = shape.size() == 2 ? shape[0] : 1, L = shape.back();
  WF_USAGE_CHECK(B >= 1 && L >= 2, "{}: shape ({}): give at least one sequence of 2 or more ids",
                 a.tokens, fmt::join(shape, ", "));
  const int64_t V = cfg.model.vocab;
  for (size_t i = 0; i < ids.size(); ++i)
    WF_USAGE_CHECK(ids[i] >= 0 && ids[i] < V,
                   "{}: the id {} at index {} is outside the model's vocabulary [0, {})", a.tokens,
                   ids[i], i, V);
  const int64_t S = L - 1;
  // The run's layout: all ranks one sequence-parallel group, one sequence at a time.
  cfg.sp = P;
  cfg.batch = 1;
  cfg.packing = train::Packing::None;
  cfg.layout.reset();
  // The strategy options are score's flags, checked where they are parsed (the checkpoint's
  // parallel.inner is kept for a strategy with inner rings: its W belongs to them).
  const seqpar::Strategy strategy = seqpar::parse_strategy(a.strategy);
  cfg.parallel = {strategy, a.teams, seqpar::traits(strategy).has_inner ? cfg.parallel.inner : 0,
                  a.ulysses, false};
  seqpar::validate_parallel(cfg.parallel);
  cfg.checkpointing = model::Checkpointing::None;
  cfg.dtype = parse_dtype(a.dtype);
  const int64_t Sp = padded_length(cfg, S, P);
  // The placement: which world rank takes which rank of the layout.
  const plan::Candidate cand{cfg.parallel.strategy, cfg.team_size(), cfg.parallel.ulysses,
                             plan::parse_placement(a.placement), false};
  const std::vector<int> layout_rank = plan::inverse_order(plan::candidate_devices(cand, P));
  comm::Communicator group = world.split(0, layout_rank[size_t(world.rank())]);

  Timer timer;
  std::unique_ptr<train::DistGpt> run;
  world.agree([&] {
    run = std::make_unique<train::DistGpt>(cfg, group);
    const auto st = train::load_checkpoint(dir, world.rank(), P, run->model().num_params());
    std::copy(st.params.begin(), st.params.end(), run->model().params());
  });
  std::vector<int32_t> row(size_t(Sp + 1), 0);
  double sum = 0;
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t t = 0; t < L; ++t) row[size_t(t)] = int32_t(ids[size_t(b * L + t)]);
    sum += run->forward(row.data(), {}, S);
  }
  world.all_reduce_sum(&sum, 1);
  const double tokens = double(B) * double(S);
  const double loss = sum / tokens;
  const double seconds = timer.seconds();
  if (world.rank() == 0) {
    if (a.json) {
      const nlohmann::json j{{"loss", loss},
                             {"tokens", int64_t(tokens)},
                             {"perplexity", std::exp(loss)},
                             {"sequences", B},
                             {"seq", S},
                             {"padded_seq", Sp},
                             {"ranks", P},
                             {"strategy", a.strategy},
                             {"teams", cfg.parallel.teams},
                             {"ulysses", cfg.parallel.ulysses},
                             {"placement", a.placement},
                             {"dtype", a.dtype},
                             {"checkpoint", dir},
                             {"seconds", seconds}};
      std::printf("%s\n", j.dump().c_str());
    } else {
      std::printf(
          "loss %.6f (perplexity %.4f) over %lld tokens (%lld sequence%s of %lld%s) on %d rank%s, "
          "%s, %s, %.2f s\n",
          loss, std::exp(loss), (long long)tokens, (long long)B, B == 1 ? "" : "s", (long long)S,
          Sp != S ? fmt::format(", padded to {}", Sp).c_str() : "", P, P == 1 ? "" : "s",
          a.strategy.c_str(), a.dtype.c_str(), seconds);
    }
    std::fflush(stdout);
  }
  return 0;
}

Action setup(CLI::App& root) {
  auto a = std::make_shared<ScoreArgs>();
  auto* cmd = root.add_subcommand(
      "score",
      "Mean next-token loss of token sequences under a text-model checkpoint, across ranks: "
      "mpirun -np P wallfacer score --ckpt DIR --tokens FILE.npy");
  cmd->add_option("--ckpt", a->ckpt, "A run folder, a ckpt/ folder or a step-N checkpoint");
  cmd->add_option("--tokens", a->tokens,
                  "Token ids (.npy of integers): (batch, seq + 1) or (seq + 1); any seq (padded "
                  "at the end to what the layout takes, the padding left out of the loss)");
  // No --inner here: the strategies without inner rings.
  add_strategy_option(*cmd, a->strategy, {}, [](const seqpar::StrategyTraits& t) {
    return !t.has_inner;
  })->capture_default_str();
  cmd->add_option("--teams", a->teams, "WallFacer team size C (C^2 must divide P)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--ulysses", a->ulysses,
                  "Ulysses degree U of a Ulysses hybrid (with ring, zigzag or wallfacer)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--placement", a->placement, "team-intra | ring-intra (which ranks are near)")
      ->check(CLI::IsMember({"team-intra", "ring-intra"}))
      ->capture_default_str();
  cmd->add_option("--dtype", a->dtype, "fp32 | bf16 (products and activations)")
      ->check(CLI::IsMember({"fp32", "bf16"}))
      ->capture_default_str();
  cmd->add_flag("--json", a->json, "One JSON object: loss, tokens, perplexity, the layout");
  return [a]() { return run_score(*a); };
}

WALLFACER_COMMAND(45, "score", setup);

}  // namespace
}  // namespace wallfacer::cli
