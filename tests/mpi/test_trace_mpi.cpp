// Traces of distributed attention (docs/trace.md), on the ranks of one mpirun launch: for ring,
// zigzag, Ulysses and WallFacer-C the merged file is valid JSON in the documented format; every op
// of every rank's schedule appears exactly once (forward and backward); the spans of a rank's
// sequential ops never overlap; every send pairs with its receive (same bytes, the receive ends
// after the send starts, within the stated alignment error); the bytes of a rank's send spans are
// those it handed to MPI for them (mpi_bytes.h). An unwritable path fails on every rank without
// hanging and leaves no file.
// Usage: mpirun -np P test_trace_mpi DIR

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "mpi_bytes.h"
#include "mpi_check.h"
#include "wallfacer/comm/communicator.h"
#include "wallfacer/comm/trace_merge.h"
#include "wallfacer/core/error.h"
#include "wallfacer/core/file.h"
#include "wallfacer/core/trace.h"
#include "wallfacer/seqpar/attention.h"
#include "wallfacer/seqpar/harness.h"
#include "wallfacer/seqpar/schedule.h"

using namespace wallfacer;
using namespace wallfacer::seqpar;

namespace {

using testing::check;

const char* op_name(const Op& op) {
  switch (op.kind) {
    case OpKind::Send:
      return "send";
    case OpKind::Recv:
      return "recv";
    case OpKind::Wait:
      return "wait";
    case OpKind::Compute:
      return op.backward ? "attention backward" : "attention forward";
    default:
      return nullptr;  // Local and Collective: named by their kind
  }
}

// The checks of one merged file (rank 0).
void check_file(const std::string& path, const AttnConfig& cfg, int P) {
  const std::string what = fmt::format("{} C={}", strategy_name(cfg.strategy), cfg.teams);
  const std::string text = read_file(path);
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  check(!j.is_discarded(), what + ": the file is not valid JSON");
  if (j.is_discarded()) return;
  check(j.contains("traceEvents") && j["traceEvents"].is_array(), what + ": no traceEvents array");
  check(j.value("displayTimeUnit", "") == "ms", what + ": displayTimeUnit");
  const auto& meta = j["otherData"];
  check(meta.contains("alignment_error_us") && meta["alignment_error_us"].get<double>() >= 0,
        what + ": no alignment_error_us in otherData");
  check(meta.value("ranks", 0) == P, what + ": otherData.ranks");
  const double err = meta.value("alignment_error_us", 0.0);
  int process_names = 0, thread_names = 0;
  for (const auto& e : j["traceEvents"]) {
    check(e.contains("ph") && e.contains("pid") && e.contains("name"), what + ": event fields");
    if (e["ph"] == "M" && e["name"] == "process_name") ++process_names;
    if (e["ph"] == "M" && e["name"] == "thread_name" && e.value("tid", -1) % 100 == 0)
      ++thread_names;
    if (e["ph"] == "X") {
      check(e.contains("ts") && e.contains("dur") && e.contains("tid") && e.contains("cat") &&
                e["dur"].get<double>() >= 0,
            what + ": X event fields");
    }
  }
  check(process_names >= 1, what + ": no process_name");
  check(thread_names == P,
        what + fmt::format(": {} rank threads named, {} ranks", thread_names, P));

  const auto spans = trace::parse_chrome_trace(text);
  for (int r = 0; r < P; ++r) {
    const Schedule s = make_schedule(cfg, P, r);
    for (const char* phase : {"forward", "backward"}) {
      const auto& ops = std::string(phase) == "forward" ? s.fwd : s.bwd;
      std::vector<int> seen(ops.size(), 0);
      for (const auto& sp : spans) {
        if (sp.rank != r || sp.args.value("phase", "") != phase || !sp.args.contains("op"))
          continue;
        const int i = sp.args["op"].get<int>();
        check(i >= 0 && i < int(ops.size()), what + ": op index out of range");
        if (i < 0 || i >= int(ops.size())) continue;
        ++seen[size_t(i)];
        const char* name = op_name(ops[size_t(i)]);
        if (name) check(sp.name == name, what + fmt::format(": op {} is {}", i, sp.name));
      }
      for (size_t i = 0; i < ops.size(); ++i)
        check(seen[i] == 1,
              what + fmt::format(": rank {} {} op {} appears {} times", r, phase, i, seen[i]));
    }
    // Sequential ops (everything but transfers and the phase spans that contain them).
    std::vector<const trace::ParsedSpan*> seq;
    for (const auto& sp : spans)
      if (sp.rank == r && sp.cat != "phase" && sp.name != "send" && sp.name != "recv")
        seq.push_back(&sp);
    std::sort(seq.begin(), seq.end(), [](auto* a, auto* b) { return a->ts < b->ts; });
    for (size_t i = 1; i < seq.size(); ++i)
      check(seq[i]->ts >= seq[i - 1]->ts + seq[i - 1]->dur - 1e-3,
            what + fmt::format(": rank {}: {} overlaps {}", r, seq[i]->name, seq[i - 1]->name));
  }

  // Sends and receives in posting order per (src, dst, tag): the k-th of each pair up.
  std::map<std::tuple<int, int, int>, std::vector<const trace::ParsedSpan*>> sends, recvs;
  for (const auto& sp : spans) {
    if (sp.name == "send")
      sends[{sp.rank, sp.args["peer"].get<int>(), sp.args["tag"]}].push_back(&sp);
    if (sp.name == "recv")
      recvs[{sp.args["peer"].get<int>(), sp.rank, sp.args["tag"]}].push_back(&sp);
  }
  check(!sends.empty() || cfg.strategy == Strategy::Ulysses, what + ": no sends");
  check(sends.size() == recvs.size(), what + ": send and receive channels differ");
  for (auto& [key, ss] : sends) {
    auto& rs = recvs[key];
    check(ss.size() == rs.size(), what + ": unmatched sends");
    auto by_ts = [](auto* a, auto* b) { return a->ts < b->ts; };
    std::sort(ss.begin(), ss.end(), by_ts);
    std::sort(rs.begin(), rs.end(), by_ts);
    for (size_t k = 0; k < std::min(ss.size(), rs.size()); ++k) {
      check(ss[k]->args["bytes"] == rs[k]->args["bytes"], what + ": send and receive bytes differ");
      check(rs[k]->ts + rs[k]->dur >= ss[k]->ts - err - 1e-3,
            what + fmt::format(": a receive on rank {} ends {} us before its send starts",
                               rs[k]->rank, ss[k]->ts - rs[k]->ts - rs[k]->dur));
    }
  }
}

// This rank's send spans against what it handed to MPI while they were recorded (`handed`): per
// (peer, tag) of its schedule's sends, the spans' bytes sum to what MPI's sends were given.
void check_sends_handed(const mpi_bytes::Tally& handed, const Schedule& s,
                        const std::string& what) {
  std::set<int> tags;
  for (const auto* ops : {&s.fwd, &s.bwd})
    for (const Op& op : *ops)
      if (op.kind == OpKind::Send) tags.insert(op.tag);
  std::map<std::pair<int64_t, int64_t>, int64_t> traced, sent;
  for (const auto& e : trace::events()) {
    if (std::string(e.name) != "send") continue;
    std::map<std::string, int64_t> arg;
    for (int i = 0; i < e.nargs; ++i) arg[e.args[size_t(i)].key] = e.args[size_t(i)].num;
    traced[{arg["peer"], arg["tag"]}] += arg["bytes"];
  }
  for (const auto& [k, v] : handed)
    if (k.kind == mpi_bytes::Kind::Send && tags.count(k.tag)) sent[{k.peer, k.tag}] += v.bytes;
  check(traced == sent && traced.empty() == tags.empty(),
        fmt::format("{} rank {}: the send spans' bytes differ from what MPI's sends "
                    "were handed",
                    what, s.rank));
}

}  // namespace

int main(int argc, char** argv) {
  comm::MpiSession session(&argc, &argv);
  auto world = comm::Communicator::world();
  const int P = world.size(), rank = world.rank();
  const std::string dir = argc > 1 ? argv[1] : ".";
  std::vector<AttnConfig> cfgs;
  for (auto [s, C] : {std::pair{Strategy::Ring, 1},
                      {Strategy::Zigzag, 1},
                      {Strategy::Ulysses, 1},
                      {Strategy::WallFacer, 2}}) {
    AttnConfig c;
    c.strategy = s;
    c.teams = C;
    c.seq = 32 * P;
    c.heads = 4;
    c.kv_heads = 4;
    c.head_dim = 8;
    c.causal = s != Strategy::Ring;
    if (s == Strategy::WallFacer && P % 4 != 0) continue;
    if (s == Strategy::Ulysses && c.heads % P != 0) continue;
    cfgs.push_back(c);
  }
  const auto clocks = comm::sync_clocks(world);
  for (const auto& cfg : cfgs) {
    const std::string path =
        fmt::format("{}/trace_{}_p{}.json", dir, strategy_name(cfg.strategy), P);
    const auto pos = local_positions(cfg, P, rank);
    const int64_t n = int64_t(pos.size());
    std::vector<float> q(size_t(n * cfg.heads * cfg.head_dim)), k(q.size()), v(q.size()),
        o(q.size()), dout(q.size()), dq(q.size()), dk(q.size()), dv(q.size()),
        lse(size_t(n * cfg.heads));
    fill_inputs(7, InputTensor::Q, pos, 1, cfg.heads, cfg.head_dim, q.data());
    fill_inputs(7, InputTensor::K, pos, 1, cfg.heads, cfg.head_dim, k.data());
    fill_inputs(7, InputTensor::V, pos, 1, cfg.heads, cfg.head_dim, v.data());
    fill_inputs(7, InputTensor::Dout, pos, 1, cfg.heads, cfg.head_dim, dout.data());
    DistAttention attn(cfg, world);
    attn.set_progress_rows(8);  // many progress tests: transfers complete between sub-blocks
    trace::start(4096);
    const mpi_bytes::Tally before = mpi_bytes::tally();
    attn.forward(q.data(), k.data(), v.data(), o.data(), lse.data());
    attn.backward(q.data(), k.data(), v.data(), o.data(), lse.data(), dout.data(), dq.data(),
                  dk.data(), dv.data());
    trace::stop();
    check_sends_handed(mpi_bytes::since(before), make_schedule(cfg, P, rank),
                       fmt::format("{} C={}", strategy_name(cfg.strategy), cfg.teams));
    comm::write_trace(world, path, clocks, {{"test", "trace_mpi"}});
    if (rank == 0) check_file(path, cfg, P);
  }

  // Off: nothing is recorded.
  {
    trace::start(16);
    trace::stop();
    trace::record("x", trace::Cat::Compute, 0, 1, {});
    check(trace::events().empty(), "a span was recorded while tracing was off");
  }

  // An unwritable path: every rank throws, no rank hangs, nothing is left behind.
  {
    const std::string bad = dir + "/no-such-dir/trace.json";
    int threw = 0;
    try {
      comm::check_trace_path(world, bad);
    } catch (const UsageError&) {
      threw = 1;
    }
    check(threw == 1, "check_trace_path accepted a path in a missing directory");
    threw = 0;
    try {
      comm::write_trace(world, bad, clocks, {});
    } catch (const UsageError& e) {
      threw = 1;
      if (rank == 0)
        check(std::string(e.what()).find("no-such-dir") != std::string::npos,
              "rank 0's message does not name the path");
    }
    check(threw == 1, "write_trace to a missing directory did not throw");
    check(!std::filesystem::exists(bad) && !std::filesystem::exists(bad + ".tmp"),
          "a failed write left a file");
  }

  return testing::finish(world, fmt::format("{} configs on {} ranks", cfgs.size(), P));
}
