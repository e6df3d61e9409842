// wallfacer plan: predicts every sequence-parallel configuration of a model on a cluster from the
// seqpar schedules and ranks them by tokens/s.

#include <fmt/format.h>

#include <memory>
#include <nlohmann/json.hpp>

#include "command.h"
#include "wallfacer/core/error.h"
#include "wallfacer/plan/planner.h"
#include "wallfacer/plan/report.h"

namespace wallfacer::cli {
namespace {

struct PlanOptions {
  std::string cluster, model, seq;
  int gpus = 0;
  bool json = false;
};

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
  auto preds = plan::plan_all(in);
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
  return [o] { return run_plan(*o); };
}

WALLFACER_COMMAND(60, "plan", setup);

}  // namespace
}  // namespace wallfacer::cli
