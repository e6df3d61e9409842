#include "wallfacer/plan/cluster.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <functional>

#include "wallfacer/core/dtype.h"
#include "wallfacer/core/error.h"
#include "wallfacer/core/toml_reader.h"

namespace wallfacer::plan {

namespace {

// Bytes of device.dtype: a Dtype (core/dtype.h), or fp16, which the planner counts as bf16 (2
// bytes an element; no tensor of the library is fp16).
int dtype_size(const std::string& dtype, const std::string& source) {
  if (dtype == "fp16") return 2;
  try {
    return int(dtype_bytes(parse_dtype(dtype)));
  } catch (const UsageError&) {
    throw UsageError(
        fmt::format("{}: device.dtype '{}' is not one of fp32, bf16, fp16", source, dtype));
  }
}

Link read_link(TomlTable& t) {
  Link l;
  l.bandwidth = t.number("bandwidth", 1e3, 1e15);
  l.latency = t.number("latency", 0, 1);
  return l;
}

}  // namespace

Cluster parse_cluster(std::string_view toml_text, const std::string& source) {
  toml::table doc = parse_toml(toml_text, source);
  TomlTable root(&doc, "", source);
  Cluster c;
  c.name = root.string("name");
  c.description = root.string_or("description", "");

  TomlTable nodes = root.sub("nodes");
  c.nodes = nodes.integer("count", 1, 1 << 20);
  c.devices_per_node = nodes.integer("devices_per_node", 1, 1 << 12);
  nodes.reject_unknown();
  constexpr int64_t kMaxDevices = int64_t(1) << 24;
  WF_USAGE_CHECK(int64_t(c.nodes) * c.devices_per_node <= kMaxDevices,
                 "{}: nodes.count x nodes.devices_per_node = {} x {} = {} devices; at most {}",
                 source, c.nodes, c.devices_per_node, int64_t(c.nodes) * c.devices_per_node,
                 kMaxDevices);

  TomlTable dev = root.sub("device");
  c.device = dev.string_or("name", "");
  c.gemm_flops = dev.number("gemm_flops", 1e6, 1e18);
  c.attention_flops = dev.number("attention_flops", 1e6, 1e18);
  c.attention_fwd_flops = dev.number_or("attention_fwd_flops", 0, 1e6, 1e18);
  c.attention_bwd_flops = dev.number_or("attention_bwd_flops", 0, 1e6, 1e18);
  c.attention_tile_q = dev.integer_or("attention_tile_q", 0, 1, 1 << 16);
  c.attention_tile_k = dev.integer_or("attention_tile_k", 0, 1, 1 << 16);
  c.attention_head_dims = dev.numbers_or_empty("attention_head_dims", 1, 1 << 16);
  c.attention_fwd_by_head_dim = dev.numbers_or_empty("attention_fwd_flops_by_head_dim", 1e6, 1e18);
  c.attention_bwd_by_head_dim = dev.numbers_or_empty("attention_bwd_flops_by_head_dim", 1e6, 1e18);
  WF_USAGE_CHECK(c.attention_fwd_by_head_dim.size() == c.attention_head_dims.size() &&
                     c.attention_bwd_by_head_dim.size() == c.attention_head_dims.size(),
                 "{}: device.attention_head_dims, attention_fwd_flops_by_head_dim and "
                 "attention_bwd_flops_by_head_dim must have the same length",
                 source);
  WF_USAGE_CHECK(std::adjacent_find(c.attention_head_dims.begin(), c.attention_head_dims.end(),
                                    std::greater_equal<>()) == c.attention_head_dims.end(),
                 "{}: device.attention_head_dims must be increasing", source);
  WF_USAGE_CHECK((c.attention_tile_q > 0) == (c.attention_tile_k > 0),
                 "{}: give both device.attention_tile_q and device.attention_tile_k, or neither",
                 source);
  c.memory = dev.number("memory", 1e6, 1e15);
  c.memory_reserved = dev.number_or("memory_reserved", 0, 0, 1e15);
  WF_USAGE_CHECK(c.memory_reserved < c.memory,
                 "{}: device.memory_reserved must be smaller than device.memory", source);
  c.dtype_bytes = dtype_size(dev.string_or("dtype", "fp32"), source);
  dev.reject_unknown();

  TomlTable links = root.sub("links");
  TomlTable intra = links.sub("intra");
  c.intra = read_link(intra);
  intra.reject_unknown();
  TomlTable inter = links.sub("inter");
  c.inter = read_link(inter);
  c.devices_per_nic = inter.integer_or("devices_per_nic", 1, 1, c.devices_per_node);
  c.inter_pair_bandwidth = inter.number_or("pair_bandwidth", 0, 0, 1e15);
  c.inter_shared_duplex = inter.boolean_or("shared_duplex", false);
  c.inter_duplex_sharing = inter.number_or("duplex_sharing", 1.0, 0.0, 1.0);
  WF_USAGE_CHECK(c.inter_duplex_sharing > 0,
                 "{}: links.inter.duplex_sharing must be in (0, 1]; for cards whose directions do "
                 "not share, leave shared_duplex out",
                 source);
  WF_USAGE_CHECK(c.devices_per_node % c.devices_per_nic == 0,
                 "{}: links.inter.devices_per_nic = {} must divide nodes.devices_per_node = {}",
                 source, c.devices_per_nic, c.devices_per_node);
  inter.reject_unknown();
  links.reject_unknown();

  TomlTable sw = root.sub("software", false);
  c.zero = sw.integer_or("zero", 0, 0, 3);
  c.grad_sync_overlap = sw.boolean_or("grad_sync_overlap", false);
  sw.reject_unknown();
  root.reject_unknown();
  return c;
}

namespace {

// Rate at head dim d from a table by head dim: interpolated in log d, the ends held beyond.
double rate_at(const std::vector<double>& dims, const std::vector<double>& rates, int d,
               double fallback) {
  if (dims.empty() || d <= 0) return fallback;
  if (d <= dims.front()) return rates.front();
  if (d >= dims.back()) return rates.back();
  size_t i = 1;
  while (dims[i] < d) ++i;
  const double w = std::log(d / dims[i - 1]) / std::log(dims[i] / dims[i - 1]);
  return rates[i - 1] + w * (rates[i] - rates[i - 1]);
}

}  // namespace

double Cluster::fwd_rate(int head_dim) const {
  const double own = attention_fwd_flops > 0 ? attention_fwd_flops : attention_flops;
  return rate_at(attention_head_dims, attention_fwd_by_head_dim, head_dim, own);
}

double Cluster::bwd_rate(int head_dim) const {
  const double own = attention_bwd_flops > 0 ? attention_bwd_flops : attention_flops;
  return rate_at(attention_head_dims, attention_bwd_by_head_dim, head_dim, own);
}

Cluster load_cluster(const std::string& path) {
  return parse_cluster(read_toml_file(path, "cluster"), path);
}

namespace {

// Seven significant digits, or as many more as it takes to read back the same double (a value
// rounded to seven digits could cross a bound: memory_reserved up to memory).
std::string exact(double v) {
  for (int digits = 6;; ++digits) {
    std::string s = fmt::format("{:.{}e}", v, digits);
    if (digits >= 16 || std::strtod(s.c_str(), nullptr) == v) return s;
  }
}

}  // namespace

std::string cluster_to_toml(const Cluster& c) {
  // A TOML basic string: quotes, backslashes and control characters escaped.
  auto q = [](const std::string& s) {
    std::string out = "\"";
    for (char ch : s) {
      if (ch == '"' || ch == '\\') {
        out += '\\';
        out += ch;
      } else if (static_cast<unsigned char>(ch) < 0x20 || ch == 0x7f) {
        out += fmt::format("\\u{:04X}", static_cast<unsigned char>(ch));
      } else {
        out += ch;
      }
    }
    return out + "\"";
  };
  const char* dtype = c.dtype_bytes == 2 ? "bf16" : "fp32";
  std::string attention_extra;
  if (c.attention_fwd_flops > 0)
    attention_extra += fmt::format("attention_fwd_flops = {}\n", exact(c.attention_fwd_flops));
  if (c.attention_bwd_flops > 0)
    attention_extra += fmt::format("attention_bwd_flops = {}\n", exact(c.attention_bwd_flops));
  // Head dims in their shortest exact form ("64"), rates as the other numbers.
  auto list = [](const std::vector<double>& v, bool dims) {
    std::string out = "[";
    for (size_t i = 0; i < v.size(); ++i)
      out += (i ? ", " : "") + (dims ? fmt::format("{}", v[i]) : exact(v[i]));
    return out + "]";
  };
  if (!c.attention_head_dims.empty())
    attention_extra += fmt::format(
        "attention_head_dims = {}\nattention_fwd_flops_by_head_dim = {}\n"
        "attention_bwd_flops_by_head_dim = {}\n",
        list(c.attention_head_dims, true), list(c.attention_fwd_by_head_dim, false),
        list(c.attention_bwd_by_head_dim, false));
  if (c.attention_tile_q > 0)
    attention_extra += fmt::format("attention_tile_q = {}\nattention_tile_k = {}\n",
                                   c.attention_tile_q, c.attention_tile_k);
  return fmt::format(
      "name = {}\n"
      "description = {}\n\n"
      "[nodes]\ncount = {}\ndevices_per_node = {}\n\n"
      "[device]\nname = {}\ngemm_flops = {}\nattention_flops = {}\n{}memory = {}\n"
      "memory_reserved = {}\ndtype = \"{}\"\n\n"
      "[links.intra]\nbandwidth = {}\nlatency = {}\n\n"
      "[links.inter]\nbandwidth = {}\nlatency = {}\ndevices_per_nic = {}\n{}\n"
      "[software]\nzero = {}\ngrad_sync_overlap = {}\n",
      q(c.name), q(c.description), c.nodes, c.devices_per_node, q(c.device), exact(c.gemm_flops),
      exact(c.attention_flops), attention_extra, exact(c.memory), exact(c.memory_reserved), dtype,
      exact(c.intra.bandwidth), exact(c.intra.latency), exact(c.inter.bandwidth),
      exact(c.inter.latency), c.devices_per_nic,
      (c.inter_pair_bandwidth > 0
           ? fmt::format("pair_bandwidth = {}\n", exact(c.inter_pair_bandwidth))
           : std::string()) +
          (c.inter_shared_duplex ? "shared_duplex = true\n" : "") +
          (c.inter_shared_duplex && c.inter_duplex_sharing < 1
               ? fmt::format("duplex_sharing = {}\n", exact(c.inter_duplex_sharing))
               : std::string()),
      c.zero, c.grad_sync_overlap ? "true" : "false");
}

}  // namespace wallfacer::plan
