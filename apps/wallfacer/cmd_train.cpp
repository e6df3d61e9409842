// wallfacer train: GPT training with sequence parallelism (run under mpirun for P > 1).

#include <memory>
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
};

int run_train(const TrainArgs& a) {
  // MPI first: an error anywhere below, on any rank, ends the job with its message (main).
  int argc = 0;
  char** argv = nullptr;
  comm::MpiSession mpi(&argc, &argv);
  auto world = comm::Communicator::world();
  WF_USAGE_CHECK(!a.config.empty(), "--config FILE is required");
  train::TrainOptions opt;
  opt.cfg = train::TrainConfig::from_file(a.config);
  for (const auto& s : a.sets) opt.cfg.set(s);
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
  opt.cfg.validate(world.size());  // before any work: every rank reaches the same verdict
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
  return [args]() { return run_train(*args); };
}

WALLFACER_COMMAND(30, "train", setup);

}  // namespace
}  // namespace wallfacer::cli
