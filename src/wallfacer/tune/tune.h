#pragma once
// Measuring this machine (`wallfacer tune`): calibration of kernel and link rates into a cluster
// file, and the best predicted configurations run here against their prediction. The module on
// top of the library: it fits plan/'s cost model to what comm/ (the link probes), kernels/,
// seqpar/ (distributed attention) and train/ (training steps) measure. Every function taking a
// communicator is collective over it.

#include <cstdint>
#include <string>
#include <vector>

#include "wallfacer/comm/communicator.h"
#include "wallfacer/comm/link_probe.h"
#include "wallfacer/comm/topology.h"
#include "wallfacer/plan/cluster.h"
#include "wallfacer/plan/planner.h"

namespace wallfacer::tune {

using plan::AttentionPrediction;
using plan::Cluster;
using plan::Link;
using plan::ModelSpec;
using plan::PlanInput;
using plan::Prediction;

// ---------------------------------------------------------------------------------------------
// Calibration

// Flash attention on one block pair of 1024 x 1024 rows, 4 heads of head_dim, timed on every rank
// at once: 4 FLOPs per (query, key) pair, head and head dim forward, 10 backward.
struct AttnRates {
  int head_dim = 0;
  double fwd_s = 0, bwd_s = 0;        // this rank's seconds per call
  double fwd = 0, bwd = 0, both = 0;  // FLOP/s of the slowest rank
};

struct Calibration {
  int ranks = 0, threads = 0;
  int64_t gemm_n = 512;
  int gemm_c = 512, gemm_oc = 512;   // the dense product timed: (n x c) (c x oc)
  double gemm_flops = 0;             // FLOP/s of the slowest rank
  std::vector<AttnRates> attention;  // head dims 32, 64, 128
  int tile_q = 0, tile_k = 0;        // the forward kernel's tile at head dim 64
  comm::Topology topo;
  bool has_intra = false;  // ranks 0 and 1 share a node
  int other_node = 0;      // the first rank of node 1 (the rank count when there is one node)
  // Ping-pong samples (rank 0 <-> 1 inside a node, rank 0 <-> other_node between nodes) and, on
  // rank 0, their fitted links (inter = intra on one node).
  comm::LinkSamples intra_samples, inter_samples;
  Link intra, inter;
  comm::Spread share;  // node 0's card shared by its ranks (two nodes or more)
  comm::Spread pair;   // rank 0 to one node and to all others at once (three nodes or more)
  // Teams of `team_size` ranks on as many nodes (ranks j, j + P / team_size, ...), every team at
  // once, as WallFacer's teams gather and reduce across nodes (two nodes or more; 0: not
  // measured): an all-gather of team_floats per rank, then a reduce-scatter of as many per rank,
  // team_rounds times; the mean seconds of each over the rounds (the slowest rank). The share of
  // the other direction that an exchange both ways takes (Cluster::inter_duplex_sharing) is
  // fitted to them: fit_duplex_sharing over the planner's prediction of the same collectives.
  int team_size = 0;
  int64_t team_floats = 1 << 16;  // 256 KB
  int team_rounds = 8;
  double team_allgather_s = 0, team_reduce_scatter_s = 0;
  // The planner's time for the team collectives (both, one round) with full duplex cards and with
  // a full share, and the share fitted (rank 0).
  double team_predicted_full_duplex_s = 0, team_predicted_shared_s = 0, duplex_sharing = 0;
  int64_t allgather_floats = 1 << 18;  // 1 MB per rank
  double allgather_s = 0;              // measured, the slowest rank
  // By the planner's model of collectives on `cluster` (rank 0): the simulator runs Open MPI's
  // all-gather over the ranks as the job placed them on nodes.
  double allgather_predicted_s = 0;
  Cluster cluster;  // this machine (rank 0)

  // The all-gather's error of the prediction: measured / predicted - 1.
  double allgather_error() const { return allgather_s / allgather_predicted_s - 1; }
};

// Beyond this error (either way) the calibration says its all-gather check is off.
inline constexpr double kCheckTolerance = 0.25;

// Measures dense products, flash attention at head dims 32, 64 and 128 and the links between
// ranks (two ranks or more), every rank at once; rank 0 fits the links and describes the machine
// as a cluster. Error when the machine was too busy to fit its links.
Calibration calibrate(comm::Communicator& world);

// Writes a calibrated cluster to `path` as TOML, with a comment saying how it was measured.
void write_cluster_file(const Cluster& cluster, int ranks, const std::string& path);

// ---------------------------------------------------------------------------------------------
// Tuning

// The cluster as a job of this topology sees it: its nodes and ranks per node; ranks beyond the
// cluster's devices of a node share them, so each rank computes proportionally slower.
void fit_to_topology(Cluster& cluster, const comm::Topology& topo);

// One configuration: its prediction and, measured here, attention forward and backward of one
// layer (median over the iterations, the slowest rank) and the training step.
struct Measured {
  Prediction pred;
  AttentionPrediction attn;
  double fwd_ms = 0, bwd_ms = 0, exposed_fwd_ms = 0, exposed_bwd_ms = 0;
  // The slowest rank's forward + backward: the iteration (fwd_ms + bwd_ms, each the slowest
  // rank's, overstate it when ranks end the forward at different times).
  double iteration_ms = 0;
  double step_ms = 0;  // measured training step (0: not run)
  double predicted_ms() const { return (attn.fwd_s + attn.bwd_s) * 1e3; }
  double measured_ms() const { return iteration_ms; }
};

// Training steps are run for causal GPT models (what `wallfacer train` trains with a text corpus).
bool trains_steps(const ModelSpec& m);

struct TuneResult {
  comm::Topology topo;
  PlanInput in;                   // the cluster fitted to the topology
  bool steps = false;             // whether training steps ran
  std::vector<Measured> results;  // the best predicted feasible configurations, best first
  size_t best = 0;  // the fastest measured training step, or attention when no steps ran
};

// Plans `in` for the world's ranks on the cluster fitted to the job's topology, then measures the
// `top` best feasible configurations: attention over `iters` iterations after a warm-up, and
// `steps` training steps after a warm-up step (causal GPT models; 0: none) on random tokens in a
// temporary folder of $TMPDIR (or /tmp). UsageError when no configuration is feasible.
TuneResult tune(PlanInput in, int top, int iters, int steps, comm::Communicator& world);

// Writes the winner's [parallel] section to `path`, with a comment naming what was measured.
void write_tuned_config(const TuneResult& t, const std::string& path);

}  // namespace wallfacer::tune
