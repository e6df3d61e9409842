// wallfacer tune: the options and the output of tune/tune.h, which runs the best predicted
// configurations on this machine to compare the measurement with the prediction; `--calibrate`
// measures this machine's kernel and link rates into a cluster file.

#include <fmt/format.h>

#include <cmath>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "command.h"
#include "wallfacer/comm/communicator.h"
#include "wallfacer/comm/link_probe.h"
#include "wallfacer/comm/topology.h"
#include "wallfacer/core/error.h"
#include "wallfacer/core/file.h"
#include "wallfacer/plan/calibrate.h"
#include "wallfacer/plan/planner.h"
#include "wallfacer/plan/report.h"
#include "wallfacer/tune/tune.h"

namespace wallfacer::cli {
namespace {

struct TuneOptions {
  std::string model, cluster = "configs/clusters/local.toml", seq, out;
  int top = 3, iters = 3, steps = 3;
  bool calibrate = false, json = false, topology = false;
};

void print_link(const std::string& what, const plan::Link& link, const comm::LinkSamples& s) {
  fmt::print("  {}: latency {:.2f} us, bandwidth {:.3f} GB/s\n", what, link.latency * 1e6,
             link.bandwidth / 1e9);
  for (size_t i = 0; i < s.bytes.size(); ++i)
    fmt::print("    {:>10.0f} B  {:>12.2f} us  (fit {:>12.2f} us)\n", s.bytes[i],
               s.seconds[i] * 1e6, link.time(s.bytes[i]) * 1e6);
}

int run_calibrate(const TuneOptions& o, comm::Communicator& world) {
  const int P = world.size(), rank = world.rank();
  const std::string out = o.out.empty() ? "configs/clusters/local.toml" : o.out;
  // Rank 0 writes --out: a folder that does not exist is found before the measurements.
  world.agree([&] {
    if (rank == 0) check_output_folder(out, "--out");
  });
  WF_USAGE_CHECK(P >= 2,
                 "tune --calibrate measures links between ranks: run it under "
                 "`mpirun -np 2` (or more)");
  const tune::Calibration cal = tune::calibrate(world);
  if (rank == 0) {
    const comm::Topology& topo = cal.topo;
    const plan::Cluster& c = cal.cluster;
    const int per_node = topo.max_ranks_per_node();
    const int other_node = cal.other_node;
    fmt::print("calibration ({} ranks, {} thread(s) each):\n", P, cal.threads);
    fmt::print("  sgemm {}x{}x{}: {:.2f} GFLOP/s per rank (the slowest rank)\n", cal.gemm_n,
               cal.gemm_c, cal.gemm_oc, cal.gemm_flops / 1e9);
    for (const tune::AttnRates& r : cal.attention)
      fmt::print(
          "  flash attention 1024x1024, 4 heads x {:>3}: fwd {:6.1f} ms = {:6.2f}, "
          "bwd {:6.1f} ms = {:6.2f}, fwd+bwd {:6.2f} GFLOP/s per rank (the slowest)\n",
          r.head_dim, r.fwd_s * 1e3, r.fwd / 1e9, r.bwd_s * 1e3, r.bwd / 1e9, r.both / 1e9);
    fmt::print("  kernel tile {}x{} (query x key rows)\n", cal.tile_q, cal.tile_k);
    fmt::print("  {} node(s) of up to {} rank(s)\n", topo.nodes(), per_node);
    if (cal.has_intra)
      print_link("inside a node, ping-pong rank 0 <-> 1", cal.intra, cal.intra_samples);
    if (other_node < P) {
      print_link(fmt::format("between nodes, ping-pong rank 0 <-> {}", other_node), cal.inter,
                 cal.inter_samples);
      fmt::print(
          "  card of node 0: one rank sends {:.2f} MB/s to node 1, {} ranks at once {:.2f} MB/s "
          "together: {} device(s) per card; inside a node / between nodes: {:.1f}x\n",
          cal.share.alone / 1e6, cal.share.transfers, cal.share.together / 1e6, c.devices_per_nic,
          cal.has_intra ? cal.intra.bandwidth / cal.inter.bandwidth : 1.0);
    }
    if (other_node < P)
      fmt::print(
          "  between nodes, a card streams {:.2f} MB/s (4 MB messages alone; the ping-pong's "
          "fit: {:.2f}): the cluster's bandwidth between nodes is the lower\n",
          c.inter.bandwidth / 1e6, cal.inter.bandwidth / 1e6);
    if (cal.team_size > 0)
      fmt::print(
          "  teams of {} ranks on {} nodes, every team at once: all-gather then reduce-scatter of "
          "{} KB per rank, {:.1f} + {:.1f} ms (mean of {} rounds); the planner's model gives "
          "{:.1f} ms with full duplex cards, {:.1f} ms where an exchange both ways takes all of "
          "the other direction: {}\n",
          cal.team_size, cal.team_size, cal.team_floats * sizeof(float) / 1024,
          cal.team_allgather_s * 1e3, cal.team_reduce_scatter_s * 1e3, cal.team_rounds,
          cal.team_predicted_full_duplex_s * 1e3, cal.team_predicted_shared_s * 1e3,
          c.inter_shared_duplex
              ? fmt::format("the directions share the cards, duplex_sharing = {:.2f}",
                            c.inter_duplex_sharing)
              : std::string("the cards are full duplex"));
    if (cal.pair.transfers >= 2)
      fmt::print(
          "  pairs of nodes: rank 0 sends {:.2f} MB/s to node 1 alone, {:.2f} MB/s to {} nodes at "
          "once: {}\n",
          cal.pair.alone / 1e6, cal.pair.together / 1e6, cal.pair.transfers,
          plan::pair_capped(cal.pair.transfers, cal.pair.alone, cal.pair.together)
              ? fmt::format("traffic between two nodes is capped at {:.2f} MB/s, the "
                            "card carries at least {:.2f}",
                            c.inter_pair_bandwidth / 1e6, c.inter.bandwidth / 1e6)
              : std::string("no cap below the card's"));
    const double off = cal.allgather_error();
    fmt::print(
        "  all-gather 1 MB per rank over {} ranks: {:.3f} ms measured, {:.3f} ms "
        "predicted by the planner's model ({:+.0f}%)\n",
        P, cal.allgather_s * 1e3, cal.allgather_predicted_s * 1e3, 100 * off);
    if (std::abs(off) > tune::kCheckTolerance)
      fmt::print(
          "  warning: the all-gather is {:.0f}% off the prediction (more than {:.0f}%): the "
          "planner's times for collectives on this machine are off as much\n",
          100 * std::abs(off), 100 * tune::kCheckTolerance);
    tune::write_cluster_file(c, P, out);
    fmt::print("wrote {}\n", out);
  }
  world.barrier();
  return 0;
}

int run_tune(const TuneOptions& o, comm::Communicator& world) {
  const int P = world.size(), rank = world.rank();
  WF_USAGE_CHECK(!o.model.empty() && !o.seq.empty(),
                 "tune needs --model FILE and --seq N (or --calibrate)");
  WF_USAGE_CHECK(o.top >= 1 && o.iters >= 1, "--top and --iters must be at least 1");
  WF_USAGE_CHECK(o.steps >= 0, "--steps must be 0 (attention only) or more");
  plan::PlanInput input;
  input.cluster = plan::load_cluster(o.cluster);
  input.model = plan::load_model(o.model);
  input.seq = plan::parse_tokens(o.seq);
  const tune::TuneResult t = tune::tune(input, o.top, o.iters, o.steps, world);
  if (rank != 0) {
    world.barrier();
    return 0;
  }
  const plan::PlanInput& in = t.in;
  const comm::Topology& topo = t.topo;
  const bool steps = t.steps;
  const std::vector<tune::Measured>& results = t.results;
  const tune::Measured* best = &results[t.best];

  nlohmann::json j;
  j["model"] = in.model.name;
  j["cluster"] = in.cluster.name;
  j["seq"] = in.seq;
  j["P"] = P;
  j["nodes"] = topo.nodes();
  j["measured"] = "attention forward + backward of one layer (seqpar::DistAttention)";
  j["training_steps"] = steps ? o.steps : 0;
  j["configs"] = nlohmann::json::array();
  for (const auto& r : results) {
    nlohmann::json c = plan::prediction_json(r.pred);
    c["predicted_ms"] = {{"fwd", r.attn.fwd_s * 1e3}, {"bwd", r.attn.bwd_s * 1e3}};
    c["measured_ms"] = {{"fwd", r.fwd_ms}, {"bwd", r.bwd_ms}};
    c["measured_iteration_ms"] = r.iteration_ms;
    c["measured_exposed_comm_ms"] = {{"fwd", r.exposed_fwd_ms}, {"bwd", r.exposed_bwd_ms}};
    c["predicted_exposed_comm_ms"] = {{"fwd", r.attn.exposed_fwd_s * 1e3},
                                      {"bwd", r.attn.exposed_bwd_s * 1e3}};
    c["error"] = r.predicted_ms() / r.measured_ms() - 1;
    if (r.step_ms > 0) {
      c["predicted_step_ms"] = r.pred.step_s * 1e3;
      c["measured_step_ms"] = r.step_ms;
      c["step_error"] = r.pred.step_s * 1e3 / r.step_ms - 1;
    }
    j["configs"].push_back(c);
  }
  j["winner"] = best->pred.cand.label();

  const std::string out = o.out.empty() ? "tuned.toml" : o.out;
  tune::write_tuned_config(t, out);
  j["snippet"] = out;

  if (o.json) {
    fmt::print("{}\n", j.dump(2));
  } else {
    fmt::print(
        "{} at seq {} on {} ranks ({} node(s)), cluster '{}'; measured: attention forward + "
        "backward of one layer (seqpar::DistAttention), median of {} iterations\n",
        in.model.name, in.seq, P, topo.nodes(), in.cluster.name, o.iters);
    fmt::print("{:<26} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10} {:>8}\n", "configuration",
               "pred fwd", "meas fwd", "pred bwd", "meas bwd", "pred ms", "meas ms", "error");
    for (const auto& r : results)
      fmt::print("{:<26} {:>10.2f} {:>10.2f} {:>10.2f} {:>10.2f} {:>10.2f} {:>10.2f} {:>+7.1f}%\n",
                 r.pred.cand.label(), r.attn.fwd_s * 1e3, r.fwd_ms, r.attn.bwd_s * 1e3, r.bwd_ms,
                 r.predicted_ms(), r.measured_ms(), 100 * (r.predicted_ms() / r.measured_ms() - 1));
    if (steps) {
      fmt::print("training step ({} steps after one warm-up, random tokens, no evaluation):\n",
                 o.steps);
      fmt::print("{:<26} {:>12} {:>12} {:>8} {:>14}\n", "configuration", "pred step ms",
                 "meas step ms", "error", "meas tokens/s");
      for (const auto& r : results)
        fmt::print("{:<26} {:>12.1f} {:>12.1f} {:>+7.1f}% {:>14.0f}\n", r.pred.cand.label(),
                   r.pred.step_s * 1e3, r.step_ms, 100 * (r.pred.step_s * 1e3 / r.step_ms - 1),
                   double(in.model.batch) * double(in.seq) / (r.step_ms / 1e3));
    } else if (o.steps > 0) {
      fmt::print("training steps: not run (tune trains causal GPT models; this model is {})\n",
                 in.model.kind == plan::ModelKind::Dit ? "a DiT" : "not causal");
    }
    fmt::print("winner: {} -> {}\n", best->pred.cand.label(), out);
  }
  std::fflush(stdout);
  world.barrier();
  return 0;
}

int run_topology(comm::Communicator& world) {
  const comm::Topology t = comm::discover_topology();
  if (world.rank() == 0) {
    nlohmann::json j;
    j["ranks"] = world.size();
    j["nodes"] = t.nodes();
    j["node_of"] = t.node_of;
    j["pretended"] = t.pretended;
    fmt::print("{}\n", j.dump());
    std::fflush(stdout);
  }
  world.barrier();
  return 0;
}

int run(const TuneOptions& o) {
  comm::MpiSession session(nullptr, nullptr);
  auto world = comm::Communicator::world();
  if (o.topology) return run_topology(world);
  return o.calibrate ? run_calibrate(o, world) : run_tune(o, world);
}

Action setup(CLI::App& root) {
  auto o = std::make_shared<TuneOptions>();
  CLI::App* app = root.add_subcommand(
      "tune",
      "Run the best predicted configurations here and compare with the prediction "
      "(under mpirun); --calibrate measures this machine into a cluster file");
  app->add_option("--model", o->model, "Model description (configs/models/*.toml)");
  app->add_option("--seq", o->seq, "Tokens per sequence (e.g. 8192, 8K)");
  app->add_option("--top", o->top, "How many of the best predicted configurations to run")
      ->capture_default_str();
  app->add_option("--iters", o->iters, "Timed iterations per configuration")->capture_default_str();
  app->add_option("--steps", o->steps,
                  "Training steps per configuration, timed after one warm-up step (causal GPT "
                  "models; 0: attention only)")
      ->capture_default_str();
  app->add_option("--cluster", o->cluster, "Cluster file of this machine")->capture_default_str();
  app->add_option("--out", o->out,
                  "Where to write: the winner's config snippet (default tuned.toml), or with "
                  "--calibrate the cluster file (default configs/clusters/local.toml)");
  app->add_flag("--calibrate", o->calibrate, "Measure kernel and link rates into a cluster file");
  app->add_flag("--json", o->json, "Print the comparison as JSON");
  app->add_flag("--topology", o->topology, "Print the node of every rank as JSON and exit");
  return [o] { return run(*o); };
}

WALLFACER_COMMAND(70, "tune", setup);

}  // namespace
}  // namespace wallfacer::cli
