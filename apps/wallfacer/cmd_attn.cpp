// wallfacer attn: distributed exact attention, forward and backward, on seeded random inputs.
//   mpirun -np P wallfacer attn --strategy {ring,zigzag,ulysses,wallfacer} [--teams C]
//     [--ulysses U] [--placement {team-intra,ring-intra}] --seq N
//     [--batch B] --heads H [--kv-heads Hkv] --head-dim D [--causal] [--dtype {fp32,bf16}]
//     [--docs L1,L2,... | --docs-random N] [--layout {strategy,balanced}] [--window W]
//     [--check] [--iters K]
//     [--json] [--dump DIR] [--trace FILE.json]

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>

#include "command.h"
#include "wallfacer/comm/communicator.h"
#include "wallfacer/comm/topology.h"
#include "wallfacer/comm/trace_merge.h"
#include "wallfacer/core/bf16.h"
#include "wallfacer/core/error.h"
#include "wallfacer/core/file.h"
#include "wallfacer/core/memory.h"
#include "wallfacer/core/npy.h"
#include "wallfacer/core/stats.h"
#include "wallfacer/core/trace.h"
#include "wallfacer/kernels/attention.h"
#include "wallfacer/plan/planner.h"
#include "wallfacer/plan/report.h"
#include "wallfacer/seqpar/attention.h"
#include "wallfacer/seqpar/doc_layout.h"
#include "wallfacer/seqpar/harness.h"
#include "wallfacer/seqpar/schedule.h"

namespace wallfacer::cli {
namespace {

struct AttnOptions {
  std::string strategy = "ring";
  int teams = 1;
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

// "ring", or "ulysses2 x zigzag" for a hybrid.
std::string label(const seqpar::AttnConfig& cfg) {
  const std::string s =
      std::string(seqpar::strategy_name(cfg.strategy)) + (cfg.keep_kv ? " keep-kv" : "");
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

int run_attn(const AttnOptions& o) {
  WF_USAGE_CHECK(o.seq > 0 && o.heads > 0 && o.head_dim > 0,
                 "--seq, --heads and --head-dim are required and must be positive");
  seqpar::AttnConfig cfg;
  cfg.strategy = seqpar::parse_strategy(o.strategy);
  cfg.teams = o.teams;
  cfg.ulysses = o.ulysses;
  cfg.batch = o.batch;
  cfg.seq = o.seq;
  cfg.heads = o.heads;
  cfg.kv_heads = o.kv_heads > 0 ? o.kv_heads : o.heads;
  cfg.head_dim = o.head_dim;
  cfg.causal = o.causal;
  cfg.keep_kv = o.keep_kv;
  cfg.dtype = seqpar::parse_dtype(o.dtype);
  cfg.doc_lengths = seqpar::doc_lengths_from_options(o.docs, o.docs_random, o.seq, o.seed);
  cfg.layout = seqpar::parse_layout(o.layout);
  cfg.window = o.window;
  seqpar::validate_window(cfg);
  // A window of the whole sequence or more keeps every causal pair: it is the causal mask.
  const bool window_is_causal = cfg.window >= cfg.seq;
  if (window_is_causal) cfg.window = 0;
  WF_USAGE_CHECK(o.iters >= 1, "--iters is {}; it must be at least 1", o.iters);
  WF_USAGE_CHECK(o.count >= 0, "--count is {}; give a number of ranks >= 1", o.count);
  WF_USAGE_CHECK(o.progress_rows >= 0, "--progress-rows is {}; give 0 (whole blocks) or more",
                 o.progress_rows);
  const plan::Placement placement = plan::parse_placement(o.placement);
  plan::Cluster cl;
  if (!o.cluster.empty()) cl = plan::load_cluster(o.cluster);
  WF_USAGE_CHECK(o.node_size >= 0, "--node-size is {}; it must be positive", o.node_size);
  const auto print_window_note = [&] {
    if (window_is_causal) std::printf("%s\n", window_note(o.window, cfg.seq).c_str());
  };
  if (o.count > 0) {
    if (!o.json) print_window_note();
    return count_schedule(cfg, o.count, placement, o.node_size, o.cluster.empty() ? nullptr : &cl,
                          o.json, o.window);
  }

  comm::MpiSession session(nullptr, nullptr);
  auto everyone = comm::Communicator::world();
  const int P = everyone.size();
  seqpar::validate(cfg, P);  // before any collective: every rank reaches the same verdict
  WF_USAGE_CHECK(cfg.head_dim <= kernels::kMaxHeadDim, "--head-dim is {}; the kernels take 1..{}",
                 cfg.head_dim, kernels::kMaxHeadDim);
  {
    // Eight tensors of this rank's rows; rank 0 also holds the whole sequence's for --check/--dump.
    const double whole =
        4.0 * cfg.batch * double(cfg.seq) * (cfg.heads + cfg.kv_heads) * cfg.head_dim;
    check_memory(4.0 * whole / P + (o.check || !o.dump.empty() ? 6.0 * whole : 0.0),
                 "attention on these shapes");
  }
  comm::ClockSync clocks;
  if (!o.trace.empty()) {
    comm::check_trace_path(everyone, o.trace);
    clocks = comm::sync_clocks(everyone);
  }
  // The placement orders the ranks: `world` numbers them by layout rank.
  const comm::Topology topo = comm::discover_topology();
  const std::vector<int> device_of = plan::candidate_devices(candidate(cfg, placement), P);
  auto world = everyone.split(0, plan::inverse_order(device_of)[size_t(everyone.rank())]);
  const int rank = world.rank();
  world.agree([&] {  // only rank 0 writes: a folder it cannot create stops every rank now
    if (rank == 0 && !o.dump.empty()) make_directories(o.dump, "--dump");
  });

  // This rank's rows of the seeded global inputs.
  const auto pos = seqpar::local_positions(cfg, P, rank);
  const int64_t n = int64_t(pos.size()), B = cfg.batch, D = cfg.head_dim;
  std::vector<float> q(size_t(B * n * cfg.heads * D)), k(size_t(B * n * cfg.kv_heads * D)),
      v(k.size()), dout(q.size());
  seqpar::fill_inputs(o.seed, seqpar::InputTensor::Q, pos, cfg.batch, cfg.heads, cfg.head_dim,
                      q.data());
  seqpar::fill_inputs(o.seed, seqpar::InputTensor::K, pos, cfg.batch, cfg.kv_heads, cfg.head_dim,
                      k.data());
  seqpar::fill_inputs(o.seed, seqpar::InputTensor::V, pos, cfg.batch, cfg.kv_heads, cfg.head_dim,
                      v.data());
  seqpar::fill_inputs(o.seed, seqpar::InputTensor::Dout, pos, cfg.batch, cfg.heads, cfg.head_dim,
                      dout.data());
  std::vector<float> out(q.size()), lse(size_t(B * cfg.heads * n)), dq(q.size()), dk(k.size()),
      dv(v.size());
  // bf16: the inputs rounded, the outputs bf16 (widened to fp32 afterwards, exactly).
  const bool half = cfg.dtype == seqpar::Dtype::bf16;
  std::vector<bf16> q16, k16, v16, dout16, out16, dq16, dk16, dv16;
  if (half) {
    q16 = to_bf16(q), k16 = to_bf16(k), v16 = to_bf16(v), dout16 = to_bf16(dout);
    out16.resize(q.size()), dq16.resize(q.size()), dk16.resize(k.size()), dv16.resize(v.size());
  }

  seqpar::DistAttention attn(cfg, world);
  attn.set_progress_rows(o.progress_rows);
  std::vector<seqpar::AttnStats> iterations;
  if (!o.trace.empty()) {
    // Room for every span: each op of this rank's schedule once per phase.
    const size_t ops = size_t(seqpar::schedule_ops(cfg, P, rank));
    trace::start(size_t(o.iters) * (ops + 8) + 64);
  }
  for (int it = 0; it < o.iters; ++it) {
    world.barrier();
    trace::Span span("iteration", trace::Cat::Phase, {{"iter", it}});
    if (half) {
      attn.forward(q16.data(), k16.data(), v16.data(), out16.data(), lse.data());
      attn.backward(q16.data(), k16.data(), v16.data(), out16.data(), lse.data(), dout16.data(),
                    dq16.data(), dk16.data(), dv16.data());
    } else {
      attn.forward(q.data(), k.data(), v.data(), out.data(), lse.data());
      attn.backward(q.data(), k.data(), v.data(), out.data(), lse.data(), dout.data(), dq.data(),
                    dk.data(), dv.data());
    }
    iterations.push_back(attn.stats());
  }
  trace::stop();
  if (half) {
    out = to_fp32(out16), dq = to_fp32(dq16), dk = to_fp32(dk16), dv = to_fp32(dv16);
  }
  const seqpar::RunSummary sum = seqpar::summarize_run(world, iterations);
  nlohmann::json j = describe(cfg, P, placement, o.window);
  j["iters"] = o.iters;
  j["inter_node_bytes"] = inter_node_json(cfg, P, placement, topo.node_of);
  if (!o.cluster.empty()) j.update(predicted_json(cl, cfg, P, placement));
  j["bytes"] = {{"p2p_fwd", sum.p2p_bytes_fwd},
                {"p2p_bwd", sum.p2p_bytes_bwd},
                {"coll_fwd", sum.coll_bytes_fwd},
                {"coll_bwd", sum.coll_bytes_bwd},
                {"coll_fwd_formula", sum.coll_formula_bytes_fwd},
                {"coll_bwd_formula", sum.coll_formula_bytes_bwd}};
  j["steps"] = {{"p2p_fwd", sum.p2p_steps_fwd}, {"p2p_bwd", sum.p2p_steps_bwd}};
  j["time_ms"] = {{"fwd", sum.fwd_ms}, {"bwd", sum.bwd_ms}};
  j["exposed_comm_ms"] = {{"fwd", sum.exposed_fwd_ms}, {"bwd", sum.exposed_bwd_ms}};
  j["work_imbalance"] = sum.work_imbalance;
  j["attn_gflops_fwd"] = sum.flops_fwd / 1e9;

  // Every rank learns whether rank 0 wrote it; a failure ends the job through main's error path.
  if (!o.trace.empty())
    comm::write_trace(everyone, o.trace, clocks, {{"command", "attn"}, {"config", j}});

  int rc = 0;
  j["max_err"] = {
      {"out", nullptr}, {"lse", nullptr}, {"dq", nullptr}, {"dk", nullptr}, {"dv", nullptr}};
  if (o.check || !o.dump.empty()) {
    const seqpar::AttnTensors got =
        seqpar::gather_outputs(world, cfg, out.data(), lse.data(), dq.data(), dk.data(), dv.data());
    double verdict = 0;
    if (rank == 0) {
      const auto in = seqpar::make_inputs(cfg, o.seed);
      if (o.check) {
        // The naive fp64 reference where affordable, else the fp32 kernel on the whole sequence
        // (then both sides carry fp32 error: twice the tolerance).
        const double work = double(B) * cfg.heads * double(cfg.seq) * double(cfg.seq) * D;
        const bool fp64 = work <= 4e9;
        const auto ref = seqpar::reference_attention(cfg, in, fp64);
        const auto e = seqpar::attention_errors(got, ref);
        // bf16: the reference sees the same (rounded) inputs; the fp32 kernel's error is far
        // below the bf16 tolerances, which stay as they are.
        seqpar::AttnTolerance tol = seqpar::attn_tolerance(cfg.dtype);
        if (!fp64 && !half) tol = {2 * tol.out, 2 * tol.lse, 2 * tol.grad};
        j["max_err"] = {{"out", e.out}, {"lse", e.lse}, {"dq", e.dq}, {"dk", e.dk}, {"dv", e.dv}};
        j["reference"] = fp64 ? "fp64" : "fp32";
        j["check"] = e.within(tol) ? "pass" : "fail";
        verdict = e.within(tol) ? 0 : 1;
      }
      if (!o.dump.empty()) {
        const std::vector<int64_t> qshape{B, cfg.seq, cfg.heads, D},
            kshape{B, cfg.seq, cfg.kv_heads, D}, lshape{B, cfg.heads, cfg.seq};
        auto put = [&](const char* name, const std::vector<float>& x,
                       const std::vector<int64_t>& shape) {
          write_npy((std::filesystem::path(o.dump) / name).string(), x.data(), shape);
        };
        put("q.npy", in.q, qshape);
        put("k.npy", in.k, kshape);
        put("v.npy", in.v, kshape);
        put("do.npy", in.dout, qshape);
        put("o.npy", got.o, qshape);
        put("lse.npy", got.lse, lshape);
        put("dq.npy", got.dq, qshape);
        put("dk.npy", got.dk, kshape);
        put("dv.npy", got.dv, kshape);
        // The documents (one of length seq without --docs).
        std::vector<int64_t> lengths = cfg.doc_lengths;
        if (lengths.empty()) lengths = {cfg.seq};
        write_npy((std::filesystem::path(o.dump) / "docs.npy").string(), lengths.data(),
                  {int64_t(lengths.size())});
        // The sliding window as run (0: none; a window of the sequence or more runs as 0).
        const int64_t window = cfg.window;
        write_npy((std::filesystem::path(o.dump) / "window.npy").string(), &window, {1});
      }
    }
    world.all_reduce_sum(&verdict, 1);
    rc = verdict > 0 ? 1 : 0;
  }

  if (rank == 0) {
    if (o.json) {
      std::printf("%s\n", j.dump().c_str());
    } else {
      print_window_note();
      std::printf(
          "attn %s P=%d C=%d seq=%lld batch=%d heads=%d kv_heads=%d head_dim=%d dtype=%s%s%s "
          "layout=%s docs=%d\n",
          label(cfg).c_str(), P, int(j["C"]), (long long)cfg.seq, cfg.batch, cfg.heads,
          cfg.kv_heads, cfg.head_dim, std::string(seqpar::dtype_name(cfg.dtype)).c_str(),
          cfg.causal ? " causal" : "",
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
      std::printf("  time        fwd %.2f ms (exposed comm %.2f) bwd %.2f ms (exposed comm %.2f)\n",
                  double(j["time_ms"]["fwd"]), double(j["exposed_comm_ms"]["fwd"]),
                  double(j["time_ms"]["bwd"]), double(j["exposed_comm_ms"]["bwd"]));
      if (j.contains("predicted_ms"))
        std::printf("  predicted   fwd %.2f ms bwd %.2f ms (%s)\n",
                    double(j["predicted_ms"]["fwd"]), double(j["predicted_ms"]["bwd"]),
                    o.cluster.c_str());
      std::printf("  work imbalance %.4f\n", double(j["work_imbalance"]));
      if (o.check)
        std::printf(
            "  max rel err  out %.2e lse %.2e dq %.2e dk %.2e dv %.2e  (%s reference): %s\n",
            double(j["max_err"]["out"]), double(j["max_err"]["lse"]), double(j["max_err"]["dq"]),
            double(j["max_err"]["dk"]), double(j["max_err"]["dv"]),
            std::string(j["reference"]).c_str(), std::string(j["check"]).c_str());
    }
    std::fflush(stdout);
  }
  world.barrier();  // rank 0's output is out before any rank exits
  return rc;
}

Action setup(CLI::App& root) {
  auto o = std::make_shared<AttnOptions>();
  auto* cmd = root.add_subcommand(
      "attn",
      "Distributed exact attention (forward + backward) on seeded inputs; run under mpirun");
  cmd->add_option("--strategy", o->strategy, "ring | zigzag | ulysses | wallfacer")
      ->check(CLI::IsMember({"ring", "zigzag", "ulysses", "wallfacer"}));
  cmd->add_option("--teams", o->teams, "WallFacer team size C (C^2 must divide P)");
  cmd->add_option("--ulysses", o->ulysses,
                  "Ulysses degree U of a Ulysses x ring hybrid (with --strategy ring or zigzag; "
                  "U must divide P and the heads)")
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
