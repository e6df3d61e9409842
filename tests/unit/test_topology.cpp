#include <gtest/gtest.h>

#include <cstdlib>

#include "wallfacer/comm/topology.h"
#include "wallfacer/core/error.h"

namespace wallfacer::comm {
namespace {

TEST(Topology, PretendedNodesOfConsecutiveRanks) {
  Topology t = pretend_topology(10, 4);
  EXPECT_EQ(t.node_of, (std::vector<int>{0, 0, 0, 0, 1, 1, 1, 1, 2, 2}));
  EXPECT_EQ(t.nodes(), 3);
  EXPECT_EQ(t.ranks_on_node(2), 2);
  EXPECT_EQ(t.max_ranks_per_node(), 4);
  EXPECT_TRUE(t.pretended);
  EXPECT_THROW(pretend_topology(4, 0), UsageError);
}

TEST(Topology, NodeSizeOverrideFromEnvironment) {
  unsetenv("WALLFACER_NODE_SIZE");
  EXPECT_FALSE(node_size_override().has_value());
  setenv("WALLFACER_NODE_SIZE", "2", 1);
  EXPECT_EQ(node_size_override().value(), 2);
  setenv("WALLFACER_NODE_SIZE", "two", 1);
  EXPECT_THROW(node_size_override(), UsageError);
  setenv("WALLFACER_NODE_SIZE", "0", 1);
  EXPECT_THROW(node_size_override(), UsageError);
  unsetenv("WALLFACER_NODE_SIZE");
}

}  // namespace
}  // namespace wallfacer::comm
