#include "wallfacer/comm/trace_merge.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "wallfacer/core/error.h"
#include "wallfacer/core/file.h"
#include "wallfacer/core/trace.h"

namespace wallfacer::comm {
namespace {

constexpr int kPingTag = 0x7ac0, kDataTag = 0x7ac1;

std::string host_name() {
  char buf[256] = {0};
  if (gethostname(buf, sizeof buf - 1) != 0) return "localhost";
  return buf;
}

// Bytes in a float buffer (MPI moves floats bit for bit between ranks of one architecture).
std::vector<float> pack(const std::string& bytes) {
  std::vector<float> f((bytes.size() + 3) / 4, 0.0f);
  if (!bytes.empty()) std::memcpy(f.data(), bytes.data(), bytes.size());
  return f;
}

// Every rank's value, on every rank.
std::vector<double> all_ranks(Communicator& world, double x) {
  std::vector<double> v(size_t(world.size()), 0.0);
  v[size_t(world.rank())] = x;
  world.all_reduce_sum(v.data(), int64_t(v.size()));
  return v;
}

// Throws UsageError on every rank unless `ok` on rank 0 (rank 0's message is `why`).
void agree(Communicator& world, bool ok, const std::string& why) {
  world.agree([&] {
    if (!ok) throw UsageError(why);
  });
}

}  // namespace

ClockSync sync_clocks(Communicator& world, int pings) {
  const int P = world.size(), rank = world.rank();
  std::vector<double> t0(size_t(P) * size_t(pings), 0.0);  // rank 0's clock at each ping
  std::vector<double> t1(static_cast<size_t>(pings)), t2(static_cast<size_t>(pings));
  float token = 0;
  world.barrier();
  if (rank == 0) {
    for (int r = 1; r < P; ++r)
      for (int k = 0; k < pings; ++k) {
        world.irecv(&token, 1, r, kPingTag).wait();
        t0[size_t(r) * size_t(pings) + size_t(k)] = double(trace::now_ns());
        world.isend(&token, 1, r, kPingTag).wait();
      }
  } else {
    for (int k = 0; k < pings; ++k) {
      float reply = 0;
      t1[size_t(k)] = double(trace::now_ns());
      auto s = world.isend(&token, 1, 0, kPingTag);
      auto rq = world.irecv(&reply, 1, 0, kPingTag);
      s.wait();
      rq.wait();
      t2[size_t(k)] = double(trace::now_ns());
    }
  }
  world.all_reduce_sum(t0.data(), int64_t(t0.size()));
  ClockSync cs;
  double error_ns = 0;
  if (rank != 0) {
    double best = -1;
    for (int k = 0; k < pings; ++k) {
      const double rtt = t2[size_t(k)] - t1[size_t(k)];
      if (best >= 0 && rtt >= best) continue;
      best = rtt;
      const double remote = t0[size_t(rank) * size_t(pings) + size_t(k)];
      cs.offset_ns = int64_t(remote - 0.5 * (t1[size_t(k)] + t2[size_t(k)]));
      error_ns = 0.5 * rtt;
    }
  }
  cs.offsets_us = all_ranks(world, double(cs.offset_ns) * 1e-3);
  cs.errors_us = all_ranks(world, error_ns * 1e-3);
  for (double e : cs.errors_us) cs.error_us = std::max(cs.error_us, e);
  return cs;
}

void check_trace_path(Communicator& world, const std::string& path) {
  bool ok = true;
  std::string why;
  if (world.rank() == 0) {
    const std::string probe = path + ".tmp";
    ok = !path.empty() && !std::filesystem::is_directory(path);
    if (ok) {
      std::FILE* f = std::fopen(probe.c_str(), "wb");
      ok = f != nullptr;
      why = fmt::format("cannot write the trace file '{}': {}", path, std::strerror(errno));
      if (f) {
        std::fclose(f);
        std::remove(probe.c_str());
      }
    } else {
      why = fmt::format("the trace file '{}' is a directory or empty", path);
    }
  }
  agree(world, ok, why);
}

void write_trace(Communicator& world, const std::string& path, const ClockSync& sync,
                 nlohmann::json metadata) {
  const int P = world.size(), rank = world.rank();
  const bool was_on = trace::on();
  trace::set_active(false);  // the merge itself is not traced
  const auto& events = trace::events();
  const nlohmann::json mine{{"host", host_name()},
                            {"dropped", trace::dropped()},
                            {"events", trace::rank_events_json(events, sync.offset_ns)}};
  const std::vector<std::uint8_t> cbor = nlohmann::json::to_cbor(mine);
  const std::string bytes(cbor.begin(), cbor.end());
  const auto sizes = all_ranks(world, double(bytes.size()));

  bool ok = true;
  std::string why;
  if (rank == 0) {
    std::vector<std::string> got(static_cast<size_t>(P));
    got[0] = bytes;
    for (int r = 1; r < P; ++r) {
      std::vector<float> buf((size_t(sizes[size_t(r)]) + 3) / 4);
      world.irecv(buf.data(), int64_t(buf.size()), r, kDataTag).wait();
      got[size_t(r)].assign(reinterpret_cast<const char*>(buf.data()), size_t(sizes[size_t(r)]));
    }
    try {  // whatever fails here, every rank still reaches agree()
      std::vector<trace::RankTrace> ranks(static_cast<size_t>(P));
      int64_t dropped = 0;
      std::vector<std::string> hosts;
      for (int r = 0; r < P; ++r) {
        const auto j = nlohmann::json::from_cbor(got[size_t(r)]);
        ranks[size_t(r)].rank = r;
        ranks[size_t(r)].host = j.at("host").get<std::string>();
        ranks[size_t(r)].events = j.at("events");
        dropped += j.at("dropped").get<int64_t>();
        hosts.push_back(ranks[size_t(r)].host);
      }
      metadata["ranks"] = P;
      metadata["hosts"] = hosts;
      metadata["alignment_error_us"] = sync.error_us;
      metadata["clock_offsets_us"] = sync.offsets_us;
      metadata["alignment_errors_us"] = sync.errors_us;
      metadata["dropped_spans"] = dropped;
      write_file_atomic(path, trace::chrome_trace(ranks, metadata).dump() + "\n");
    } catch (const std::exception& e) {
      ok = false;
      why = fmt::format("cannot write the trace file '{}': {}", path, e.what());
      std::remove((path + ".tmp").c_str());
    }
  } else {
    const auto buf = pack(bytes);
    world.isend(buf.data(), int64_t(buf.size()), 0, kDataTag).wait();
  }
  trace::set_active(was_on);
  agree(world, ok, why);
}

}  // namespace wallfacer::comm
