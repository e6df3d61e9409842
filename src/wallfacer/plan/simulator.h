#pragma once
// Replays the per-rank programs of a schedule on a modelled machine, without MPI.
//
// Cost model (α–β per link class), as a discrete-event simulation in time order:
// - a message waits out the latency of its link class (intra.latency inside a node, inter.latency
//   between nodes) and then streams its bytes; its rate is the link bandwidth divided by the number
//   of transfers in flight on its busiest resource: the sending and the receiving device port for a
//   message inside a node, the sending and the receiving network card (shared by devices_per_nic
//   devices) for one between nodes, and between nodes also the pair of nodes (pair_bandwidth
//   divided by the transfers from the one node to the other, when the cluster caps a pair).
//   Alone on its link, b bytes take latency + b / bandwidth. Where the cluster says so
//   (inter_shared_duplex), a message between nodes while the same two ranks also send the other way
//   (one TCP connection carrying data both ways, the acknowledgements of each direction queued
//   behind the other's data) also counts on the source card's ingress and the destination card's
//   egress: measured on the emulated cluster, two ranks of different nodes exchanging at once get
//   half the card each way, two that send to and receive from different ranks get all of it;
// - a transfer starts when both its send and its receive are posted and proceeds independently of
//   compute: a Wait blocks only for what is still in flight (double buffering hides the rest);
// - collectives run by their algorithm on the group in its rank order once every member arrived
//   (collective_steps): all-gather and all-to-all as Open MPI 4.1's tuned component picks them
//   (all-gather: recursive doubling, or Bruck's for group sizes not a power of two, below 32
//   ranks, the ring from 32; all-to-all: every message at once or pairwise steps, by group size
//   and bytes per peer); reduce-scatter as Communicator::reduce_scatter_sum runs it, every block
//   at once; all-reduce as a ring, 2(n−1) steps of 1/n of the buffer. A step's
//   transfers are flows like the point-to-point ones, sharing ports, cards and node pairs with
//   everything else in flight (other collectives, double-buffered hops); the next step starts
//   when the last of them ends;
// - compute takes flops / rate, with one rate each for the attention forward, the attention
//   backward and dense products.

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "wallfacer/plan/cluster.h"

namespace wallfacer::plan {

enum class Work { AttentionFwd, AttentionBwd, Gemm };
enum class Coll { AllGather, ReduceScatter, AllReduce, AllToAll };

// One message of a collective's step: from and to are positions in the group.
struct CollTransfer {
  int from = 0, to = 0;
  double bytes = 0;
};
// The steps of collective c on a group of n (see the cost model above; `bytes` as Op::bytes): the
// messages of one step all run at once, the next step starts when they all arrived.
std::vector<std::vector<CollTransfer>> collective_steps(Coll c, int n, double bytes);

struct Op {
  enum class Kind { Compute, Send, Recv, Wait, Collective };
  Kind kind = Kind::Compute;
  Work work = Work::Gemm;
  double flops = 0;
  int peer = -1;     // Send / Recv: layout rank
  double bytes = 0;  // Send / Recv: the message. Collective: all-gather: each rank's piece;
                     // reduce-scatter: each rank's result piece; all-reduce: the whole buffer;
                     // all-to-all: the piece for one peer.
  int tag = 0;
  int request = -1;  // Send / Recv: the request it creates (per rank); Wait: the one it waits for
  Coll coll = Coll::AllGather;
  int group = -1;  // Collective: index into Program::groups

  static Op compute(Work w, double flops);
  static Op send(int peer, double bytes, int request, int tag = 0);
  static Op recv(int peer, double bytes, int request, int tag = 0);
  static Op wait(int request);
  static Op collective(Coll c, int group, double bytes);
};

// The ordered ops of every rank of a layout, and the collective groups they use.
struct Program {
  explicit Program(int ranks = 0) : ops(ranks) {}
  std::vector<std::vector<Op>> ops;      // per layout rank
  std::vector<std::vector<int>> groups;  // member layout ranks, in ring order
  int ranks() const { return static_cast<int>(ops.size()); }
  // Index of this group, adding it when new (found by a hash of its members, which `index` keeps
  // for the groups listed so far; groups added to `groups` directly are indexed on the next call).
  int group(const std::vector<int>& members);
  // Appends `other` to every rank (same rank count); its groups are merged, its request ids
  // shifted past this program's.
  void append(const Program& other);

 private:
  struct MembersHash {
    size_t operator()(const std::vector<int>& g) const;
  };
  std::unordered_map<std::vector<int>, int, MembersHash> index_;
};

// The machine one program runs on: the cluster's links and rates and the device of each rank.
struct Machine {
  Link intra, inter;
  int devices_per_node = 1;
  int devices_per_nic = 1;
  double pair_bandwidth = 0;   // cap on the traffic between two nodes, each way (0: none)
  // Cluster::duplex_sharing(): the share of the other direction a message both ways between two
  // nodes takes (0: full duplex cards).
  double duplex_sharing = 0;
  double gemm_flops = 1, attention_fwd_flops = 1, attention_bwd_flops = 1;
  std::vector<int> device_of;  // layout rank -> device

  // head_dim: the attention rates for heads of that size (0: the cluster's own rates).
  static Machine from(const Cluster& c, std::vector<int> device_of, int head_dim = 0);
  int node(int rank) const { return device_of[rank] / devices_per_node; }
  int nic(int rank) const { return device_of[rank] / devices_per_nic; }
  bool same_node(int a, int b) const { return node(a) == node(b); }
};

struct RankTime {
  double finish = 0;                     // s
  double compute = 0;                    // s of compute
  double p2p_bytes = 0, coll_bytes = 0;  // bytes this rank sends (collectives: their algorithm)
  double inter_bytes = 0;                // of those, the bytes that leave the node
  double inter_recv_bytes = 0;  // bytes this rank receives from other nodes (through its card)
};

struct SimResult {
  double time = 0;          // s: the last rank's finish
  double exposed_comm = 0;  // s: finish minus compute at the last rank to finish
  double compute = 0;       // s: compute of that rank
  std::vector<RankTime> ranks;
};

// One op of one rank in the simulated run (s): compute from start to end; a send or receive from
// its post to the completion of its transfer; a wait or collective from the rank's arrival to its
// release (a wait that finds its transfer done lasts 0).
struct SimSpan {
  int rank = 0;
  int op = 0;  // index into prog.ops[rank]
  double t0 = 0, t1 = 0;
};

// Throws wallfacer::Error on a malformed program (unmatched transfer, deadlock, bad group).
// `spans`, when given, receives every op of every rank (in no particular order).
//
// A program of R ranks on a machine of N = m.device_of.size() ranks, R < N (R divides N), is the
// quotient of a periodic program of N ranks: the caller vouches that rank x + R runs rank x's ops
// with every peer shifted by R (mod N), and that the shift maps devices to devices, nodes to nodes
// and cards to cards (the ranks 0..R-1 fill whole nodes; whole cards suffice where no node pair
// is capped, pair_bandwidth = 0, and no duplex shared). Only ranks 0..R-1 run; a transfer with
// a rank outside them is matched and timed as its image under the shift whose source is simulated
// (what x + R receives from y + R is what x receives from y), and a device, card or node pair
// outside them carries what its image carries. A collective group lies within 0..R-1, or the
// shift maps it onto itself and its algorithm's steps onto themselves (each transfer from member
// i to member j onto the one from i + k to j + k, k the positions the shift moves a member by):
// such a collective starts when its members inside 0..R-1 arrived, and only their transfers run
// (the others' are their images). The result is the one of the whole program, with `ranks`
// holding ranks 0..R-1 (every other rank equals its image). attention_period
// (plan/attention_program.h) finds R for an attention.
SimResult simulate(const Program& prog, const Machine& m, std::vector<SimSpan>* spans = nullptr);

}  // namespace wallfacer::plan
