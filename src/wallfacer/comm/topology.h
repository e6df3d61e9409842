#pragma once
// Which ranks share a node. Discovered from MPI's shared-memory groups (MPI_Comm_split_type), or
// pretended: WALLFACER_NODE_SIZE=n makes nodes of n consecutive world ranks, so placements can be
// tried on one machine.

#include <optional>
#include <vector>

namespace wallfacer::comm {

struct Topology {
  std::vector<int> node_of;  // world rank -> node index (nodes numbered by their lowest rank)
  bool pretended = false;    // from WALLFACER_NODE_SIZE rather than from MPI
  int nodes() const;
  int ranks_on_node(int node) const;
  int max_ranks_per_node() const;
};

// Nodes of `node_size` consecutive ranks (the last one may be smaller).
Topology pretend_topology(int world_size, int node_size);

// WALLFACER_NODE_SIZE when set; UsageError when it is not a positive integer.
std::optional<int> node_size_override();

// The world's topology (collective over all ranks; needs an MpiSession). Honours
// WALLFACER_NODE_SIZE.
Topology discover_topology();

}  // namespace wallfacer::comm
