// wallfacer plan: predicts every sequence-parallel configuration of a model on a cluster from the
// seqpar schedules and ranks them by tokens/s.

#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>

#include "command.h"
#include "wallfacer/core/error.h"
#include "wallfacer/core/file.h"
#include "wallfacer/plan/planner.h"
#include "wallfacer/plan/predicted_trace.h"
#include "wallfacer/plan/report.h"

namespace wallfacer::cli {
namespace {

struct PlanOptions {
  std::string cluster, model, seq;
  int gpus = 0;
  bool json = false;
  bool exact = false;
  std::string trace, config;  // --trace FILE of the best or the --config labelled candidate
};

// Writes the predicted run of the best feasible prediction, or of the one labelled `label`.
void write_predicted_trace(const plan::PlanInput& in, const std::vector<plan::Prediction>& preds,
                           const std::string& label, const std::string& path) {
  const plan::Prediction* pick = nullptr;
  std::string labels;
  for (const auto& p : preds) {
    labels += fmt::format("{}'{}'", labels.empty() ? "" : ", ", p.cand.label());
    if (label.empty() ? p.feasible && !pick : p.cand.label() == label) pick = &p;
  }
  WF_USAGE_CHECK(pick || label.empty(), "--config '{}' is not a configuration of this plan ({})",
                 label, labels);
  WF_USAGE_CHECK(pick, "no feasible configuration to trace: name one with --config ({})", labels);
  try {
    write_file_atomic(path, plan::predicted_trace(in, pick->cand).dump() + "\n");
  } catch (const UsageError&) {
    throw;
  } catch (const std::exception& e) {
    throw UsageError(fmt::format("cannot write the trace file '{}': {}", path, e.what()));
  }
}

int run_plan(const PlanOptions& o) {
  WF_USAGE_CHECK(!o.cluster.empty() && !o.model.empty() && !o.seq.empty(),
                 "plan needs --cluster FILE, --model FILE and --seq N");
  WF_USAGE_CHECK(o.gpus >= 0, "--gpus is {}; give a positive number of devices (default: all)",
                 o.gpus);
  plan::PlanInput in;
  in.cluster = plan::load_cluster(o.cluster);
  in.model = plan::load_model(o.model);
  in.seq = plan::parse_tokens(o.seq);
  in.gpus = o.gpus > 0 ? o.gpus : in.cluster.devices();
  in.exact = o.exact;
  // A large group takes a while: say how far the search is, every few seconds, on stderr.
  const auto start = std::chrono::steady_clock::now();
  double last_report = 0;
  auto preds = plan::plan_all(in, [&](int done, int total) {
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (s - last_report < 5) return;
    last_report = s;
    fmt::print(stderr, "plan: {} of {} configurations predicted after {:.0f} s\n", done, total, s);
    std::fflush(stderr);
  });
  WF_USAGE_CHECK(o.config.empty() || !o.trace.empty(),
                 "--config names the configuration of --trace");
  if (!o.trace.empty()) write_predicted_trace(in, preds, o.config, o.trace);
  if (o.json) {
    fmt::print("{}\n", plan::plan_json(in, preds).dump(2));
  } else {
    fmt::print("{}", plan::plan_table(in, preds));
  }
  return 0;
}

Action setup(CLI::App& root) {
  auto o = std::make_shared<PlanOptions>();
  CLI::App* app = root.add_subcommand(
      "plan", "Predict and rank every sequence-parallel configuration of a model on a cluster");
  app->add_option("--cluster", o->cluster, "Cluster description (configs/clusters/*.toml)");
  app->add_option("--model", o->model, "Model description (configs/models/*.toml)");
  app->add_option("--seq", o->seq, "Tokens per sequence (e.g. 131072, 128K)");
  app->add_option("--gpus", o->gpus, "Devices in the sequence-parallel group (default: all)");
  app->add_flag("--json", o->json, "Print a JSON object with `configs` and `best`");
  app->add_flag("--exact", o->exact,
                "Simulate every rank (the reference; by default ranks that do the same work are "
                "simulated once)");
  app->add_option("--trace", o->trace,
                  "Write the predicted attention (one layer, forward and backward) of the best "
                  "configuration as a Chrome trace (docs/trace.md)");
  app->add_option("--config", o->config,
                  "With --trace: the configuration by its label in the table, e.g. "
                  "\"wallfacer C=2 team-intra\"");
  return [o] { return run_plan(*o); };
}

WALLFACER_COMMAND(60, "plan", setup);

}  // namespace
}  // namespace wallfacer::cli
