#pragma once
// The planner: predicts one training step of a model on a cluster for every sequence-parallel
// configuration, by replaying the seqpar schedules (the ones the executor runs) in the simulator,
// and ranks them by tokens/s.
//
// Step time = layers x (dense compute of the layer: forward, backward, recompute when checkpointed
//             + attention forward + attention backward, both simulated from the schedules)
//           + LM head compute + the exposed part of the gradient all-reduce.
// Memory per device = parameters, gradients and optimizer state (ZeRO stage of the cluster file)
//           + activations kept for the backward + one layer's working set
//           + the attention schedule's scratch buffers (gathered team Q, K, V, double buffers, ...)
//           + logits, and must fit in memory - memory_reserved.
//
// The entry point is plan_all: a cluster (load_cluster / parse_cluster, plan/cluster.h), a model
// (load_model / parse_model, plan/model.h), a sequence length and a device count in; every
// configuration's prediction out, best first. No MPI, no global state: the functions here are
// pure computations, callable from any thread and any process (one rank is enough). Units:
// seconds, bytes, FLOP/s and tokens/s. Bad input (gpus outside the cluster, seq < 1) throws
// UsageError; a configuration that cannot run is listed as infeasible with its reason.
//
// To run a prediction: attention_config(model, seq, cand, dtype) is the seqpar::AttnConfig of the
// candidate, and candidate_devices(cand, P) its rank order (seqpar/attention.h, Placement).

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "wallfacer/plan/cluster.h"
#include "wallfacer/plan/model.h"
#include "wallfacer/plan/placement.h"
#include "wallfacer/seqpar/config.h"

namespace wallfacer::plan {

// One sequence-parallel configuration. Hybrids: Ulysses of degree `ulysses` inside teams of
// consecutive ranks times a ring (zigzag when causal) over the P / ulysses teams.
struct Candidate {
  seqpar::Strategy strategy = seqpar::Strategy::Ring;
  int teams = 1;    // C for WallFacer
  int ulysses = 1;  // > 1 and < P: a Ulysses hybrid (strategy is then Ring, Zigzag or WallFacer)
  Placement placement = Placement::Default;
  // The double ring's inner ring length W (seqpar::AttnConfig::inner): the devices of a node.
  int inner = 1;
  // WallFacer: the forward's placed K,V kept for the backward (seqpar::AttnConfig::keep_kv); the
  // planner keeps them when the memory allows.
  bool keep_kv = false;
  std::string strategy_label()
      const;  // ring, zigzag, ulysses, wallfacer, double-ring, ulysses x ..
  // e.g. "wallfacer C=2 ring-intra", "ulysses4 x zigzag team-intra", "double-ring W=8" (keep_kv
  // is reported apart)
  std::string label() const;
};

struct Prediction {
  Candidate cand;
  int P = 0;
  bool feasible = false;
  std::string reason;  // why not feasible (empty when feasible)
  double step_s = 0, tokens_per_s = 0;
  double exposed_comm_s = 0;              // communication not hidden behind compute, whole step
  double attn_fwd_s = 0, attn_bwd_s = 0;  // one layer, slowest rank
  double dense_s = 0;                     // dense compute of the whole step
  double grad_sync_s = 0;                 // gradient all-reduce (whole), and its exposed part:
  double grad_sync_exposed_s = 0;
  double memory_bytes = 0;  // per device, all of it (the header's list)
  // Of it, the attention's per device: one layer's q, k, v and o (its rows, all heads), the K,V
  // that keep_kv holds from every layer's forward to its backward, and the schedule's scratch
  // buffers (its BufferSpecs: gathered team blocks, ring double buffers, query packages, ...).
  double attention_memory_bytes = 0;
  double p2p_bytes = 0, coll_bytes = 0, inter_bytes = 0;  // per layer fwd+bwd, busiest rank
};

struct PlanInput {
  Cluster cluster;
  ModelSpec model;
  int64_t seq = 0;  // tokens per sequence
  int gpus = 0;     // devices in the sequence-parallel group (the first gpus of the cluster)
  // Simulate every rank (plan --exact). Otherwise ranks that do the same work are simulated once
  // (attention_period, plan/attention_program.h) and the all-reduce's alike steps once: the same
  // prediction within rounding, in a time that grows with the work of one period of ranks.
  bool exact = false;
};

// Every configuration worth listing for P = input.gpus (each WallFacer C with C^2 | P, its two
// placements, hybrids whose degrees divide the heads).
std::vector<Candidate> candidates(const PlanInput& in);

Prediction predict(const PlanInput& in, const Candidate& c);

// The most devices plan_all predicts; larger groups are refused with a UsageError naming --gpus.
// A candidate whose ranks repeat with a period R (attention_period) costs the simulation of R
// ranks; one without (WallFacer-C, whose placement and sub-rings admit no such shift, and the
// contiguous causal ring, whose ranks see different numbers of blocks) replays every rank's
// schedule (Ulysses x WallFacer-C one Ulysses team member in d, attention_period's rotation), in a
// time and memory that grow with the square of the device count (at 1,024 devices seconds and a
// few GB; the contiguous ring at 4,096 needs more than 14 GB: beyond 1,024 devices it is predicted
// from its prefixes, ring_from_prefixes). Such a
// candidate is simulated up to kMaxEveryRankDevices devices, or with PlanInput::exact; beyond,
// where the simulation of every rank runs at most kMaxEveryRankTransfers ops and collective
// messages (every_rank_transfers: the whole ring, or the three cut rings of predict_attention
// together), or on a rotation's quotient of at most max_rotated_ranks(u) ranks, else
// predict_attention refuses it (UsageError: the plan lists it as not predicted, with the reason).
// Where every rank may be simulated, a rotation's quotient of fewer ranks is taken in its place.
constexpr int kMaxPlanDevices = 4096;
constexpr int kMaxEveryRankDevices = 1024;
constexpr int kCutRingSteps = 6;
constexpr double kSteadyRingTolerance = 1e-3;
constexpr double kMaxEveryRankTransfers = 5e6;
// Where every rank may not be simulated, Ulysses x WallFacer-C is still simulated on a rotation's
// quotient (attention_period) of at most kMaxRotatedRanks ranks, or of up to kMaxEveryRankDevices
// where its ranks times the Ulysses degree u (each rank's messages in an all-to-all, what the time
// grows with) stay within kMaxRotatedAllToAll: max_rotated_ranks(u).
constexpr int kMaxRotatedRanks = 512;
constexpr int kMaxRotatedAllToAll = 4096;
int max_rotated_ranks(int ulysses);
// What the simulation of every rank of cfg's schedules on P ranks (the team ring cut to
// ring_steps steps; 0: whole) runs, counted without it: the sends, receives, waited requests and
// computes (summed per step, as the planner simulates them) of ring rank 1's schedule (one that
// sends WallFacer's placement hop), and for each of its collectives its algorithm's messages per
// member (collective_steps), times P. What the time and memory of that simulation grow with.
double every_rank_transfers(const seqpar::AttnConfig& cfg, int P, int ring_steps);

// The steps of cfg's team ring on P ranks (G = P / (u C^2)); 0 for another strategy.
int team_ring_length(const seqpar::AttnConfig& cfg, int P);

// Every candidate of `in` predicted: the feasible ones first by tokens/s (descending), then the
// infeasible ones (Prediction::reason says why: memory, divisibility, ...). The candidates are
// shared out over num_threads() threads (core/threads.h); the result does not depend on them.
// `progress`, when given, is called (one call at a time, from any of those threads) with 0 and
// the total first, then after each candidate with the number done and the total.
std::vector<Prediction> plan_all(const PlanInput& in,
                                 const std::function<void(int done, int total)>& progress = {});

// The attention of one layer alone, as the simulator sees it (used by tune and the validation).
struct AttentionPrediction {
  double fwd_s = 0, bwd_s = 0;
  double exposed_fwd_s = 0, exposed_bwd_s = 0;
  double p2p_bytes = 0, coll_bytes = 0, inter_bytes = 0;  // fwd + bwd, busiest rank
  double scratch_elements = 0;  // largest scratch buffers of one rank (elements)
  double kept_elements = 0;     // held from the forward to the backward (keep_kv), per layer
  int period = 0;               // ranks simulated (attention_period)
  // 0: the whole ring simulated; else the team ring cut to this many steps (and to 2 and 4
  // fewer), the rest counted from their difference (predict_attention).
  int ring_steps = 0;
  // 0: every rank (or a period) simulated; else the contiguous causal ring's first this many ranks
  // (and two shorter prefixes), the rest counted from their difference (ring_from_prefixes).
  int prefix_ranks = 0;
};
// `device_of`: layout rank -> device of the cluster. Throws UsageError when cfg cannot run.
// A hybrid is cfg.ulysses > 1.
// Unless exact, a team ring (ring, zigzag, WallFacer-C and their hybrids) of G > K =
// kCutRingSteps steps whose blocks all make every hop (not the contiguous causal ring; no
// documents or window) is simulated cut to K - 4, K - 2 and K steps (seqpar::make_schedule's
// ring_steps). Where the time of the forward and of the backward grows by the same amount, within
// kSteadyRingTolerance, over the first two steps added as over the next two (two: the double
// buffers alternate), each two of the G - K steps left out add that amount (and the bytes theirs);
// else K doubles, up to the whole ring. A ring is cut where the three cut rings hold fewer steps
// than the whole ring (3K - 6 < G), or beyond kMaxEveryRankDevices devices (where the whole ring
// of a candidate without a period is simulated only if short). Beyond kMaxEveryRankDevices every
// rank of the three cut rings is simulated where every_rank_transfers of the three, summed, stay
// within kMaxEveryRankTransfers, and every rank of a ring not cut (G <= K: WallFacer-32 and -64
// on 4,096 devices, ...) where its own do, where no period or rotation applies. The contiguous
// causal ring (whose forward alone computes P (P + 1) / 2 blocks) beyond kMaxEveryRankDevices:
// ring_from_prefixes with its largest prefix kRingPrefixRanks, then twice that, up to
// kMaxEveryRankDevices, until one is steady.
AttentionPrediction predict_attention(const Cluster& cl, const seqpar::AttnConfig& cfg, int P,
                                      const std::vector<int>& device_of, bool exact = false);

// The contiguous causal ring of P ranks from its prefixes: its K,V blocks only travel up the ring
// (rank r gets the blocks of ranks 0..r - 1, and the last rank sends the dK,dV of the blocks that
// stop there home), so its first Q ranks, with the same block per rank (seq Q / P) on the same
// devices, are a contiguous causal ring of Q ranks whose last rank ends it, as rank P - 1 ends the
// whole ring. Every rank of the prefixes of Q = largest - 2 step, largest - step and largest ranks
// is simulated; where the forward's and the backward's times grow by the same amount, within
// kSteadyRingTolerance, from the first to the second as from the second to the third, each step of
// the P - largest ranks left out adds that amount (and the bytes theirs). step: a multiple of the
// devices of a node, so that the prefixes end at the same place of a node. Empty when not steady.
constexpr int kRingPrefixRanks = 128;
std::optional<AttentionPrediction> ring_from_prefixes(const Cluster& cl,
                                                      const seqpar::AttnConfig& cfg, int P,
                                                      const std::vector<int>& device_of,
                                                      int largest, int step);

// The bytes that cross node boundaries in one forward and one backward of an attention, as the
// schedules send them (collectives by the simulator's algorithms): what each node's network card
// sends. `node_of`: layout rank -> node index (any numbering 0..nodes-1).
struct NodeBytes {
  std::vector<double> fwd, bwd;  // per node: bytes its card sends
  double total_fwd = 0, total_bwd = 0;
};
NodeBytes node_bytes(const seqpar::AttnConfig& cfg, int P, const std::vector<int>& node_of);

// The same per network card, forward and backward together: what each card of each node sends to
// and receives from other nodes, on nodes of `devices_per_node` devices with one card per
// `devices_per_nic` of them (device d on node d / devices_per_node, card (d % devices_per_node) /
// devices_per_nic). A message between nodes leaves by its sender's card and enters by its
// receiver's, whichever cards those are (cross-rail included). `device_of`: layout rank -> device.
struct CardBytes {
  std::vector<std::vector<double>> sent, received;  // [node][card]
};
CardBytes card_bytes(const seqpar::AttnConfig& cfg, int P, const std::vector<int>& device_of,
                     int devices_per_node, int devices_per_nic);

// The attention's element type on a cluster: its device.dtype (fp32; bf16 and fp16, 2 bytes, run
// as the bf16 wire format of seqpar::Dtype::bf16).
seqpar::Dtype attention_dtype(const Cluster& cl);

// The AttnConfig the candidate runs for this model and sequence (for hybrids, of the whole group),
// in `dtype` (the planner's predictions use attention_dtype of the cluster).
seqpar::AttnConfig attention_config(const ModelSpec& m, int64_t seq, const Candidate& c,
                                    seqpar::Dtype dtype = seqpar::Dtype::fp32);

// The rank order of the candidate's layout under its placement (layout rank -> device).
std::vector<int> candidate_devices(const Candidate& c, int P);

}  // namespace wallfacer::plan
