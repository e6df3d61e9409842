// wallfacer tune: runs the best predicted configurations on this machine and compares the
// measurement with the prediction; `--calibrate` measures this machine's kernel and link rates
// into a cluster file.

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>

#include "command.h"
#include "wallfacer/comm/communicator.h"
#include "wallfacer/comm/link_probe.h"
#include "wallfacer/comm/topology.h"
#include "wallfacer/core/error.h"
#include "wallfacer/core/file.h"
#include "wallfacer/core/stats.h"
#include "wallfacer/core/threads.h"
#include "wallfacer/core/timer.h"
#include "wallfacer/kernels/attention.h"
#include "wallfacer/kernels/attention_params.h"
#include "wallfacer/kernels/ops.h"
#include "wallfacer/plan/calibrate.h"
#include "wallfacer/plan/planner.h"
#include "wallfacer/plan/report.h"
#include "wallfacer/seqpar/attention.h"
#include "wallfacer/train/data.h"
#include "wallfacer/train/trainer.h"

namespace wallfacer::cli {
namespace {

struct TuneOptions {
  std::string model, cluster = "configs/clusters/local.toml", seq, out;
  int top = 3, iters = 3, steps = 3;
  bool calibrate = false, json = false, topology = false;
};

// Largest value over the ranks.
double max_over(comm::Communicator& c, double x) {
  c.all_reduce_max(&x, 1);
  return x;
}

// The smallest value over the ranks: for rates, the slowest rank, which every step waits for.
double min_over(comm::Communicator& c, double x) { return -max_over(c, -x); }

// Seconds per call of f, repeated until `min_s` has passed (after one warm-up call).
template <class F>
double time_per_call(F&& f, double min_s) {
  f();
  int calls = 0;
  Timer t;
  do {
    f();
    ++calls;
  } while (t.seconds() < min_s);
  return t.seconds() / calls;
}

// Seconds per call of a collective f: every rank must make the same number of calls, so the count
// is agreed on (the largest any rank wants for ~0.3 s) instead of each rank watching its own clock.
template <class F>
double collective_time_per_call(comm::Communicator& c, F&& f) {
  f();
  Timer one;
  f();
  const double t1 = max_over(c, one.seconds());
  const int calls = int(std::clamp(0.3 / std::max(t1, 1e-6), 1.0, 1000.0));
  Timer t;
  for (int i = 0; i < calls; ++i) f();
  return t.seconds() / calls;
}

// ---------------------------------------------------------------------------------------------
// Calibration

struct AttnRates {
  int head_dim = 0;
  double fwd_s = 0, bwd_s = 0;        // this rank's seconds per call
  double fwd = 0, bwd = 0, both = 0;  // FLOP/s of the slowest rank
};

// Times attn_fwd and attn_bwd on every rank at once on a 1024 x 1024 block of 4 heads of
// head_dim, for 1.5 s each: with more ranks than cores the scheduler's share per rank evens out
// only over longer windows (0.5 s gave rates 16-25 GFLOP/s apart at 4 ranks on 2 cores, 1.5 s
// 18-21).
AttnRates time_attention(comm::Communicator& world, int head_dim, std::mt19937& rng) {
  kernels::AttnDims d{1, 1024, 1024, 4, 4, head_dim};
  const size_t rows = size_t(d.seq_q) * d.heads * d.head_dim;
  std::vector<float> q(rows), k(rows), v(rows), o(rows), dout(rows), dq(rows), dk(rows), dv(rows);
  std::vector<float> lse(size_t(d.heads) * d.seq_q), delta(lse.size());
  std::uniform_real_distribution<float> u(-1, 1);
  for (auto* t : {&q, &k, &v, &dout})
    for (auto& x : *t) x = u(rng);
  const auto s3 = kernels::Strides3::contiguous(d.seq_q, d.heads, d.head_dim);
  const auto s2 = kernels::Strides2::contiguous(d.heads, d.seq_q);
  const float scale = 1.0f / std::sqrt(float(head_dim));
  kernels::AttnInputs<float> t;
  t.dims = d;
  t.q = q.data(), t.k = k.data(), t.v = v.data();
  t.q_stride = t.kv_stride = s3;
  t.stat_stride = s2;
  t.scale = scale;
  const auto fp = kernels::fwd_params(t, o.data(), lse.data());
  const auto bp = kernels::bwd_params(
      t, {dout.data(), lse.data(), delta.data(), dq.data(), dk.data(), dv.data()});
  world.barrier();
  AttnRates r;
  r.head_dim = head_dim;
  r.fwd_s = time_per_call([&] { kernels::attn_fwd(fp); }, 1.5);
  kernels::attn_bwd_preprocess(d, o.data(), s3, dout.data(), s3, delta.data(), s2);
  r.bwd_s = time_per_call([&] { kernels::attn_bwd(bp); }, 1.5);
  const double pairs_hd = double(d.seq_q) * d.seq_k * d.heads * d.head_dim;
  r.both = min_over(world, 14.0 * pairs_hd / (r.fwd_s + r.bwd_s));
  r.fwd = min_over(world, 4.0 * pairs_hd / r.fwd_s);
  r.bwd = min_over(world, 10.0 * pairs_hd / r.bwd_s);
  return r;
}

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
  const comm::Topology topo = comm::discover_topology();
  BlasSingleThreaded blas1;

  // Dense products, every rank at once (the rate one rank sees when all of them compute).
  const int64_t N = 512;
  const int Cm = 512, OC = 512;
  std::vector<float> a(size_t(N * Cm)), w(size_t(OC) * Cm), y(size_t(N * OC));
  std::mt19937 rng(1234 + rank);
  std::uniform_real_distribution<float> u(-1, 1);
  for (auto* v : {&a, &w})
    for (auto& x : *v) x = u(rng);
  world.barrier();
  const double t_mm = time_per_call(
      [&] { kernels::matmul_fwd(y.data(), a.data(), w.data(), nullptr, N, Cm, OC); }, 0.5);
  const double gemm = min_over(world, 2.0 * N * Cm * OC / t_mm);

  // Flash attention forward + backward on one block pair of 1024 x 1024 rows, 4 heads, for head
  // dims 32, 64 and 128 (64 gives the device's own rates): 4 FLOPs per (query, key) pair, head
  // and head dim forward, 10 backward (as the schedules count).
  std::vector<AttnRates> by_dim;
  for (int D : {32, 64, 128}) by_dim.push_back(time_attention(world, D, rng));
  const AttnRates& a64 = by_dim[1];

  // Links: ping-pong inside a node (ranks 0 and 1 when they share it) and between nodes (rank 0
  // and the first rank of node 1), while the others wait.
  const int per_node = topo.max_ranks_per_node();
  const int other_node = int(std::find(topo.node_of.begin(), topo.node_of.end(), 1) -
                             topo.node_of.begin());  // P when there is one node
  const bool has_intra = topo.node_of[0] == topo.node_of[1];
  comm::LinkSamples intra_s, inter_s;
  if (has_intra) intra_s = comm::ping_pong(world, 0, 1);
  if (other_node < P) inter_s = comm::ping_pong(world, 0, other_node);
  // How the ranks of node 0 share its card: each sends one message to a rank of node 1, one of
  // them alone and then all at once.
  comm::Spread share;
  if (other_node < P) share = comm::card_share(world, topo);
  comm::Spread pair;
  if (topo.nodes() >= 3) pair = comm::pair_cap(world, topo);
  world.barrier();

  // All-gather of 1 MB per rank, to compare with what the fitted link predicts.
  const int64_t ag = 1 << 18;
  std::vector<float> ag_in(static_cast<size_t>(ag)), ag_out(static_cast<size_t>(ag) * P);
  world.barrier();
  const double t_ag = max_over(world, collective_time_per_call(world, [&] {
                                 world.all_gather(ag_in.data(), ag, ag_out.data());
                               }));

  if (rank == 0) {
    const plan::Link intra =
        has_intra ? plan::fit_link(intra_s.bytes, intra_s.seconds) : plan::Link{};
    const plan::Link inter =
        other_node < P ? plan::fit_link(inter_s.bytes, inter_s.seconds) : intra;
    const plan::Link link = has_intra ? intra : inter;
    plan::Cluster c;
    c.name = "local";
    const long cores = sysconf(_SC_NPROCESSORS_ONLN);
    char host[256] = {0};
    gethostname(host, sizeof host - 1);
    std::time_t now = std::time(nullptr);
    char date[64];
    std::strftime(date, sizeof date, "%Y-%m-%d %H:%M UTC", std::gmtime(&now));
    c.description = fmt::format(
        "{}: {} cores, OpenBLAS {}; calibrated by wallfacer tune --calibrate with {} ranks of {} "
        "thread(s), {}",
        host, cores, blas_core_name(), P, num_threads(), date);
    c.nodes = std::max(1, topo.nodes());
    // A device is a rank at the rate measured: with more ranks than cores, each got a share.
    c.devices_per_node = std::max(int(std::max<long>(1, cores / std::max(1, num_threads()))),
                                  topo.max_ranks_per_node());
    c.device = "CPU core";
    c.gemm_flops = gemm;
    c.attention_flops = a64.both;
    c.attention_fwd_flops = a64.fwd;
    c.attention_bwd_flops = a64.bwd;
    for (const AttnRates& r : by_dim) {
      c.attention_head_dims.push_back(r.head_dim);
      c.attention_fwd_by_head_dim.push_back(r.fwd);
      c.attention_bwd_by_head_dim.push_back(r.bwd);
    }
    const kernels::AttnTiling tile =
        kernels::attn_fwd_tiling(kernels::AttnDims{1, 1024, 1024, 4, 4, 64});
    c.attention_tile_q = tile.block_q;
    c.attention_tile_k = tile.block_k;
    const double mem = double(sysconf(_SC_PHYS_PAGES)) * double(sysconf(_SC_PAGE_SIZE));
    c.memory = mem / c.devices_per_node;
    c.memory_reserved = 0.1 * c.memory;
    c.dtype_bytes = 4;
    c.intra = link;
    c.inter = inter;  // one node: the same as inside it
    c.devices_per_nic = c.devices_per_node;
    if (topo.nodes() > 1) {
      // Ranks are the devices: a node holds as many as the job put there.
      c.devices_per_node = per_node;
      c.memory = mem / per_node;
      c.memory_reserved = 0.1 * c.memory;
      c.devices_per_nic =
          plan::devices_per_nic(share.transfers, share.alone, share.together, per_node);
      if (plan::pair_capped(pair.transfers, pair.alone, pair.together)) {
        // The ping-pong and the card test ran between two nodes: they saw the pair's cap. The
        // card carries at least what rank 0 sent to all nodes at once; which ranks share it
        // cannot be told apart from the cap, so the node's ranks share one card.
        c.inter_pair_bandwidth = inter.bandwidth;
        c.inter.bandwidth = pair.together;
        c.devices_per_nic = per_node;
      }
    }
    plan::Cluster check = c;
    // The all-gather the fitted link predicts: a ring of P ranks, P-1 steps of 1 MB.
    const double predicted_ag = (P - 1) * link.time(double(ag) * sizeof(float));
    fmt::print("calibration ({} ranks, {} thread(s) each):\n", P, num_threads());
    fmt::print("  sgemm {}x{}x{}: {:.2f} GFLOP/s per rank (the slowest rank)\n", N, Cm, OC,
               gemm / 1e9);
    for (const AttnRates& r : by_dim)
      fmt::print(
          "  flash attention 1024x1024, 4 heads x {:>3}: fwd {:6.1f} ms = {:6.2f}, "
          "bwd {:6.1f} ms = {:6.2f}, fwd+bwd {:6.2f} GFLOP/s per rank (the slowest)\n",
          r.head_dim, r.fwd_s * 1e3, r.fwd / 1e9, r.bwd_s * 1e3, r.bwd / 1e9, r.both / 1e9);
    fmt::print("  kernel tile {}x{} (query x key rows)\n", tile.block_q, tile.block_k);
    fmt::print("  {} node(s) of up to {} rank(s)\n", topo.nodes(), per_node);
    if (has_intra) print_link("inside a node, ping-pong rank 0 <-> 1", intra, intra_s);
    if (other_node < P) {
      print_link(fmt::format("between nodes, ping-pong rank 0 <-> {}", other_node), inter, inter_s);
      fmt::print(
          "  card of node 0: one rank sends {:.2f} MB/s to node 1, {} ranks at once {:.2f} MB/s "
          "together: {} device(s) per card; inside a node / between nodes: {:.1f}x\n",
          share.alone / 1e6, share.transfers, share.together / 1e6, c.devices_per_nic,
          has_intra ? intra.bandwidth / inter.bandwidth : 1.0);
    }
    if (pair.transfers >= 2)
      fmt::print(
          "  pairs of nodes: rank 0 sends {:.2f} MB/s to node 1 alone, {:.2f} MB/s to {} nodes at "
          "once: {}\n",
          pair.alone / 1e6, pair.together / 1e6, pair.transfers,
          plan::pair_capped(pair.transfers, pair.alone, pair.together)
              ? fmt::format("traffic between two nodes is capped at {:.2f} MB/s, the "
                            "card carries at least {:.2f}",
                            c.inter_pair_bandwidth / 1e6, c.inter.bandwidth / 1e6)
              : std::string("no cap below the card's"));
    fmt::print(
        "  all-gather 1 MB per rank over {} ranks: {:.3f} ms measured, {:.3f} ms "
        "predicted\n",
        P, t_ag * 1e3, predicted_ag * 1e3);
    std::ofstream f(out);
    WF_USAGE_CHECK(f.good(), "cannot write '{}' (check the directory)", out);
    f << "# This machine, as measured by `mpirun -np " << P
      << " wallfacer tune --calibrate`. Units: FLOP/s, bytes, bytes/s, seconds.\n"
      << plan::cluster_to_toml(check);
    fmt::print("wrote {}\n", out);
  }
  world.barrier();
  return 0;
}

// ---------------------------------------------------------------------------------------------
// Tuning

struct Measured {
  plan::Prediction pred;
  plan::AttentionPrediction attn;
  double fwd_ms = 0, bwd_ms = 0, exposed_fwd_ms = 0, exposed_bwd_ms = 0;
  double step_ms = 0;  // measured training step (0: not run)
};

// Training steps run for causal GPT models (what `wallfacer train` trains with a text corpus).
bool trains_steps(const plan::ModelSpec& m) { return m.kind == plan::ModelKind::Gpt && m.causal; }

// Mean seconds of the training steps after the first of a `steps`-step GPT run of configuration
// `c` on random tokens: the trainer of `wallfacer train` with the model's shapes, no evaluation,
// no checkpoints, nothing printed. Every rank writes its own token files under a temporary folder
// of $TMPDIR (or /tmp), removed afterwards.
double measure_training(const plan::Candidate& c, const plan::ModelSpec& m, int64_t seq, int steps,
                        comm::Communicator& world) {
  train::TrainOptions opt;
  train::TrainConfig& cfg = opt.cfg;
  cfg.kind = "gpt";
  cfg.model.vocab = m.vocab;
  cfg.model.layers = m.layers;
  cfg.model.dim = m.dim;
  cfg.model.heads = m.heads;
  cfg.model.kv_heads = m.kv_heads;
  cfg.model.mlp_ratio = m.mlp_ratio;
  cfg.seq = seq;
  cfg.batch = m.batch;
  cfg.steps = steps + 1;  // the first step warms up and is not timed
  cfg.warmup = 0;
  cfg.sp = world.size();
  cfg.strategy = std::string(seqpar::strategy_name(c.strategy));
  cfg.teams = c.teams;
  cfg.ulysses = c.ulysses;
  cfg.keep_kv = c.keep_kv;
  cfg.checkpointing = m.checkpoint_attention ? "attention" : "none";
  const char* tmp = std::getenv("TMPDIR");
  const std::string base = tmp && *tmp ? tmp : "/tmp";
  std::string dir_name = base + "/wallfacer-tune-XXXXXX";
  char* dir = dir_name.data();
  WF_USAGE_CHECK(mkdtemp(dir) != nullptr,
                 "cannot create a temporary folder under {} (set TMPDIR to a writable folder)",
                 base);
  cfg.data_dir = dir;
  opt.out_dir = std::string(dir) + "/run";
  opt.progress = "none";
  opt.report = false;
  // Random byte-level tokens: a few sequences' worth, the same on every rank.
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> tok(0, std::min(m.vocab, train::kByteVocab) - 1);
  std::vector<uint16_t> tokens(size_t(4 * seq * m.batch + 1));
  for (auto& t : tokens) t = uint16_t(tok(rng));
  train::write_shard(cfg.data_dir + "/train.bin", tokens, train::kByteVocab);
  train::write_shard(cfg.data_dir + "/val.bin", tokens, train::kByteVocab);
  double step_s = 0;
  try {
    step_s = train::run_training(world, opt).step_s;
  } catch (...) {
    std::filesystem::remove_all(dir);
    throw;
  }
  std::filesystem::remove_all(dir);
  return max_over(world, step_s);
}

Measured measure(const plan::Prediction& p, const plan::Cluster& cl, const plan::ModelSpec& m,
                 int64_t seq, int iters, comm::Communicator& world) {
  const int P = world.size();
  const seqpar::AttnConfig cfg = plan::attention_config(m, seq, p.cand);
  const std::vector<int> device_of = plan::candidate_devices(p.cand, P);
  const int layout_rank = plan::inverse_order(device_of)[world.rank()];
  comm::Communicator group = world.split(0, layout_rank);  // rank in group = layout rank
  Measured r;
  r.pred = p;
  r.attn = plan::predict_attention(cl, cfg, P, device_of);

  const int64_t n = int64_t(m.batch) * seq / P, D = cfg.head_dim;
  std::vector<float> q(size_t(n * cfg.heads * D)), k(size_t(n * cfg.kv_heads * D)), v(k.size());
  std::vector<float> dout(q.size()), o(q.size()), lse(size_t(n * cfg.heads)), dq(q.size()),
      dk(k.size()), dv(k.size());
  std::mt19937 rng(99 + layout_rank);
  std::uniform_real_distribution<float> u(-1, 1);
  for (auto* t : {&q, &k, &v, &dout})
    for (auto& x : *t) x = u(rng);
  seqpar::DistAttention attn(cfg, group);
  std::vector<double> f, b, ef, eb;
  for (int it = 0; it <= iters; ++it) {  // iteration 0 warms up
    group.barrier();
    attn.forward(q.data(), k.data(), v.data(), o.data(), lse.data());
    attn.backward(q.data(), k.data(), v.data(), o.data(), lse.data(), dout.data(), dq.data(),
                  dk.data(), dv.data());
    if (it == 0) continue;
    const auto& st = attn.stats();
    f.push_back(st.fwd_ms);
    b.push_back(st.bwd_ms);
    ef.push_back(st.exposed_comm_fwd_ms);
    eb.push_back(st.exposed_comm_bwd_ms);
  }
  r.fwd_ms = max_over(world, median(f));
  r.bwd_ms = max_over(world, median(b));
  r.exposed_fwd_ms = max_over(world, median(ef));
  r.exposed_bwd_ms = max_over(world, median(eb));
  return r;
}

int run_tune(const TuneOptions& o, comm::Communicator& world) {
  const int P = world.size(), rank = world.rank();
  WF_USAGE_CHECK(!o.model.empty() && !o.seq.empty(),
                 "tune needs --model FILE and --seq N (or --calibrate)");
  WF_USAGE_CHECK(o.top >= 1 && o.iters >= 1, "--top and --iters must be at least 1");
  WF_USAGE_CHECK(o.steps >= 0, "--steps must be 0 (attention only) or more");
  plan::PlanInput in;
  in.cluster = plan::load_cluster(o.cluster);
  in.model = plan::load_model(o.model);
  in.seq = plan::parse_tokens(o.seq);
  in.gpus = P;
  // The machine as this job sees it: its nodes and ranks per node; ranks beyond the cluster's
  // devices of a node share them, so each rank computes proportionally slower.
  const comm::Topology topo = comm::discover_topology();
  plan::Cluster& cl = in.cluster;
  const int per_node = topo.max_ranks_per_node();
  if (per_node > cl.devices_per_node) {
    const double share = double(cl.devices_per_node) / per_node;
    cl.gemm_flops *= share;
    cl.attention_flops *= share;
    cl.attention_fwd_flops *= share;
    cl.attention_bwd_flops *= share;
    cl.memory *= share;
    cl.memory_reserved *= share;
  }
  cl.nodes = topo.nodes();
  cl.devices_per_node = per_node;
  cl.devices_per_nic = per_node;

  std::vector<plan::Prediction> runnable;
  for (auto& p : plan::plan_all(in))
    if (p.feasible) runnable.push_back(p);
  WF_USAGE_CHECK(!runnable.empty(),
                 "no configuration of {} can run on {} ranks at seq {} (see wallfacer plan)",
                 in.model.name, P, in.seq);
  if (int(runnable.size()) > o.top) runnable.resize(o.top);

  const bool steps = o.steps > 0 && trains_steps(in.model);
  std::vector<Measured> results;
  for (const auto& p : runnable) {
    results.push_back(measure(p, cl, in.model, in.seq, o.iters, world));
    if (steps)
      results.back().step_ms = 1e3 * measure_training(p.cand, in.model, in.seq, o.steps, world);
  }
  if (rank != 0) {
    world.barrier();
    return 0;
  }

  auto total_pred = [](const Measured& r) { return (r.attn.fwd_s + r.attn.bwd_s) * 1e3; };
  auto total_meas = [](const Measured& r) { return r.fwd_ms + r.bwd_ms; };
  // The winner: the fastest measured training step, or attention when no steps ran.
  auto cost = [&](const Measured& r) { return steps ? r.step_ms : total_meas(r); };
  const Measured* best = &results.front();
  for (const auto& r : results)
    if (cost(r) < cost(*best)) best = &r;

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
    c["measured_exposed_comm_ms"] = {{"fwd", r.exposed_fwd_ms}, {"bwd", r.exposed_bwd_ms}};
    c["predicted_exposed_comm_ms"] = {{"fwd", r.attn.exposed_fwd_s * 1e3},
                                      {"bwd", r.attn.exposed_bwd_s * 1e3}};
    c["error"] = total_pred(r) / total_meas(r) - 1;
    if (r.step_ms > 0) {
      c["predicted_step_ms"] = r.pred.step_s * 1e3;
      c["measured_step_ms"] = r.step_ms;
      c["step_error"] = r.pred.step_s * 1e3 / r.step_ms - 1;
    }
    j["configs"].push_back(c);
  }
  j["winner"] = best->pred.cand.label();

  const std::string out = o.out.empty() ? "tuned.toml" : o.out;
  {
    const auto& c = best->pred.cand;
    std::ofstream f(out);
    WF_USAGE_CHECK(f.good(), "cannot write '{}' (check the directory)", out);
    const std::string measured =
        steps
            ? fmt::format("training step {:.1f} ms (predicted {:.1f} ms)", best->step_ms,
                          best->pred.step_s * 1e3)
            : fmt::format("attention {:.2f} ms forward + backward per layer (predicted {:.2f} ms)",
                          total_meas(*best), total_pred(*best));
    f << fmt::format(
        "# wallfacer tune: {} at seq {} on {} ranks ({}): fastest measured\n"
        "# {}. Rank order: {}.\n"
        "[parallel]\nsp = {}\nstrategy = \"{}\"\nteams = {}\nulysses = {}\nkeep_kv = {}\n",
        in.model.name, in.seq, P, in.cluster.name, measured, plan::placement_name(c.placement), P,
        seqpar::strategy_name(c.strategy), c.teams, c.ulysses, c.keep_kv);
  }
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
                 total_pred(r), total_meas(r), 100 * (total_pred(r) / total_meas(r) - 1));
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
