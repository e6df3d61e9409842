// Cluster and model files: the shipped ones parse to the documented values, bad ones are one-line
// usage errors; parameter and FLOP counts against closed forms.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <sstream>
#include <string>

#include "wallfacer/core/error.h"
#include "wallfacer/model/gpt.h"
#include "wallfacer/plan/cluster.h"
#include "wallfacer/plan/model.h"
#include "wallfacer/plan/placement.h"
#include "wallfacer/plan/planner.h"
#include "wallfacer/seqpar/schedule.h"
#include "wallfacer/train/config.h"

namespace wallfacer::plan {
namespace {

std::string src(const std::string& rel) { return std::string(WALLFACER_SOURCE_DIR) + "/" + rel; }

// device.dtype: fp32 (4 bytes an element), bf16 and fp16 (2); anything else is refused with the
// file, the bad value and the accepted ones.
TEST(PlanConfig, DeviceDtype) {
  std::ifstream in(src("configs/clusters/local.toml"));
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str(), line = "dtype = \"fp32\"";
  ASSERT_NE(text.find(line), std::string::npos);
  auto with = [&](const std::string& dtype) {
    std::string t = text;
    return t.replace(t.find(line), line.size(), "dtype = \"" + dtype + "\"");
  };
  EXPECT_EQ(parse_cluster(with("fp32"), "cl.toml").dtype_bytes, 4);
  EXPECT_EQ(parse_cluster(with("bf16"), "cl.toml").dtype_bytes, 2);
  EXPECT_EQ(parse_cluster(with("fp16"), "cl.toml").dtype_bytes, 2);
  try {
    parse_cluster(with("fp8"), "cl.toml");
    ADD_FAILURE() << "fp8 was accepted";
  } catch (const UsageError& e) {
    EXPECT_EQ(std::string(e.what()), "cl.toml: device.dtype 'fp8' is not one of fp32, bf16, fp16");
  }
}

TEST(PlanConfig, ShippedClusters) {
  Cluster a = load_cluster(src("configs/clusters/a100-40gb-16x2-eth100.toml"));
  EXPECT_EQ(a.nodes, 2);
  EXPECT_EQ(a.devices_per_node, 16);
  EXPECT_EQ(a.devices(), 32);
  EXPECT_EQ(a.devices_per_nic, 16);
  EXPECT_EQ(a.dtype_bytes, 2);
  Cluster b = load_cluster(src("configs/clusters/a100-40gb-8x4-eth100.toml"));
  EXPECT_EQ(b.nodes, 4);
  EXPECT_EQ(b.devices_per_node, 8);
  EXPECT_EQ(b.devices_per_nic, 8);
  Cluster h = load_cluster(src("configs/clusters/h100-80gb-8x8-ib.toml"));
  EXPECT_EQ(h.devices(), 64);
  EXPECT_EQ(h.devices_per_nic, 1);
  EXPECT_GT(h.inter.bandwidth, a.inter.bandwidth);
  Cluster l = load_cluster(src("configs/clusters/local.toml"));
  EXPECT_GE(l.devices(), 1);
}

TEST(PlanConfig, ClusterRoundTripsThroughToml) {
  Cluster a = load_cluster(src("configs/clusters/h100-80gb-8x8-ib.toml"));
  Cluster b = parse_cluster(cluster_to_toml(a), "roundtrip");
  EXPECT_EQ(b.name, a.name);
  EXPECT_EQ(b.devices(), a.devices());
  EXPECT_DOUBLE_EQ(b.gemm_flops, a.gemm_flops);
  EXPECT_DOUBLE_EQ(b.inter.latency, a.inter.latency);
  EXPECT_DOUBLE_EQ(b.intra.bandwidth, a.intra.bandwidth);
  EXPECT_EQ(b.zero, a.zero);
  EXPECT_EQ(b.grad_sync_overlap, a.grad_sync_overlap);
  // The measured-apart attention rates and the kernel tile survive the trip; unset they read as
  // the one attention rate and no tile.
  EXPECT_DOUBLE_EQ(b.fwd_rate(), a.attention_flops);
  EXPECT_EQ(b.attention_tile_q, 0);
  a.attention_fwd_flops = 3e11;
  a.attention_bwd_flops = 4e11;
  a.attention_tile_q = 128;
  a.attention_tile_k = 256;
  Cluster c = parse_cluster(cluster_to_toml(a), "roundtrip");
  EXPECT_DOUBLE_EQ(c.fwd_rate(), 3e11);
  EXPECT_DOUBLE_EQ(c.bwd_rate(), 4e11);
  EXPECT_EQ(c.attention_tile_q, 128);
  EXPECT_EQ(c.attention_tile_k, 256);
  // A cap on the traffic between two nodes: absent by default, kept when set.
  EXPECT_EQ(c.inter_pair_bandwidth, 0);
  a.inter_pair_bandwidth = 6.25e8;
  EXPECT_DOUBLE_EQ(parse_cluster(cluster_to_toml(a), "roundtrip").inter_pair_bandwidth, 6.25e8);
  // Directions that share the cards: false by default, kept when set (with the cap too).
  EXPECT_FALSE(c.inter_shared_duplex);
  a.inter_shared_duplex = true;
  const Cluster both = parse_cluster(cluster_to_toml(a), "roundtrip");
  EXPECT_TRUE(both.inter_shared_duplex);
  EXPECT_DOUBLE_EQ(both.inter_pair_bandwidth, 6.25e8);
  EXPECT_DOUBLE_EQ(both.duplex_sharing(), 1.0);  // shared_duplex alone: a full share
  a.inter_duplex_sharing = 0.4375;
  EXPECT_DOUBLE_EQ(parse_cluster(cluster_to_toml(a), "roundtrip").duplex_sharing(), 0.4375);
  a.inter_shared_duplex = false;  // no sharing at all: the fraction is not written, nor used
  EXPECT_EQ(parse_cluster(cluster_to_toml(a), "roundtrip").duplex_sharing(), 0.0);
  a.inter_shared_duplex = true;
  // Every value reads back exactly: text with quotes and control characters, and numbers that
  // seven digits would round onto a bound (reserved up to memory, head dims onto each other).
  a.name = "\n\"a\\b\tc\x01";
  a.memory = 1.0000001e9;
  a.memory_reserved = 1.00000004e9;
  a.attention_head_dims = {64, 64.0000001};
  a.attention_fwd_by_head_dim = {1e9, 1.23456789e9};
  a.attention_bwd_by_head_dim = {2e9, 2e9};
  const Cluster d = parse_cluster(cluster_to_toml(a), "roundtrip");
  EXPECT_EQ(d.name, a.name);
  EXPECT_EQ(d.memory, a.memory);
  EXPECT_EQ(d.memory_reserved, a.memory_reserved);
  EXPECT_EQ(d.attention_head_dims, a.attention_head_dims);
  EXPECT_EQ(d.attention_fwd_by_head_dim, a.attention_fwd_by_head_dim);
  // Seven digits where they are exact, as before.
  EXPECT_NE(cluster_to_toml(a).find("gemm_flops = " + fmt::format("{:.6e}", a.gemm_flops)),
            std::string::npos);
}

// Rates by head dim: exact at the measured dims, interpolated in log(head_dim) between them (96
// lies log2(1.5) of the way from 64 to 128), held beyond the ends; without a table every head dim
// gets the device's own rates.
TEST(PlanConfig, AttentionRatesByHeadDim) {
  Cluster a = load_cluster(src("configs/clusters/h100-80gb-8x8-ib.toml"));
  EXPECT_DOUBLE_EQ(a.fwd_rate(96), a.attention_flops);
  a.attention_fwd_flops = 3e11;
  a.attention_head_dims = {32, 64, 128};
  a.attention_fwd_by_head_dim = {1e11, 2e11, 4e11};
  a.attention_bwd_by_head_dim = {1.5e11, 3e11, 6e11};
  Cluster c = parse_cluster(cluster_to_toml(a), "roundtrip");
  EXPECT_EQ(c.attention_head_dims, a.attention_head_dims);
  EXPECT_DOUBLE_EQ(c.fwd_rate(64), 2e11);
  EXPECT_DOUBLE_EQ(c.bwd_rate(32), 1.5e11);
  EXPECT_NEAR(c.fwd_rate(96), 2e11 + std::log2(1.5) * 2e11, 1e3);
  EXPECT_DOUBLE_EQ(c.fwd_rate(16), 1e11);
  EXPECT_DOUBLE_EQ(c.bwd_rate(256), 6e11);
  EXPECT_DOUBLE_EQ(c.fwd_rate(0), 3e11);  // unknown head dim: the device's own rate
}

const char* kCluster = R"(name = "x"
[nodes]
count = 2
devices_per_node = 4
[device]
gemm_flops = 1e12
attention_flops = 1e12
memory = 1e10
[links.intra]
bandwidth = 1e10
latency = 1e-6
[links.inter]
bandwidth = 1e9
latency = 1e-5
devices_per_nic = 2
)";

void expect_usage(const std::string& text, const std::string& needle) {
  try {
    parse_cluster(text, "c.toml");
    FAIL() << "no error for " << needle;
  } catch (const UsageError& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find(needle), std::string::npos) << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  }
}

TEST(PlanConfig, BadClustersAreUsageErrors) {
  EXPECT_EQ(parse_cluster(kCluster, "c.toml").devices_per_nic, 2);
  std::string s = kCluster;
  expect_usage(s + "bogus = 1\n", "links.inter.bogus");
  expect_usage(std::string(s).replace(s.find("count = 2"), 9, "count = 0"), "nodes.count");
  expect_usage(std::string(s).replace(s.find("devices_per_nic = 2"), 19, "devices_per_nic = 3"),
               "devices_per_nic");
  expect_usage(std::string(s).replace(s.find("gemm_flops = 1e12"), 17, "gemm_flops = \"x\""),
               "device.gemm_flops");
  expect_usage("name = ", "c.toml:1");
  const std::string dims = "memory = 1e10\nattention_bwd_flops_by_head_dim = [1e9, 2e9]\n";
  expect_usage(std::string(s).replace(s.find("memory = 1e10"), 13,
                                      dims + "attention_head_dims = [32, 64]\n"
                                             "attention_fwd_flops_by_head_dim = [1e9]"),
               "same length");
  expect_usage(std::string(s).replace(s.find("memory = 1e10"), 13,
                                      dims + "attention_head_dims = [64, 32]\n"
                                             "attention_fwd_flops_by_head_dim = [1e9, 1e9]"),
               "increasing");
  expect_usage(
      std::string(s).replace(s.find("memory = 1e10"), 13, "memory = 1e10\nattention_tile_q = 64"),
      "attention_tile_k");
}

TEST(PlanConfig, IntegersForRealKeysNeedNotBeExactDoubles) {
  // 2^53 + 1 has no exact double: it reads as the nearest one, 2^53 (as in training configs).
  std::string s = kCluster;
  s.replace(s.find("gemm_flops = 1e12"), 17, "gemm_flops = 9007199254740993");
  s.replace(s.find("memory = 1e10"), 13,
            "memory = 1e10\nattention_head_dims = [32, 64]\n"
            "attention_fwd_flops_by_head_dim = [1e9, 9007199254740993]\n"
            "attention_bwd_flops_by_head_dim = [1e9, 1e9]");
  const Cluster c = parse_cluster(s, "c.toml");
  EXPECT_EQ(c.gemm_flops, 9007199254740992.0);
  ASSERT_EQ(c.attention_fwd_by_head_dim.size(), 2u);
  EXPECT_EQ(c.attention_fwd_by_head_dim[1], 9007199254740992.0);
}

TEST(PlanConfig, ShippedModelsAndParameterCounts) {
  ModelSpec m7 = load_model(src("configs/models/gpt-7b.toml"));
  EXPECT_EQ(m7.layers, 32);
  EXPECT_EQ(m7.head_dim(), 128);
  EXPECT_TRUE(m7.causal);
  // 32 x (12 h^2 weights + 9 h biases + 4 h norm) + 257 h embedding + 2 h final norm, h = 4096.
  EXPECT_EQ(param_count(m7), 6445215744);
  ModelSpec m3 = load_model(src("configs/models/gpt-3b.toml"));
  EXPECT_EQ(m3.head_dim(), 256);
  EXPECT_EQ(param_count(m3), 2417618944);
  ModelSpec d = load_model(src("configs/models/dit-1b.toml"));
  EXPECT_FALSE(d.causal);
  EXPECT_EQ(d.kind, ModelKind::Dit);
  // 24 x (18 h^2 + 19 h) + 2 h, h = 1536 (adaLN adds 6 h^2 + 6 h per layer).
  EXPECT_EQ(param_count(d), 1019919360);
  // Forward FLOPs per token: QKV 6 h^2, out 2 h^2, MLP 16 h^2 = 24 h^2.
  EXPECT_DOUBLE_EQ(layer_dense_flops_per_token(m7), 24.0 * 4096 * 4096);
  EXPECT_DOUBLE_EQ(head_flops_per_token(m7), 2.0 * 4096 * 257);
  // GPT-7B with 8 K,V heads: the K and V projections (weights and biases) shrink from h to h/4
  // outputs, 32 x 2 x (h + 1) x 3h/4 parameters fewer.
  ModelSpec g = load_model(src("configs/models/gpt-7b-gqa8.toml"));
  EXPECT_EQ(g.kv_heads, 8);
  EXPECT_EQ(g.head_dim(), 128);
  EXPECT_EQ(param_count(g), 6445215744 - 32LL * 2 * 4097 * 3072);
}

TEST(PlanConfig, TheLargestModelCountsItsParametersIn64Bits) {
  const std::string big = "[model]\ndim = 1048576\nheads = 1\nmlp_ratio = 64\nvocab = 16777216\n";
  const ModelSpec m = parse_model(big + "layers = 10000\n", "m");
  // A layer of width h with one head and MLP 64 h: 132 h^2 weights and 73 h biases and norms.
  const int64_t h = 1 << 20;
  EXPECT_EQ(param_count(m), 10000 * (132 * h * h + 73 * h) + 2 * h + 16777216 * h);
  try {
    parse_model(big + "layers = 10001\n", "m");
    FAIL() << "10001 layers accepted";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("'model.layers' = 10001 is out of range [1, 10000]"),
              std::string::npos)
        << e.what();
  }
}

// model.arch = "llama": a SwiGLU MLP of three matrices of the intermediate width, GQA's K and V,
// no biases but q/k/v, RMSNorms, an untied head; counted by hand, and against the parameters of
// the model the trainer builds of the same TOML (model::gpt_num_params), as tune's measured runs.
TEST(PlanConfig, LlamaLayersAreCountedByTheirArchitecture) {
  const std::string shape =
      "[model]\narch = \"llama\"\nlayers = 3\ndim = 128\nheads = 8\nkv_heads = 2\n"
      "intermediate = 344\nvocab = 1000\nnorm_eps = 1e-6\nrope_theta = 500000.0\n"
      "rope_scaling = { type = \"linear\", factor = 2.0 }\n";
  const std::string toml = shape + "tie_embeddings = false\n";
  ModelSpec m = parse_model(toml, "m");
  EXPECT_EQ(m.arch, ModelArch::Llama);
  // h = 128, k = 2 x 16 = 32, f = 344.
  // Matrices: QKV 128 x 192 = 24576, output 16384, gate + up + down 3 x 128 x 344 = 132096.
  EXPECT_EQ(layer_count(m).matrix_weights, 24576 + 16384 + 132096);
  EXPECT_DOUBLE_EQ(layer_dense_flops_per_token(m), 2.0 * (24576 + 16384 + 132096));
  // Two RMSNorms (256) per layer; final norm 128, embedding and LM head 2 x 1000 x 128.
  EXPECT_EQ(param_count(m), 3 * (173056 + 256) + 128 + 256000);
  // Activations per token: 6 h + 2 k + 3 f = 768 + 64 + 1032.
  EXPECT_EQ(layer_count(m).activations, 1864);
  EXPECT_DOUBLE_EQ(head_flops_per_token(m), 2.0 * 128 * 1000);
  // The trainer's model of the same TOML.
  auto trained = [](const std::string& text) {
    return model::gpt_num_params(train::TrainConfig::from_toml(text, "m").model);
  };
  EXPECT_EQ(param_count(m), trained(toml));
  // q/k/v biases (Qwen2) and a tied head.
  m = parse_model(toml + "qkv_bias = true\n", "m");
  EXPECT_EQ(param_count(m), 3 * (173056 + 256 + 192) + 128 + 256000);
  EXPECT_EQ(param_count(m), trained(toml + "qkv_bias = true\n"));
  const std::string tied = shape + "tie_embeddings = true\n";
  EXPECT_EQ(param_count(parse_model(tied, "m")), 3 * 173056 + 3 * 256 + 128 + 128000);
  EXPECT_EQ(param_count(parse_model(tied, "m")), trained(tied));
  // The same shape as a GPT: a 2-matrix MLP (4 h f FLOPs), biases and layernorms.
  ModelSpec gpt = m;
  gpt.arch = ModelArch::Gpt;
  EXPECT_DOUBLE_EQ(layer_dense_flops_per_token(gpt), 2.0 * (24576 + 16384 + 2 * 128 * 344));
  EXPECT_EQ(layer_count(gpt).activations, 768 + 64 + 2 * 344);
  EXPECT_THROW(parse_model("[model]\narch = \"mamba\"\nlayers = 1\ndim = 64\nheads = 8\n", "m"),
               UsageError);
  EXPECT_THROW(parse_model(toml + "window = 64\n", "m"), UsageError);
}

TEST(PlanConfig, GqaShrinksTheKvProjection) {
  ModelSpec m = parse_model("[model]\nlayers = 1\ndim = 64\nheads = 8\nkv_heads = 2\n", "m");
  EXPECT_EQ(m.kv_dim(), 16);
  EXPECT_DOUBLE_EQ(layer_dense_flops_per_token(m),
                   2.0 * 64 * (64 + 32) + 2.0 * 64 * 64 + 16.0 * 64 * 64);
  EXPECT_THROW(parse_model("[model]\nlayers = 1\ndim = 64\nheads = 8\nkv_heads = 3\n", "m"),
               UsageError);
  EXPECT_THROW(parse_model("[model]\nlayers = 1\ndim = 60\nheads = 8\n", "m"), UsageError);
  EXPECT_THROW(parse_model("[model]\nlayers = 1\ndim = 64\nheads = 8\nheadz = 8\n", "m"),
               UsageError);
}

// Which links each placement puts inside a node: count team pairs and sub-ring hops that stay in
// one node, from the layout rule rank = g*(G*C) + j*C + a.
struct LinkCount {
  int team_pairs = 0, team_pairs_intra = 0, ring_hops = 0, ring_hops_intra = 0;
};
LinkCount count_links(int P, int C, int per_node, Placement pl) {
  const int G = P / (C * C);
  auto dev = device_order({P, C, G}, pl);
  auto node = [&](int r) { return dev[r] / per_node; };
  LinkCount c;
  for (int g = 0; g < P / (C * G); ++g)
    for (int j = 0; j < G; ++j)
      for (int a = 0; a < C; ++a) {
        const int r = g * G * C + j * C + a;
        for (int b = a + 1; b < C; ++b) {
          ++c.team_pairs;
          c.team_pairs_intra += node(r) == node(r - a + b);
        }
        if (G > 1) {
          const int next = g * G * C + ((j + 1) % G) * C + a;
          ++c.ring_hops;
          c.ring_hops_intra += node(r) == node(next);
        }
      }
  return c;
}

TEST(PlanPlacement, TwoNodesOfSixteenTeamsOfTwo) {
  // P = 32, C = 2: team groups of 16 ranks fill a node, so both placements keep all inside.
  for (Placement pl : {Placement::TeamIntra, Placement::RingIntra}) {
    LinkCount c = count_links(32, 2, 16, pl);
    EXPECT_EQ(c.team_pairs, 16);
    EXPECT_EQ(c.team_pairs_intra, 16);
    EXPECT_EQ(c.ring_hops, 32);
    EXPECT_EQ(c.ring_hops_intra, 32);
  }
}

TEST(PlanPlacement, FourNodesOfEightTeamsOfTwo) {
  // P = 32, C = 2, 8 per node: a team group (16 ranks) spans two nodes.
  LinkCount t = count_links(32, 2, 8, Placement::TeamIntra);
  EXPECT_EQ(t.team_pairs_intra, 16);  // every team inside a node
  EXPECT_EQ(t.ring_hops_intra, 24);   // each sub-ring of 8 crosses twice: 4 x (8 - 2)
  LinkCount r = count_links(32, 2, 8, Placement::RingIntra);
  EXPECT_EQ(r.team_pairs_intra, 0);  // members of a team sit in the two nodes of its group
  EXPECT_EQ(r.ring_hops_intra, 32);  // every sub-ring is one node
  EXPECT_EQ(device_order({32, 2, 8}, Placement::Default),
            device_order({32, 2, 8}, Placement::TeamIntra));
}

TEST(PlanPlacement, EightNodesOfEightTeamsOfFour) {
  // P = 64, C = 4: G = 4, team groups of 16 ranks over two nodes of 8.
  LinkCount t = count_links(64, 4, 8, Placement::TeamIntra);
  EXPECT_EQ(t.team_pairs, 16 * 6);
  EXPECT_EQ(t.team_pairs_intra, 16 * 6);
  EXPECT_EQ(t.ring_hops, 64);
  EXPECT_EQ(t.ring_hops_intra, 32);  // sub-ring of 4 over two nodes: 2 of its 4 hops inside
  LinkCount r = count_links(64, 4, 8, Placement::RingIntra);
  EXPECT_EQ(r.ring_hops_intra, 64);
  EXPECT_EQ(r.team_pairs_intra, 16 * 2);  // members a, a+1 share a node when both in {0,1} or {2,3}
}

// Ulysses 2 x WallFacer-2 on 32 ranks (ring of 16, G = 4), nodes of 8 devices: the Ulysses team
// stays in a node under both placements; team-intra keeps the WallFacer teams (InnerTeam) in a
// node and splits each sub-ring of 4 over two nodes (2 of its 4 hops cross), ring-intra keeps
// every sub-ring hop in a node and puts a team's two members 8 devices apart.
TEST(PlanPlacement, UlyssesWallFacerPlacements) {
  seqpar::AttnConfig cfg;
  cfg.strategy = seqpar::Strategy::WallFacer;
  cfg.teams = 2;
  cfg.ulysses = 2;
  cfg.seq = 32 * 16;
  cfg.heads = cfg.kv_heads = 2;
  cfg.head_dim = 8;
  const int P = 32, u = 2;
  const seqpar::WallFacerGeometry ring(P / u, 2);
  for (Placement pl : {Placement::TeamIntra, Placement::RingIntra}) {
    const std::vector<int> dev = candidate_devices({cfg.strategy, 2, u, pl, false}, P);
    EXPECT_EQ(inverse_order(dev).size(), size_t(P));  // a permutation, else it throws
    auto node = [&](int r) { return dev[size_t(r)] / 8; };
    int ulysses_intra = 0, team_intra = 0, hops_intra = 0;
    for (int r = 0; r < P; ++r) {
      const seqpar::Schedule s = seqpar::make_schedule(cfg, P, r);
      const auto team = seqpar::group_ranks(s, seqpar::Group::Team);
      const auto inner = seqpar::group_ranks(s, seqpar::Group::InnerTeam);
      ulysses_intra += node(team[0]) == node(team[1]);
      team_intra += node(inner[0]) == node(inner[1]);
      hops_intra += node(r) == node(ring.next(r / u) * u + r % u);  // its sub-ring successor
    }
    EXPECT_EQ(ulysses_intra, P);
    EXPECT_EQ(team_intra, pl == Placement::TeamIntra ? P : 0);
    EXPECT_EQ(hops_intra, pl == Placement::TeamIntra ? P / 2 : P);
  }
  EXPECT_EQ((Candidate{cfg.strategy, 2, u, Placement::RingIntra, false}).label(),
            "ulysses2 x wallfacer C=2 ring-intra");
}

TEST(PlanPlacement, OrdersArePermutations) {
  auto d = device_order({16, 2, 4}, Placement::RingIntra);
  auto inv = inverse_order(d);
  for (int r = 0; r < 16; ++r) EXPECT_EQ(inv[d[r]], r);
  EXPECT_THROW(device_order({12, 2, 4}, Placement::RingIntra), UsageError);
  EXPECT_THROW(parse_placement("ring_intra"), UsageError);
}

}  // namespace
}  // namespace wallfacer::plan
