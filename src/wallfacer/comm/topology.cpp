#include "wallfacer/comm/topology.h"

#include <mpi.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <string>

#include "wallfacer/core/error.h"

namespace wallfacer::comm {

int Topology::nodes() const {
  return node_of.empty() ? 0 : *std::max_element(node_of.begin(), node_of.end()) + 1;
}

int Topology::ranks_on_node(int node) const {
  return static_cast<int>(std::count(node_of.begin(), node_of.end(), node));
}

int Topology::max_ranks_per_node() const {
  int m = 0;
  for (int n = 0; n < nodes(); ++n) m = std::max(m, ranks_on_node(n));
  return m;
}

Topology pretend_topology(int world_size, int node_size) {
  WF_USAGE_CHECK(node_size >= 1, "node size must be at least 1, got {}", node_size);
  Topology t;
  t.pretended = true;
  for (int r = 0; r < world_size; ++r) t.node_of.push_back(r / node_size);
  return t;
}

std::optional<int> node_size_override() {
  const char* env = std::getenv("WALLFACER_NODE_SIZE");
  if (!env || !*env) return std::nullopt;
  char* end = nullptr;
  const long v = std::strtol(env, &end, 10);
  WF_USAGE_CHECK(*end == '\0' && v >= 1 && v <= (1 << 20),
                 "WALLFACER_NODE_SIZE='{}' must be a positive integer (ranks per pretended node)",
                 env);
  return static_cast<int>(v);
}

namespace {
void check(int rc, const char* call) {
  WF_CHECK(rc == MPI_SUCCESS, "{} failed while discovering the node topology (code {})", call, rc);
}
}  // namespace

Topology discover_topology() {
  int init = 0;
  MPI_Initialized(&init);
  WF_CHECK(init, "discover_topology needs MPI: create a comm::MpiSession first");
  int rank = 0, size = 0;
  check(MPI_Comm_rank(MPI_COMM_WORLD, &rank), "MPI_Comm_rank");
  check(MPI_Comm_size(MPI_COMM_WORLD, &size), "MPI_Comm_size");
  if (auto n = node_size_override()) return pretend_topology(size, *n);

  MPI_Comm shm = MPI_COMM_NULL;
  check(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &shm),
        "MPI_Comm_split_type");
  int leader = rank;  // lowest world rank on this node
  check(MPI_Allreduce(MPI_IN_PLACE, &leader, 1, MPI_INT, MPI_MIN, shm), "MPI_Allreduce");
  check(MPI_Comm_free(&shm), "MPI_Comm_free");
  std::vector<int> leaders(size);
  check(MPI_Allgather(&leader, 1, MPI_INT, leaders.data(), 1, MPI_INT, MPI_COMM_WORLD),
        "MPI_Allgather");
  std::map<int, int> index;  // leader -> node number, in order of the leaders' ranks
  for (int l : leaders) index.emplace(l, 0);
  int next = 0;
  for (auto& [l, i] : index) i = next++;
  Topology t;
  for (int l : leaders) t.node_of.push_back(index[l]);
  return t;
}

}  // namespace wallfacer::comm
