#pragma once
// A cluster as the planner sees it: nodes of devices, each device with a compute rate and memory,
// links inside a node and between nodes (α–β: latency and bandwidth per direction), devices sharing
// one network card, and the numeric format and optimizer sharding the training runs with.
// Read from TOML (configs/clusters/*.toml); `wallfacer tune --calibrate` writes one for this
// machine.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace wallfacer::plan {

// One class of link, per direction: a message of b bytes takes latency + b / bandwidth.
struct Link {
  double bandwidth = 0;  // bytes/s
  double latency = 0;    // s
  double time(double bytes) const { return latency + bytes / bandwidth; }
};

struct Cluster {
  std::string name;
  std::string description;
  int nodes = 1;
  int devices_per_node = 1;
  // Device.
  std::string device;          // free text, e.g. "A100 40GB"
  double gemm_flops = 0;       // sustained FLOP/s of dense matrix products
  double attention_flops = 0;  // sustained FLOP/s of the flash-attention kernels (fwd and bwd)
  // When measured apart (tune --calibrate): forward and backward rates; 0 = attention_flops.
  double attention_fwd_flops = 0, attention_bwd_flops = 0;
  // The kernels' tile (query rows x key rows): under a causal mask, partly masked tiles cost whole
  // tiles. 0: work is counted by kept (query, key) pairs only.
  int attention_tile_q = 0, attention_tile_k = 0;
  // Rates measured per head dim (ascending head dims, one forward and one backward rate each):
  // between two head dims the rate is interpolated in log(head_dim), beyond the ends the nearest
  // one holds. Empty: the rates above for every head dim.
  std::vector<double> attention_head_dims, attention_fwd_by_head_dim, attention_bwd_by_head_dim;
  double memory = 0;           // bytes per device
  double memory_reserved = 0;  // bytes per device not available to training (runtime, allocator)
  int dtype_bytes = 4;         // bytes per activation / gradient element (bf16: 2, fp32: 4)
  // Links.
  Link intra;               // device to device inside a node
  Link inter;               // through one network card, between nodes
  int devices_per_nic = 1;  // devices of a node that share one network card
  // The most that the traffic between one pair of nodes gets in each direction, whatever the cards
  // could carry (bytes/s; 0: no such cap): a per-flow limit of the fabric or the transport, as
  // the emulated cluster's --flow-rate or a cloud network's per-connection limit.
  double inter_pair_bandwidth = 0;
  // Two ranks of different nodes sending to each other at once share their cards' rate in both
  // directions (one TCP connection carries the data both ways and each direction's
  // acknowledgements wait behind the other's data, as on the emulated cluster's shaped cards);
  // false: the cards are full duplex for them too. Measured by `tune --calibrate`.
  bool inter_shared_duplex = false;
  // How much of the other direction such a message takes, in (0, 1] (links.inter.duplex_sharing;
  // only with shared_duplex, where it defaults to 1): a message both ways between two ranks moves
  // at 1 / (1 + duplex_sharing) of a card's rate each way. `tune --calibrate` fits it to the time
  // of team all-gathers and reduce-scatters across nodes (plan::fit_duplex_sharing): on the
  // emulated cluster the directions share in some exchanges and not in others (docs/cluster.md).
  double inter_duplex_sharing = 1.0;
  // What the simulator takes: duplex_sharing where the directions share, else 0.
  double duplex_sharing() const { return inter_shared_duplex ? inter_duplex_sharing : 0.0; }
  // Software.
  int zero = 0;                    // optimizer sharding stage over the data+sequence group (0..3)
  bool grad_sync_overlap = false;  // gradient reduction overlaps the backward of earlier layers

  int devices() const { return nodes * devices_per_node; }
  // The attention rates for heads of `head_dim` (0: the device's own rates, as for unknown dims).
  double fwd_rate(int head_dim = 0) const;
  double bwd_rate(int head_dim = 0) const;
};

// Parses a cluster description; `source` names it in error messages. Throws UsageError with a
// one-line message on a missing or bad key.
Cluster parse_cluster(std::string_view toml_text, const std::string& source);
Cluster load_cluster(const std::string& path);

// TOML text that parse_cluster reads back to the same values.
std::string cluster_to_toml(const Cluster& c);

}  // namespace wallfacer::plan
