// wallfacer attn: distributed exact attention, forward and backward, on seeded random inputs.
//   mpirun -np P wallfacer attn --strategy {ring,zigzag,ulysses,wallfacer,double-ring}
//     [--teams C] [--inner W] [--ulysses U] [--placement {team-intra,ring-intra}] --seq N
//     [--batch B] --heads H [--kv-heads Hkv] --head-dim D [--causal] [--dtype {fp32,bf16}]
//     [--docs L1,L2,... | --docs-random N] [--layout {strategy,balanced}] [--window W]
//     [--check] [--iters K]
//     [--json] [--dump DIR] [--trace FILE.json]

#include <algorithm>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>

#include "command.h"
#include "wallfacer/core/error.h"
#include "wallfacer/kernels/doc_mask.h"
#include "wallfacer/plan/planner.h"
#include "wallfacer/plan/report.h"
#include "wallfacer/seqpar/attn_run.h"
#include "wallfacer/seqpar/doc_layout.h"
#include "wallfacer/seqpar/harness.h"

namespace wallfacer::cli {
namespace {

struct AttnOptions {
  std::string strategy = "ring";
  int teams = 1;
  int inner = 0;  // double ring's W; 0: the ranks per node (with --count: --node-size, or P)
  int ulysses = 1;
  std::string placement = "team-intra";
  int node_size = 0;    // with --count: ranks per node, for the inter-node bytes
  std::string cluster;  // a cluster file: the planner's prediction beside the measurement
  int64_t seq = 0;
  int batch = 1;
  int heads = 0;
  int kv_heads = 0;
  int head_dim = 0;
  bool causal = false;
  bool keep_kv = false;
  std::string dtype = "fp32";
  bool check = false;
  bool json = false;
  int iters = 1;
  std::string dump;
  uint64_t seed = 1;
  std::vector<int64_t> docs;  // document lengths (--docs)
  int64_t docs_random = 0;    // number of random documents (--docs-random)
  std::string layout = "strategy";
  int64_t window = 0;  // sliding window (--window; 0: none)
  int count = 0;       // > 0: count the schedule of this many ranks, run nothing
  int64_t progress_rows = 256;
  std::string trace;  // Chrome trace file of the iterations
};

// "ring", "double-ring W=4", or "ulysses2 x zigzag" for a hybrid.
std::string label(const seqpar::AttnConfig& cfg) {
  const std::string s = fmt::format("{}{}{}", seqpar::strategy_name(cfg.strategy),
                                    cfg.inner > 0 ? fmt::format(" W={}", cfg.inner) : "",
                                    cfg.keep_kv ? " keep-kv" : "");
  return cfg.ulysses > 1 ? "ulysses" + std::to_string(cfg.ulysses) + " x " + s : s;
}

// The candidate (strategy, C, Ulysses degree, placement) that cfg runs.
plan::Candidate candidate(const seqpar::AttnConfig& cfg, plan::Placement placement) {
  return {cfg.strategy, seqpar::team_size(cfg), cfg.ulysses, placement, cfg.keep_kv};
}

// The bytes that cross nodes per forward and backward, as the schedules send them: layout rank ->
// world rank by the placement, world rank -> node by `node_of`.
nlohmann::json inter_node_json(const seqpar::AttnConfig& cfg, int P, plan::Placement placement,
                               const std::vector<int>& node_of) {
  const std::vector<int> device_of = plan::candidate_devices(candidate(cfg, placement), P);
  std::vector<int> node_of_layout(static_cast<size_t>(P));
  for (int r = 0; r < P; ++r) node_of_layout[size_t(r)] = node_of[size_t(device_of[size_t(r)])];
  const plan::NodeBytes nb = plan::node_bytes(cfg, P, node_of_layout);
  std::vector<int64_t> per_node;
  for (size_t i = 0; i < nb.fwd.size(); ++i) per_node.push_back(int64_t(nb.fwd[i] + nb.bwd[i]));
  return {{"nodes", int(nb.fwd.size())},
          {"fwd", int64_t(nb.total_fwd)},
          {"bwd", int64_t(nb.total_bwd)},
          {"per_node", per_node}};
}

// The planner's forward and backward times of cfg on `cl`, world rank i on device i (nodes of the
// cluster's devices_per_node consecutive devices), and the bytes each card of each node sends and
// receives in one forward and backward (the cluster's devices_per_nic devices per card).
nlohmann::json predicted_json(const plan::Cluster& cl, const seqpar::AttnConfig& cfg, int P,
                              plan::Placement placement) {
  const std::vector<int> device_of = plan::candidate_devices(candidate(cfg, placement), P);
  const plan::AttentionPrediction pr = plan::predict_attention(cl, cfg, P, device_of);
  const plan::CardBytes cards =
      plan::card_bytes(cfg, P, device_of, cl.devices_per_node, cl.devices_per_nic);
  return {{"predicted_ms", {{"fwd", pr.fwd_s * 1e3}, {"bwd", pr.bwd_s * 1e3}}},
          {"predicted_exposed_comm_ms",
           {{"fwd", pr.exposed_fwd_s * 1e3}, {"bwd", pr.exposed_bwd_s * 1e3}}},
          {"card_bytes",
           {{"cards_per_node", cl.devices_per_node / cl.devices_per_nic},
            {"sent", cards.sent},
            {"received", cards.received}}}};
}

// What the output says of a window of the whole sequence or more.
std::string window_note(int64_t window, int64_t seq) {
  return "window " + std::to_string(window) + " >= seq " + std::to_string(seq) +
         ": the full causal mask, run as --causal alone";
}

// The config as the JSON output names it: the planner's description, the dtype, the layout and
// the documents (count, longest, and the fraction of the mask's pairs they keep).
// `asked_window`: the --window given (a window of the sequence or more runs as the causal mask).
nlohmann::json describe(const seqpar::AttnConfig& cfg, int P, plan::Placement placement,
                        int64_t asked_window) {
  nlohmann::json j = plan::describe_config(cfg, P, placement);
  j["dtype"] = seqpar::dtype_name(cfg.dtype);
  j["layout"] = seqpar::layout_name(cfg.layout);
  const kernels::DocBounds docs = seqpar::doc_bounds(cfg);
  int64_t longest = 0;
  for (int d = 0; d < docs.count(); ++d) longest = std::max(longest, docs.length(d));
  const kernels::PosRun all{0, cfg.seq};
  j["docs"] = {{"count", docs.count()},
               {"longest", longest},
               {"kept", double(kernels::kept_pairs(docs, all, all, cfg.causal)) /
                            double(kernels::kept_pairs(all, all, cfg.causal))}};
  // The window, and the fraction of the causal mask's pairs it keeps (without documents).
  j["window"] = {{"size", cfg.window},
                 {"kept", double(kernels::kept_pairs(all, all, cfg.causal, cfg.window)) /
                              double(kernels::kept_pairs(all, all, cfg.causal))}};
  if (asked_window >= cfg.seq) j["window"]["note"] = window_note(asked_window, cfg.seq);
  return j;
}

// Bytes and steps per rank (maximum over ranks) of the schedules, summed without running them;
// with a cluster file, the planner's times too.
int count_schedule(const seqpar::AttnConfig& cfg, int P, plan::Placement placement, int node_size,
                   const plan::Cluster* cl, bool json, int64_t asked_window) {
  const seqpar::ScheduleSummary sum = seqpar::summarize_schedules(cfg, P);
  const seqpar::ScheduleTotals& worst = sum.worst;
  nlohmann::json j = describe(cfg, P, placement, asked_window);
  if (node_size > 0) {
    std::vector<int> node_of;
    for (int r = 0; r < P; ++r) node_of.push_back(r / node_size);
    j["inter_node_bytes"] = inter_node_json(cfg, P, placement, node_of);
  }
  if (cl) j.update(predicted_json(*cl, cfg, P, placement));
  j["bytes"] = {{"p2p_fwd", worst.p2p_bytes_fwd},
                {"p2p_bwd", worst.p2p_bytes_bwd},
                {"coll_fwd", worst.coll_bytes_fwd},
                {"coll_bwd", worst.coll_bytes_bwd}};
  j["steps"] = {{"p2p_fwd", worst.p2p_steps_fwd}, {"p2p_bwd", worst.p2p_steps_bwd}};
  j["work_imbalance"] = sum.work_imbalance;
  if (json) {
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::printf(
        "%s %s P=%d C=%d: bytes/rank p2p fwd %lld bwd %lld, collective (ring formula) fwd %lld "
        "bwd %lld; "
        "p2p steps fwd %lld bwd %lld; work imbalance %.4f\n",
        label(cfg).c_str(), std::string(seqpar::dtype_name(cfg.dtype)).c_str(), P, cfg.teams,
        (long long)worst.p2p_bytes_fwd, (long long)worst.p2p_bytes_bwd,
        (long long)worst.coll_bytes_fwd, (long long)worst.coll_bytes_bwd,
        (long long)worst.p2p_steps_fwd, (long long)worst.p2p_steps_bwd,
        double(j["work_imbalance"]));
    if (node_size > 0)
      std::printf(
          "  across nodes of %d ranks: fwd %lld bwd %lld bytes (all nodes' cards; the "
          "schedule's count)\n",
          node_size, (long long)j["inter_node_bytes"]["fwd"],
          (long long)j["inter_node_bytes"]["bwd"]);
  }
  return 0;
}

// The options as a run: the config and its placement, checked in the order of their errors.
struct AttnRequest {
  seqpar::AttnConfig cfg;
  // A window of the whole sequence or more keeps every causal pair: it runs as the causal mask.
  bool window_is_causal = false;
  plan::Placement placement = plan::Placement::TeamIntra;
  std::optional<plan::Cluster> cluster;  // --cluster
};

AttnRequest parse_request(const AttnOptions& o) {
  WF_USAGE_CHECK(o.seq > 0 && o.heads > 0 && o.head_dim > 0,
                 "--seq, --heads and --head-dim are required and must be positive");
  AttnRequest req;
  seqpar::AttnConfig& cfg = req.cfg;
  // The strategy options alone, when parsed; with the ranks and shapes: seqpar::validate.
  const seqpar::ParallelSpec spec{seqpar::parse_strategy(o.strategy), o.teams, o.inner, o.ulysses,
                                  o.keep_kv};
  seqpar::validate_parallel(spec);
  seqpar::set_parallel(cfg, spec);
  cfg.batch = o.batch;
  cfg.seq = o.seq;
  cfg.heads = o.heads;
  cfg.kv_heads = o.kv_heads > 0 ? o.kv_heads : o.heads;
  cfg.head_dim = o.head_dim;
  cfg.causal = o.causal;
  cfg.dtype = seqpar::parse_dtype(o.dtype);
  cfg.doc_lengths = seqpar::doc_lengths_from_options(o.docs, o.docs_random, o.seq, o.seed);
  cfg.layout = seqpar::parse_layout(o.layout);
  cfg.window = o.window;
  seqpar::validate_window(cfg);
  req.window_is_causal = cfg.window >= cfg.seq;
  if (req.window_is_causal) cfg.window = 0;
  WF_USAGE_CHECK(o.iters >= 1, "--iters is {}; it must be at least 1", o.iters);
  WF_USAGE_CHECK(o.count >= 0, "--count is {}; give a number of ranks >= 1", o.count);
  WF_USAGE_CHECK(o.progress_rows >= 0, "--progress-rows is {}; give 0 (whole blocks) or more",
                 o.progress_rows);
  req.placement = plan::parse_placement(o.placement);
  if (!o.cluster.empty()) req.cluster = plan::load_cluster(o.cluster);
  WF_USAGE_CHECK(o.node_size >= 0, "--node-size is {}; it must be positive", o.node_size);
  // Counted without running: the default inner rings are the nodes of --node-size ranks.
  if (o.count > 0)
    cfg.inner = seqpar::resolved_inner(cfg.strategy, cfg.inner, o.count,
                                       o.node_size > 0 ? o.node_size : o.count);
  return req;
}

seqpar::AttnRunOptions run_options(const AttnOptions& o) {
  return {.seed = o.seed,
          .iters = o.iters,
          .progress_rows = o.progress_rows,
          .check = o.check,
          .dump = o.dump,
          .trace = o.trace};
}

// The JSON output of a run (the trace file's "config" too): the config, the inter-node bytes of
// the ranks' nodes, the planner's prediction with --cluster, and the measured figures.
nlohmann::json run_json(const AttnOptions& o, const AttnRequest& req, int P,
                        const std::vector<int>& node_of, const seqpar::RunSummary& sum) {
  const seqpar::AttnConfig& cfg = req.cfg;
  nlohmann::json j = describe(cfg, P, req.placement, o.window);
  j["iters"] = o.iters;
  j["inter_node_bytes"] = inter_node_json(cfg, P, req.placement, node_of);
  if (req.cluster) j.update(predicted_json(*req.cluster, cfg, P, req.placement));
  j["bytes"] = {{"p2p_fwd", sum.p2p_bytes_fwd},
                {"p2p_bwd", sum.p2p_bytes_bwd},
                {"coll_fwd", sum.coll_bytes_fwd},
                {"coll_bwd", sum.coll_bytes_bwd},
                {"coll_fwd_formula", sum.coll_formula_bytes_fwd},
                {"coll_bwd_formula", sum.coll_formula_bytes_bwd}};
  j["steps"] = {{"p2p_fwd", sum.p2p_steps_fwd}, {"p2p_bwd", sum.p2p_steps_bwd}};
  j["time_ms"] = {{"fwd", sum.fwd_ms}, {"bwd", sum.bwd_ms}};
  j["iteration_ms"] = sum.iteration_ms;
  j["exposed_comm_ms"] = {{"fwd", sum.exposed_fwd_ms}, {"bwd", sum.exposed_bwd_ms}};
  j["work_imbalance"] = sum.work_imbalance;
  j["attn_gflops_fwd"] = sum.flops_fwd / 1e9;
  return j;
}

// The check's figures in the JSON output (null without --check).
void add_check_json(nlohmann::json& j, const seqpar::AttnCheck& c) {
  j["max_err"] = {
      {"out", nullptr}, {"lse", nullptr}, {"dq", nullptr}, {"dk", nullptr}, {"dv", nullptr}};
  if (!c.checked) return;
  const seqpar::AttnErrors& e = c.errors;
  j["max_err"] = {{"out", e.out}, {"lse", e.lse}, {"dq", e.dq}, {"dk", e.dk}, {"dv", e.dv}};
  j["reference"] = c.fp64 ? "fp64" : "fp32";
  j["check"] = c.pass ? "pass" : "fail";
}

// The text output of a run, from its JSON.
void print_run(const AttnOptions& o, const AttnRequest& req, int P, const nlohmann::json& j) {
  const seqpar::AttnConfig& cfg = req.cfg;
  if (req.window_is_causal) std::printf("%s\n", window_note(o.window, cfg.seq).c_str());
  std::printf(
      "attn %s P=%d C=%d seq=%lld batch=%d heads=%d kv_heads=%d head_dim=%d dtype=%s%s%s "
      "layout=%s docs=%d\n",
      label(cfg).c_str(), P, int(j["C"]), (long long)cfg.seq, cfg.batch, cfg.heads, cfg.kv_heads,
      cfg.head_dim, std::string(seqpar::dtype_name(cfg.dtype)).c_str(), cfg.causal ? " causal" : "",
      cfg.window > 0 ? (" window=" + std::to_string(cfg.window)).c_str() : "",
      std::string(seqpar::layout_name(cfg.layout)).c_str(), int(j["docs"]["count"]));
  std::printf(
      "  bytes/rank  p2p fwd %lld bwd %lld  collective fwd %lld bwd %lld (handed to MPI; ring "
      "formula fwd %lld bwd %lld)\n",
      (long long)j["bytes"]["p2p_fwd"], (long long)j["bytes"]["p2p_bwd"],
      (long long)j["bytes"]["coll_fwd"], (long long)j["bytes"]["coll_bwd"],
      (long long)j["bytes"]["coll_fwd_formula"], (long long)j["bytes"]["coll_bwd_formula"]);
  std::printf("  p2p steps   fwd %lld bwd %lld\n", (long long)j["steps"]["p2p_fwd"],
              (long long)j["steps"]["p2p_bwd"]);
  if (int(j["inter_node_bytes"]["nodes"]) > 1)
    std::printf(
        "  across %d nodes (%s): fwd %lld bwd %lld bytes per iteration (the schedule's "
        "count)\n",
        int(j["inter_node_bytes"]["nodes"]), o.placement.c_str(),
        (long long)j["inter_node_bytes"]["fwd"], (long long)j["inter_node_bytes"]["bwd"]);
  std::printf(
      "  time        fwd %.2f ms (exposed comm %.2f) bwd %.2f ms (exposed comm %.2f); "
      "iteration %.2f ms\n",
      double(j["time_ms"]["fwd"]), double(j["exposed_comm_ms"]["fwd"]), double(j["time_ms"]["bwd"]),
      double(j["exposed_comm_ms"]["bwd"]), double(j["iteration_ms"]));
  if (j.contains("predicted_ms"))
    std::printf("  predicted   fwd %.2f ms bwd %.2f ms (%s)\n", double(j["predicted_ms"]["fwd"]),
                double(j["predicted_ms"]["bwd"]), o.cluster.c_str());
  std::printf("  work imbalance %.4f\n", double(j["work_imbalance"]));
  if (o.check)
    std::printf("  max rel err  out %.2e lse %.2e dq %.2e dk %.2e dv %.2e  (%s reference): %s\n",
                double(j["max_err"]["out"]), double(j["max_err"]["lse"]),
                double(j["max_err"]["dq"]), double(j["max_err"]["dk"]), double(j["max_err"]["dv"]),
                std::string(j["reference"]).c_str(), std::string(j["check"]).c_str());
}

int run_attn(const AttnOptions& o) {
  AttnRequest req = parse_request(o);
  const seqpar::AttnConfig& cfg = req.cfg;
  if (o.count > 0) {
    if (!o.json && req.window_is_causal)
      std::printf("%s\n", window_note(o.window, cfg.seq).c_str());
    return count_schedule(cfg, o.count, req.placement, o.node_size,
                          req.cluster ? &*req.cluster : nullptr, o.json, o.window);
  }
  seqpar::AttnRun run(cfg, run_options(o));
  req.cfg = run.config();  // the double ring's inner rings resolved
  const int P = run.ranks();
  // The placement orders the ranks: the run numbers them by layout rank.
  run.place(plan::inverse_order(plan::candidate_devices(candidate(cfg, req.placement), P)));
  run.iterate();
  nlohmann::json j = run_json(o, req, P, run.topology().node_of, run.summarize());
  run.write_trace({{"command", "attn"}, {"config", j}});
  const seqpar::AttnCheck c = run.check_and_dump();
  add_check_json(j, c);
  if (run.rank() == 0) {
    if (o.json)
      std::printf("%s\n", j.dump().c_str());
    else
      print_run(o, req, P, j);
    std::fflush(stdout);
  }
  run.finish();
  return c.pass ? 0 : 1;
}

Action setup(CLI::App& root) {
  auto o = std::make_shared<AttnOptions>();
  auto* cmd = root.add_subcommand(
      "attn",
      "Distributed exact attention (forward + backward) on seeded inputs; run under mpirun");
  add_strategy_option(*cmd, o->strategy);
  cmd->add_option("--teams", o->teams, "WallFacer team size C (C^2 must divide P)");
  cmd->add_option("--inner", o->inner,
                  "double-ring: inner ring length W, consecutive ranks (W must divide P; default: "
                  "the ranks per node, with --count those of --node-size)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--ulysses", o->ulysses,
                  fmt::format("Ulysses degree U of a Ulysses hybrid: Ulysses inside teams of U "
                              "consecutive ranks, --strategy {} over the P/U ranks of each member "
                              "index (U must divide P and the heads)",
                              seqpar::strategy_names(", ", " or ",
                                                     [](const auto& t) { return t.hybrid_ring; })))
      ->check(CLI::PositiveNumber);
  cmd->add_option("--placement", o->placement,
                  "which ranks share a node: team-intra (teams of consecutive ranks, team "
                  "collectives inside a node) or ring-intra (sub-rings on consecutive ranks, ring "
                  "hops inside a node)")
      ->check(CLI::IsMember({"team-intra", "ring-intra"}))
      ->capture_default_str();
  cmd->add_option("--node-size", o->node_size,
                  "with --count: ranks per node, to count the bytes that cross nodes (and with "
                  "--cluster the prediction, without running)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--cluster", o->cluster,
                  "a cluster file (e.g. from tune --calibrate): print the planner's predicted "
                  "times beside the measured ones; world rank i is device i");
  cmd->add_option("--seq", o->seq, "global sequence length N (required)");
  cmd->add_option("--batch", o->batch, "batch size B")->check(CLI::PositiveNumber);
  cmd->add_option("--heads", o->heads, "query heads H (required)");
  cmd->add_option("--kv-heads", o->kv_heads, "key/value heads (default: H)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--head-dim", o->head_dim, "head dimension D (required)");
  cmd->add_flag("--causal", o->causal, "causal mask");
  cmd->add_option("--dtype", o->dtype,
                  "element type of q, k, v, o and the gradients and of their messages: fp32, or "
                  "bf16 (bf16 kernels; lse, delta and the gradients between ranks stay fp32; "
                  "--check uses the bf16 tolerances)")
      ->check(CLI::IsMember({"fp32", "bf16"}))
      ->capture_default_str();
  cmd->add_flag("--keep-kv", o->keep_kv,
                "WallFacer: keep the placed K,V of the forward for the backward (no K,V gather or "
                "placement hop in the backward; one team K,V block more memory)");
  cmd->add_flag("--check", o->check,
                "compare with a single-process computation of the whole sequence (exit 1 above "
                "tolerance)");
  cmd->add_option("--iters", o->iters, "iterations (times are medians)");
  cmd->add_flag("--json", o->json, "print one JSON object");
  cmd->add_option("--dump", o->dump,
                  "write inputs and gathered results as .npy files to DIR, and the document "
                  "lengths as docs.npy (int64)");
  cmd->add_option("--seed", o->seed, "seed of the inputs and of --docs-random");
  cmd->add_option("--docs", o->docs,
                  "packed documents: their lengths L1,L2,... (positive, summing to --seq); a "
                  "token attends only to its own document (causally with --causal)")
      ->delimiter(',');
  cmd->add_option("--docs-random", o->docs_random,
                  "packed documents: N of them, lengths from a long-tailed distribution "
                  "(log-normal weights, sigma 2; each at least 1) filling --seq, seeded by --seed");
  cmd->add_option("--layout", o->layout,
                  "where the rows go: strategy (the strategy's own: contiguous or zigzag) or "
                  "balanced (balances the document-masked work; --seq divisible by 8P)")
      ->check(CLI::IsMember({"strategy", "balanced"}))
      ->capture_default_str();
  cmd->add_option("--window", o->window,
                  "sliding window W (needs --causal): token i attends to tokens i-W+1 .. i only "
                  "(and only in its own document); 0: none; W >= --seq is the causal mask");
  cmd->add_option("--progress-rows", o->progress_rows,
                  "query rows per kernel call while transfers are pending (0: whole blocks)");
  cmd->add_option("--trace", o->trace,
                  "write a Chrome trace (Perfetto) of the iterations to FILE.json: every rank's "
                  "kernels, transfers, waits and collectives (docs/trace.md)");
  cmd->add_option("--count", o->count,
                  "print the bytes and steps per rank of the schedules for this many ranks, "
                  "without running (no MPI)");
  return [o] { return run_attn(*o); };
}

WALLFACER_COMMAND(30, "attn", setup);

}  // namespace
}  // namespace wallfacer::cli
