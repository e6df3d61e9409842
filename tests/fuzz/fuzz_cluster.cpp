// Cluster files (plan/cluster.h): any TOML text gives a cluster or a UsageError; a cluster has
// positive finite attention rates at every head dim, and the file cluster_to_toml writes for it
// (as tune --calibrate does) reads back to the same values.

#include <cmath>
#include <tuple>

#include "fuzz.h"
#include "wallfacer/plan/cluster.h"

namespace {

auto values(const wallfacer::plan::Cluster& c) {
  return std::tie(
      c.name, c.description, c.nodes, c.devices_per_node, c.device, c.gemm_flops, c.attention_flops,
      c.attention_fwd_flops, c.attention_bwd_flops, c.attention_tile_q, c.attention_tile_k,
      c.attention_head_dims, c.attention_fwd_by_head_dim, c.attention_bwd_by_head_dim, c.memory,
      c.memory_reserved, c.dtype_bytes, c.intra.bandwidth, c.intra.latency, c.inter.bandwidth,
      c.inter.latency, c.devices_per_nic, c.inter_pair_bandwidth, c.zero, c.grad_sync_overlap);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace wallfacer;
  const auto read =
      fuzz::accepted([&] { return plan::parse_cluster(fuzz::as_text(data, size), "input.toml"); });
  if (!read) return 0;
  const plan::Cluster& c = *read;
  FUZZ_EXPECT(c.devices() >= 1 && c.devices() <= (1 << 24), fmt::format("{} devices", c.devices()));
  for (int d : {0, 1, 7, 64, 100, 128, 1 << 16}) {
    FUZZ_EXPECT(std::isfinite(c.fwd_rate(d)) && c.fwd_rate(d) > 0,
                fmt::format("forward rate {} at head dim {}", c.fwd_rate(d), d));
    FUZZ_EXPECT(std::isfinite(c.bwd_rate(d)) && c.bwd_rate(d) > 0,
                fmt::format("backward rate {} at head dim {}", c.bwd_rate(d), d));
  }
  const std::string text = plan::cluster_to_toml(c);
  const auto back = fuzz::accepted([&] { return plan::parse_cluster(text, "written.toml"); });
  FUZZ_EXPECT(back, "the written cluster does not read back:\n" + text);
  FUZZ_EXPECT(values(*back) == values(c), "the written cluster reads back otherwise:\n" + text);
  return 0;
}
