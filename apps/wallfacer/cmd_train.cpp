// wallfacer train: GPT training with sequence parallelism (run under mpirun for P > 1).

#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>

#include "command.h"
#include "wallfacer/comm/communicator.h"
#include "wallfacer/core/error.h"
#include "wallfacer/train/trainer.h"

namespace wallfacer::cli {
namespace {

struct TrainArgs {
  std::string config;
  std::optional<int64_t> steps;
  std::string out = "runs/gpt";
  std::vector<std::string> sets;
  bool resume = false;
  bool overwrite = false;
  std::string progress = "auto";
  std::string trace;
  std::optional<int> check_ranks;
};

// --check-ranks P: whether the config (with --set and --steps) is valid on P ranks, and its layout
// there, as one JSON line on stdout; no MPI, no training. A config that does not parse (strategy
// options that contradict each other included: they are checked where it is parsed) is an error
// (exit 2); a layout that does not fit P ranks is {"valid": false, "error": "..."} with exit 0.
// scripts/wallfacer-elastic asks this when it picks the layout for the hosts that are left, and
// reads "timeout" (train.timeout, or --timeout when given): a job that writes nothing for that long
// is ended.
int check_ranks(const train::TrainConfig& cfg, int P) {
  nlohmann::json j{{"ranks", P},
                   {"valid", true},
                   {"dp", cfg.dp(P)},
                   {"sp", cfg.sp},
                   {"strategy", seqpar::strategy_name(cfg.parallel.strategy)},
                   {"teams", cfg.parallel.teams},
                   {"inner", cfg.parallel.inner},
                   {"ulysses", cfg.parallel.ulysses},
                   {"batch", cfg.batch},
                   {"timeout", timeout_option() ? *timeout_option() : cfg.timeout}};
  try {
    cfg.validate(P);
  } catch (const UsageError& e) {
    j["valid"] = false;
    j["error"] = e.what();
  }
  std::printf("%s\n", j.dump().c_str());
  return 0;
}

int run_train(const TrainArgs& a) {
  if (a.check_ranks) {
    WF_USAGE_CHECK(*a.check_ranks >= 1, "--check-ranks is {}; it must be at least 1",
                   *a.check_ranks);
    WF_USAGE_CHECK(!a.config.empty(), "--config FILE is required");
    auto cfg = train::TrainConfig::from_file(a.config, a.sets);
    if (a.steps) cfg.steps = *a.steps;
    return check_ranks(cfg, *a.check_ranks);
  }
  // MPI first: an error anywhere below, on any rank, ends the job with its message (main).
  int argc = 0;
  char** argv = nullptr;
  comm::MpiSession mpi(&argc, &argv);
  auto world = comm::Communicator::world();
  WF_USAGE_CHECK(!a.config.empty(), "--config FILE is required");
  train::TrainOptions opt;
  opt.cfg = train::TrainConfig::from_file(a.config, a.sets);
  if (a.steps) {
    WF_USAGE_CHECK(*a.steps >= 1, "--steps is {}; it must be at least 1", *a.steps);
    opt.cfg.steps = *a.steps;
  }
  if (timeout_option()) opt.cfg.timeout = *timeout_option();
  comm::set_timeout(opt.cfg.timeout);
  opt.out_dir = a.out;
  opt.resume = a.resume;
  opt.overwrite = a.overwrite;
  opt.progress = a.progress;
  opt.trace = a.trace;
  // The configuration is checked against the world's size first thing in run_training
  // (config_as_run), before any work: every rank reaches the same verdict.
  train::run_training(world, opt);
  return 0;
}

Action setup(CLI::App& root) {
  auto args = std::make_shared<TrainArgs>();
  auto* cmd = root.add_subcommand(
      "train", "Train a GPT with sequence parallelism: mpirun -np P wallfacer train --config FILE");
  cmd->add_option("--config", args->config, "TOML config, e.g. configs/gpt-kjv.toml (required)");
  cmd->add_option("--steps", args->steps, "Override train.steps");
  cmd->add_option("--out", args->out, "Output directory (metrics, checkpoints, plot)")
      ->capture_default_str();
  cmd->add_option("--set", args->sets, "Override a config key: --set section.key=value");
  cmd->add_flag("--resume", args->resume,
                "Continue from the newest checkpoint in --out that verifies");
  cmd->add_flag(
      "--overwrite", args->overwrite,
      "Start over in an --out that holds a run: remove its metrics, plot and checkpoints");
  cmd->add_option("--progress", args->progress, "auto | bar | plain | none")
      ->check(CLI::IsMember({"auto", "bar", "plain", "none"}))
      ->capture_default_str();
  cmd->add_option("--trace", args->trace,
                  "Write a Chrome trace of the steps train.trace_steps (default: all) to "
                  "FILE.json (docs/trace.md)");
  cmd->add_option("--check-ranks", args->check_ranks,
                  "Print whether the config is valid on P ranks and its layout there (JSON), "
                  "then exit without training");
  return [args]() { return run_train(*args); };
}

WALLFACER_COMMAND(30, "train", setup);

}  // namespace
}  // namespace wallfacer::cli
