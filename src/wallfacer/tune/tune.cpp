#include "wallfacer/tune/tune.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <random>

#include "wallfacer/core/error.h"
#include "wallfacer/core/threads.h"
#include "wallfacer/core/timer.h"
#include "wallfacer/kernels/attention.h"
#include "wallfacer/kernels/attention_params.h"
#include "wallfacer/kernels/ops.h"
#include "wallfacer/plan/calibrate.h"
#include "wallfacer/plan/simulator.h"
#include "wallfacer/seqpar/attention.h"
#include "wallfacer/seqpar/harness.h"
#include "wallfacer/train/data.h"
#include "wallfacer/train/trainer.h"

namespace wallfacer::tune {

using namespace wallfacer::plan;

namespace {

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

// Rank 0: the machine as a cluster, from the measurements of `cal`.
Cluster describe_machine(const Calibration& cal) {
  const comm::Topology& topo = cal.topo;
  const int per_node = topo.max_ranks_per_node();
  const Link link = cal.has_intra ? cal.intra : cal.inter;
  const AttnRates& a64 = cal.attention[1];
  Cluster c;
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
      host, cores, blas_core_name(), cal.ranks, cal.threads, date);
  c.nodes = std::max(1, topo.nodes());
  // A device is a rank at the rate measured: with more ranks than cores, each got a share.
  c.devices_per_node =
      std::max(int(std::max<long>(1, cores / std::max(1, cal.threads))), topo.max_ranks_per_node());
  c.device = "CPU core";
  c.gemm_flops = cal.gemm_flops;
  c.attention_flops = a64.both;
  c.attention_fwd_flops = a64.fwd;
  c.attention_bwd_flops = a64.bwd;
  for (const AttnRates& r : cal.attention) {
    c.attention_head_dims.push_back(r.head_dim);
    c.attention_fwd_by_head_dim.push_back(r.fwd);
    c.attention_bwd_by_head_dim.push_back(r.bwd);
  }
  c.attention_tile_q = cal.tile_q;
  c.attention_tile_k = cal.tile_k;
  const double mem = double(sysconf(_SC_PHYS_PAGES)) * double(sysconf(_SC_PAGE_SIZE));
  c.memory = mem / c.devices_per_node;
  c.memory_reserved = 0.1 * c.memory;
  c.dtype_bytes = 4;
  c.intra = link;
  c.inter = cal.inter;  // one node: the same as inside it
  // Between nodes, the card's rate is what 4 MB messages stream at (the fastest of the probes
  // that send one alone) where that is below the ping-pong's fit: a shaped card lets the first
  // bytes of a message through at a burst rate that back-to-back messages never see again.
  if (topo.nodes() > 1)
    c.inter.bandwidth = streaming_bandwidth(c.inter.bandwidth, {cal.share.alone, cal.pair.alone});
  c.devices_per_nic = c.devices_per_node;
  if (topo.nodes() > 1) {
    // Ranks are the devices: a node holds as many as the job put there.
    c.devices_per_node = per_node;
    c.memory = mem / per_node;
    c.memory_reserved = 0.1 * c.memory;
    c.devices_per_nic =
        devices_per_nic(cal.share.transfers, cal.share.alone, cal.share.together, per_node);
    if (pair_capped(cal.pair.transfers, cal.pair.alone, cal.pair.together)) {
      // The ping-pong and the card test ran between two nodes: they saw the pair's cap. The card
      // carries at least what rank 0 sent to all nodes at once; which ranks share it cannot be
      // told apart from the cap, so the node's ranks share one card.
      c.inter_pair_bandwidth = cal.inter.bandwidth;
      c.inter.bandwidth = cal.pair.together;
      c.devices_per_nic = per_node;
    }
  }
  return c;
}

// The time of one collective `coll` of `bytes` (per rank, or per peer for the reduce-scatter) in
// each of `groups` at once, as the planner predicts it on `cluster`: the ranks are the devices of
// their nodes, in rank order.
double predict_collective(const Cluster& cluster, const comm::Topology& topo,
                          const std::vector<std::vector<int>>& groups, Coll coll, double bytes) {
  const int P = int(topo.node_of.size());
  std::vector<int> device_of(static_cast<size_t>(P)),
      used(static_cast<size_t>(std::max(1, topo.nodes())), 0);
  for (int r = 0; r < P; ++r) {
    const int node = topo.node_of[size_t(r)];
    device_of[size_t(r)] = node * cluster.devices_per_node + used[size_t(node)]++;
  }
  Program prog(P);
  for (const std::vector<int>& members : groups) {
    const int g = prog.group(members);
    for (int r : members) prog.ops[size_t(r)].push_back(Op::collective(coll, g, bytes));
  }
  return simulate(prog, Machine::from(cluster, device_of)).time;
}

// The teams of `size` ranks j, j + P / size, ... (calibrate's team collectives).
std::vector<std::vector<int>> strided_teams(int P, int size) {
  std::vector<std::vector<int>> teams(size_t(P / size));
  for (int r = 0; r < P; ++r) teams[size_t(r % (P / size))].push_back(r);
  return teams;
}

// The largest team size of 4 or 2 whose strided teams hold each member on its own node (0: none).
int team_size_across_nodes(const comm::Topology& topo) {
  const int P = int(topo.node_of.size());
  for (int size : {4, 2}) {
    if (P % size != 0 || size > topo.nodes()) continue;
    bool apart = true;
    for (const auto& team : strided_teams(P, size))
      for (size_t i = 0; i < team.size(); ++i)
        for (size_t j = 0; j < i; ++j)
          apart = apart && topo.node_of[size_t(team[i])] != topo.node_of[size_t(team[j])];
    if (apart) return size;
  }
  return 0;
}

// Times calibrate's team collectives (Calibration::team_size).
void time_team_collectives(comm::Communicator& world, Calibration& cal) {
  const int P = world.size(), size = cal.team_size;
  comm::Communicator team = world.split(world.rank() % (P / size), world.rank());
  const int64_t n = cal.team_floats;
  std::vector<float> in(static_cast<size_t>(n) * size, 1.f), out(in.size());
  team.all_gather(in.data(), n, out.data());  // every connection set up
  team.reduce_scatter_sum(in.data(), out.data(), n);
  for (int round = 0; round < cal.team_rounds; ++round) {
    world.barrier();
    Timer ag;
    team.all_gather(in.data(), n, out.data());
    cal.team_allgather_s += max_over(world, ag.seconds()) / cal.team_rounds;
    world.barrier();
    Timer rs;
    team.reduce_scatter_sum(in.data(), out.data(), n);
    cal.team_reduce_scatter_s += max_over(world, rs.seconds()) / cal.team_rounds;
  }
}

// Fits the cluster's duplex sharing to the team collectives (rank 0).
void fit_team_duplex(Calibration& cal) {
  Cluster& c = cal.cluster;
  const int P = int(cal.topo.node_of.size());
  const auto teams = strided_teams(P, cal.team_size);
  const double bytes = double(cal.team_floats) * sizeof(float);
  auto predicted = [&](double s) {
    Cluster x = c;
    x.inter_shared_duplex = s > 0;
    x.inter_duplex_sharing = s > 0 ? s : 1.0;
    return predict_collective(x, cal.topo, teams, Coll::AllGather, bytes) +
           predict_collective(x, cal.topo, teams, Coll::ReduceScatter, bytes);
  };
  cal.team_predicted_full_duplex_s = predicted(0.0);
  cal.team_predicted_shared_s = predicted(1.0);
  cal.duplex_sharing =
      fit_duplex_sharing(predicted, cal.team_allgather_s + cal.team_reduce_scatter_s);
  c.inter_shared_duplex = cal.duplex_sharing >= kMinDuplexSharing;
  c.inter_duplex_sharing = c.inter_shared_duplex ? cal.duplex_sharing : 1.0;
}

}  // namespace

Calibration calibrate(comm::Communicator& world) {
  const int P = world.size(), rank = world.rank();
  WF_CHECK(P >= 2, "calibration measures links between ranks: it needs two ranks or more");
  Calibration cal;
  cal.ranks = P;
  cal.threads = num_threads();
  cal.topo = comm::discover_topology();
  const comm::Topology& topo = cal.topo;

  // Dense products, every rank at once (the rate one rank sees when all of them compute).
  const int64_t N = cal.gemm_n;
  const int Cm = cal.gemm_c, OC = cal.gemm_oc;
  std::vector<float> a(size_t(N * Cm)), w(size_t(OC) * Cm), y(size_t(N * OC));
  std::mt19937 rng(1234 + rank);
  std::uniform_real_distribution<float> u(-1, 1);
  for (auto* v : {&a, &w})
    for (auto& x : *v) x = u(rng);
  world.barrier();
  const double t_mm = time_per_call(
      [&] { kernels::matmul_fwd(y.data(), a.data(), w.data(), nullptr, N, Cm, OC); }, 0.5);
  cal.gemm_flops = min_over(world, 2.0 * N * Cm * OC / t_mm);

  // Flash attention for head dims 32, 64 and 128 (64 gives the device's own rates).
  for (int D : {32, 64, 128}) cal.attention.push_back(time_attention(world, D, rng));
  const kernels::AttnTiling tile =
      kernels::attn_fwd_tiling(kernels::AttnDims{1, 1024, 1024, 4, 4, 64});
  cal.tile_q = tile.block_q;
  cal.tile_k = tile.block_k;

  // Links: ping-pong inside a node (ranks 0 and 1 when they share it) and between nodes (rank 0
  // and the first rank of node 1), while the others wait.
  cal.other_node = int(std::find(topo.node_of.begin(), topo.node_of.end(), 1) -
                       topo.node_of.begin());  // P when there is one node
  cal.has_intra = topo.node_of[0] == topo.node_of[1];
  if (cal.has_intra) cal.intra_samples = comm::ping_pong(world, 0, 1);
  if (cal.other_node < P) cal.inter_samples = comm::ping_pong(world, 0, cal.other_node);
  // How the ranks of node 0 share its card: each sends one message to a rank of node 1, one of
  // them alone and then all at once.
  if (cal.other_node < P) cal.share = comm::card_share(world, topo);
  if (topo.nodes() >= 3) cal.pair = comm::pair_cap(world, topo);
  cal.team_size = team_size_across_nodes(topo);
  if (cal.team_size > 0) time_team_collectives(world, cal);
  world.barrier();

  // All-gather of 1 MB per rank, to compare with what the fitted link predicts.
  const int64_t ag = cal.allgather_floats;
  std::vector<float> ag_in(static_cast<size_t>(ag)), ag_out(static_cast<size_t>(ag) * P);
  world.barrier();
  cal.allgather_s = max_over(world, collective_time_per_call(world, [&] {
                               world.all_gather(ag_in.data(), ag, ag_out.data());
                             }));

  if (rank == 0) {
    if (cal.has_intra) cal.intra = fit_link(cal.intra_samples.bytes, cal.intra_samples.seconds);
    cal.inter = cal.other_node < P ? fit_link(cal.inter_samples.bytes, cal.inter_samples.seconds)
                                   : cal.intra;
    cal.cluster = describe_machine(cal);
    if (cal.team_size > 0) fit_team_duplex(cal);
    std::vector<int> all(static_cast<size_t>(P));
    std::iota(all.begin(), all.end(), 0);
    cal.allgather_predicted_s =
        predict_collective(cal.cluster, topo, {all}, Coll::AllGather, double(ag) * sizeof(float));
  }
  return cal;
}

void write_cluster_file(const Cluster& cluster, int ranks, const std::string& path) {
  std::ofstream f(path);
  WF_USAGE_CHECK(f.good(), "cannot write '{}' (check the directory)", path);
  f << "# This machine, as measured by `mpirun -np " << ranks
    << " wallfacer tune --calibrate`. Units: FLOP/s, bytes, bytes/s, seconds.\n"
    << cluster_to_toml(cluster);
}

// ---------------------------------------------------------------------------------------------
// Tuning

namespace {

// Mean seconds of the training steps after the first of a `steps`-step GPT run of configuration
// `c` on random tokens: the trainer of `wallfacer train` with the model's shapes, no evaluation,
// no checkpoints, nothing printed. Every rank writes its own token files under a temporary folder
// of $TMPDIR (or /tmp), removed afterwards.
double measure_training(const Candidate& c, const ModelSpec& m, int64_t seq, int steps,
                        comm::Communicator& world) {
  train::TrainOptions opt;
  train::TrainConfig& cfg = opt.cfg;
  cfg.kind = train::ModelKind::Gpt;
  cfg.model.vocab = m.vocab;
  cfg.model.layers = m.layers;
  cfg.model.dim = m.dim;
  cfg.model.heads = m.heads;
  cfg.model.kv_heads = m.kv_heads;
  cfg.model.mlp_ratio = m.mlp_ratio;
  cfg.model.arch = m.arch == plan::ModelArch::Llama ? model::Arch::Llama : model::Arch::Gpt;
  cfg.model.intermediate = m.intermediate;
  cfg.model.tie_embeddings = m.tie_embeddings;
  cfg.model.qkv_bias = m.arch == plan::ModelArch::Llama && m.qkv_bias;
  cfg.seq = seq;
  cfg.batch = m.batch;
  cfg.steps = steps + 1;  // the first step warms up and is not timed
  cfg.warmup = 0;
  cfg.sp = world.size();
  cfg.parallel.strategy = c.strategy;
  cfg.parallel.teams = c.teams;
  cfg.parallel.ulysses = c.ulysses;
  cfg.parallel.keep_kv = c.keep_kv;
  cfg.checkpointing =
      m.checkpoint_attention ? model::Checkpointing::Attention : model::Checkpointing::None;
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

Measured measure(const Prediction& p, const Cluster& cl, const ModelSpec& m, int64_t seq, int iters,
                 comm::Communicator& world) {
  const int P = world.size();
  const seqpar::AttnConfig cfg = attention_config(m, seq, p.cand);
  const std::vector<int> device_of = candidate_devices(p.cand, P);
  const int layout_rank = inverse_order(device_of)[world.rank()];
  comm::Communicator group = world.split(0, layout_rank);  // rank in group = layout rank
  Measured r;
  r.pred = p;
  r.attn = predict_attention(cl, cfg, P, device_of);

  const int64_t n = int64_t(m.batch) * seq / P, D = cfg.head_dim;
  std::vector<float> q(size_t(n * cfg.heads * D)), k(size_t(n * cfg.kv_heads * D)), v(k.size());
  std::vector<float> dout(q.size()), o(q.size()), lse(size_t(n * cfg.heads)), dq(q.size()),
      dk(k.size()), dv(k.size());
  std::mt19937 rng(99 + layout_rank);
  std::uniform_real_distribution<float> u(-1, 1);
  for (auto* t : {&q, &k, &v, &dout})
    for (auto& x : *t) x = u(rng);
  seqpar::DistAttention attn(cfg, group);
  std::vector<seqpar::AttnStats> stats;
  for (int it = 0; it <= iters; ++it) {  // iteration 0 warms up
    group.barrier();
    attn.forward(q.data(), k.data(), v.data(), o.data(), lse.data());
    attn.backward(q.data(), k.data(), v.data(), o.data(), lse.data(), dout.data(), dq.data(),
                  dk.data(), dv.data());
    if (it > 0) stats.push_back(attn.stats());
  }
  // The slowest rank's medians, as `attn` reports them.
  const seqpar::RunSummary sum = seqpar::summarize_run(group, stats);
  r.fwd_ms = sum.fwd_ms;
  r.bwd_ms = sum.bwd_ms;
  r.exposed_fwd_ms = sum.exposed_fwd_ms;
  r.exposed_bwd_ms = sum.exposed_bwd_ms;
  r.iteration_ms = sum.iteration_ms;
  return r;
}

}  // namespace

void fit_to_topology(Cluster& cl, const comm::Topology& topo) {
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
}

bool trains_steps(const ModelSpec& m) { return m.kind == ModelKind::Gpt && m.causal; }

TuneResult tune(PlanInput in, int top, int iters, int steps, comm::Communicator& world) {
  const int P = world.size();
  TuneResult t;
  t.topo = comm::discover_topology();
  in.gpus = P;
  fit_to_topology(in.cluster, t.topo);
  t.in = in;

  std::vector<Prediction> runnable;
  for (auto& p : plan_all(in))
    if (p.feasible) runnable.push_back(p);
  WF_USAGE_CHECK(!runnable.empty(),
                 "no configuration of {} can run on {} ranks at seq {} (see wallfacer plan)",
                 in.model.name, P, in.seq);
  if (int(runnable.size()) > top) runnable.resize(top);

  t.steps = steps > 0 && trains_steps(in.model);
  for (const auto& p : runnable) {
    t.results.push_back(measure(p, in.cluster, in.model, in.seq, iters, world));
    if (t.steps)
      t.results.back().step_ms = 1e3 * measure_training(p.cand, in.model, in.seq, steps, world);
  }
  // The winner: the fastest measured training step, or attention when no steps ran.
  auto cost = [&](const Measured& r) { return t.steps ? r.step_ms : r.measured_ms(); };
  for (size_t i = 0; i < t.results.size(); ++i)
    if (cost(t.results[i]) < cost(t.results[t.best])) t.best = i;
  return t;
}

void write_tuned_config(const TuneResult& t, const std::string& path) {
  const Measured& best = t.results[t.best];
  const Candidate& c = best.pred.cand;
  const int P = t.in.gpus;
  std::ofstream f(path);
  WF_USAGE_CHECK(f.good(), "cannot write '{}' (check the directory)", path);
  const std::string measured =
      t.steps
          ? fmt::format("training step {:.1f} ms (predicted {:.1f} ms)", best.step_ms,
                        best.pred.step_s * 1e3)
          : fmt::format("attention {:.2f} ms forward + backward per layer (predicted {:.2f} ms)",
                        best.measured_ms(), best.predicted_ms());
  f << fmt::format(
      "# wallfacer tune: {} at seq {} on {} ranks ({}): fastest measured\n"
      "# {}. Rank order: {}.\n"
      "[parallel]\nsp = {}\nstrategy = \"{}\"\nteams = {}\nulysses = {}\nkeep_kv = {}\n",
      t.in.model.name, t.in.seq, P, t.in.cluster.name, measured, placement_name(c.placement), P,
      seqpar::strategy_name(c.strategy), c.teams, c.ulysses, c.keep_kv);
}

}  // namespace wallfacer::tune
