#include "wallfacer/core/trace.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <optional>

#include "wallfacer/core/error.h"
#include "wallfacer/core/json_error.h"

namespace wallfacer::trace {

namespace detail {
bool active = false;
}

namespace {

struct Recorder {
  std::vector<Event> buf;  // preallocated by start()
  size_t size = 0, dropped = 0;
  bool started = false;
  std::vector<Event> view;  // what events() returns
};

Recorder& recorder() {
  static Recorder r;
  return r;
}

}  // namespace

const char* cat_name(Cat c) {
  switch (c) {
    case Cat::Compute:
      return "compute";
    case Cat::Comm:
      return "comm";
    case Cat::Wait:
      return "wait";
    case Cat::Phase:
      return "phase";
  }
  return "compute";
}

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void start(size_t capacity) {
  auto& r = recorder();
  r.buf.assign(std::max<size_t>(capacity, 1), Event{});  // touches every page now
  r.size = r.dropped = 0;
  r.view.clear();
  r.started = true;
  detail::active = true;
}

void set_active(bool active) { detail::active = active && recorder().started; }

void stop() {
  detail::active = false;
  recorder().started = false;
}

void record(const Event& e) {
  if (!detail::active) return;
  auto& r = recorder();
  if (r.size < r.buf.size()) {
    r.buf[r.size++] = e;
  } else {
    ++r.dropped;
  }
}

Event make_event(const char* name, Cat cat, std::initializer_list<Arg> args) {
  Event e;
  e.name = name;
  e.cat = cat;
  for (const Arg& a : args) {
    if (e.nargs == kMaxArgs) break;
    e.args[size_t(e.nargs++)] = a;
  }
  return e;
}

void record(const char* name, Cat cat, int64_t t0, int64_t t1, std::initializer_list<Arg> args,
            uint8_t lane) {
  if (!detail::active) return;
  Event e = make_event(name, cat, args);
  e.lane = lane;
  e.t0 = t0;
  e.t1 = t1;
  record(e);
}

const std::vector<Event>& events() {
  auto& r = recorder();
  r.view.assign(r.buf.begin(), r.buf.begin() + std::ptrdiff_t(r.size));
  return r.view;
}

size_t dropped() { return recorder().dropped; }

Span::Span(const char* name, Cat cat, std::initializer_list<Arg> args) : on_(on()) {
  if (!on_) return;
  e_ = make_event(name, cat, args);
  e_.t0 = now_ns();
}

Span::~Span() {
  if (!on_) return;
  e_.t1 = now_ns();
  record(e_);
}

// ---------------------------------------------------------------------------------------------

nlohmann::json rank_events_json(const std::vector<Event>& events, int64_t offset_ns) {
  nlohmann::json out = nlohmann::json::array();
  for (const Event& e : events) {
    nlohmann::json args = nlohmann::json::object();
    for (int i = 0; i < e.nargs; ++i) {
      const Arg& a = e.args[size_t(i)];
      if (a.str) {
        args[a.key] = a.str;
      } else {
        args[a.key] = a.num;
      }
    }
    nlohmann::json j{{"name", e.name},
                     {"cat", cat_name(e.cat)},
                     {"ph", "X"},
                     {"ts", double(e.t0 + offset_ns) * 1e-3},  // us, to the ns
                     {"dur", double(e.t1 - e.t0) * 1e-3},
                     {"args", std::move(args)}};
    if (e.lane != 0) j["lane"] = int(e.lane);
    out.push_back(std::move(j));
  }
  return out;
}

namespace {
// Microseconds rounded to the nanosecond (differences of large times carry float noise).
double ns_round(double us) { return std::round(us * 1e3) * 1e-3; }
}  // namespace

nlohmann::json chrome_trace(const std::vector<RankTrace>& ranks, nlohmann::json metadata) {
  double t_min = 0;
  bool any = false;
  for (const auto& r : ranks)
    for (const auto& e : r.events) {
      const double ts = e.at("ts").get<double>();
      t_min = any ? std::min(t_min, ts) : ts;
      any = true;
    }
  std::map<std::string, int> pid_of;  // host -> pid, in rank order of first appearance
  std::vector<const RankTrace*> order;
  for (const auto& r : ranks) order.push_back(&r);
  std::sort(order.begin(), order.end(),
            [](const RankTrace* a, const RankTrace* b) { return a->rank < b->rank; });
  nlohmann::json out = nlohmann::json::array();
  auto meta = [&](const char* what, int pid, int tid, const nlohmann::json& args) {
    nlohmann::json m{{"name", what}, {"ph", "M"}, {"pid", pid}, {"args", args}};
    if (tid >= 0) m["tid"] = tid;
    out.push_back(std::move(m));
  };
  for (const RankTrace* r : order) {
    if (pid_of.count(r->host)) continue;
    const int pid = int(pid_of.size());
    pid_of[r->host] = pid;
    meta("process_name", pid, -1, {{"name", r->host}});
    meta("process_sort_index", pid, -1, {{"sort_index", pid}});
  }
  for (const RankTrace* r : order) {
    const int pid = pid_of.at(r->host), tid = 100 * r->rank;
    meta("thread_name", pid, tid, {{"name", fmt::format("rank {}", r->rank)}});
    meta("thread_sort_index", pid, tid, {{"sort_index", tid}});
    // Transfers: greedy lanes in order of start, each lane free of overlaps.
    std::vector<const nlohmann::json*> transfers;
    for (const auto& e : r->events) {
      nlohmann::json x = e;
      if (x.contains("lane")) {
        transfers.push_back(&e);
        continue;
      }
      x.erase("lane");
      x["pid"] = pid;
      x["tid"] = tid;
      x["ts"] = ns_round(x["ts"].get<double>() - t_min);
      x["dur"] = ns_round(x["dur"].get<double>());
      x["args"]["rank"] = r->rank;
      out.push_back(std::move(x));
    }
    std::stable_sort(transfers.begin(), transfers.end(), [](const auto* a, const auto* b) {
      return a->at("ts").template get<double>() < b->at("ts").template get<double>();
    });
    std::vector<double> lane_end;
    for (const auto* e : transfers) {
      const double ts = e->at("ts").get<double>(), end = ts + e->at("dur").get<double>();
      size_t k = 0;
      while (k < lane_end.size() && lane_end[k] > ts) ++k;
      if (k == lane_end.size()) {
        lane_end.push_back(end);
        const int t = tid + 1 + int(k);
        meta("thread_name", pid, t,
             {{"name", fmt::format("rank {} transfers {}", r->rank, k + 1)}});
        meta("thread_sort_index", pid, t, {{"sort_index", t}});
      } else {
        lane_end[k] = end;
      }
      nlohmann::json x = *e;
      x.erase("lane");
      x["pid"] = pid;
      x["tid"] = tid + 1 + int(std::min<size_t>(k, 98));
      x["ts"] = ns_round(ts - t_min);
      x["dur"] = ns_round(x["dur"].get<double>());
      x["args"]["rank"] = r->rank;
      out.push_back(std::move(x));
    }
  }
  metadata["time_origin_us"] = t_min;
  return {{"traceEvents", std::move(out)}, {"displayTimeUnit", "ms"}, {"otherData", metadata}};
}

namespace {

constexpr int kMaxJsonDepth = 64;

// A JSON integer node as int64 within [lo, hi], or nullopt when the node is not an integer in it.
std::optional<int64_t> integer_in(const nlohmann::json& n, int64_t lo, int64_t hi) {
  if (n.is_number_unsigned()) {
    const auto v = n.get<uint64_t>();
    if (v > uint64_t(hi)) return std::nullopt;
    return int64_t(v);
  }
  if (!n.is_number_integer()) return std::nullopt;
  const auto v = n.get<int64_t>();
  if (v < lo || v > hi) return std::nullopt;
  return v;
}

}  // namespace

std::vector<ParsedSpan> parse_chrome_trace(const std::string& text, nlohmann::json* metadata) {
  // Traces nest four levels deep; deeper input is refused before values are copied (recursively).
  const nlohmann::json::parser_callback_t depth_limit = [](int depth, nlohmann::json::parse_event_t,
                                                           nlohmann::json&) {
    if (depth > kMaxJsonDepth)
      throw UsageError(
          fmt::format("not a trace: JSON nested deeper than {} levels", kMaxJsonDepth));
    return true;
  };
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text, depth_limit);
  } catch (const UsageError&) {
    throw;
  } catch (const std::exception& e) {
    throw UsageError(describe_json_error(text, e));
  }
  WF_USAGE_CHECK(j.is_object() && j.contains("traceEvents") && j["traceEvents"].is_array(),
                 "not a Chrome trace: no \"traceEvents\" array");
  if (metadata) *metadata = j.value("otherData", nlohmann::json::object());
  std::vector<ParsedSpan> out;
  size_t index = 0;  // of the event being read, for the message
  try {
    for (const auto& e : j["traceEvents"]) {
      ++index;
      if (e.at("ph") != "X") continue;
      ParsedSpan s;
      s.name = e.at("name").get<std::string>();
      s.cat = e.value("cat", "");
      s.ts = e.at("ts").get<double>();
      s.dur = e.at("dur").get<double>();
      WF_USAGE_CHECK(std::isfinite(s.ts + s.dur) && s.dur >= 0,
                     "span '{}' has ts = {} and dur = {}: finite times and dur >= 0 expected",
                     s.name, s.ts, s.dur);
      s.args = e.value("args", nlohmann::json::object());
      WF_USAGE_CHECK(s.args.is_object(), "span '{}': \"args\" must be an object", s.name);
      const nlohmann::json tid_node = e.value("tid", nlohmann::json(0));
      const auto tid = integer_in(tid_node, 0, 100 * int64_t(kMaxTraceRank) + 99);
      WF_USAGE_CHECK(tid, "span '{}' has tid {}: an integer in 0..{} expected", s.name,
                     tid_node.dump(), 100 * int64_t(kMaxTraceRank) + 99);
      const nlohmann::json rank_node = s.args.value("rank", nlohmann::json(*tid / 100));
      const auto rank = integer_in(rank_node, 0, kMaxTraceRank);
      WF_USAGE_CHECK(rank, "span '{}' has rank {}: an integer in 0..{} expected", s.name,
                     rank_node.dump(), kMaxTraceRank);
      s.rank = int(*rank);
      s.lane = int(*tid % 100);
      out.push_back(std::move(s));
    }
  } catch (const nlohmann::json::exception& e) {
    throw UsageError(fmt::format("trace event {} (counting from 1) is malformed: {}", index,
                                 json_error_reason(e)));
  }
  return out;
}

namespace {

// Printable text: control characters dropped.
std::string printable(const std::string& s) {
  std::string out;
  for (char c : s)
    if (static_cast<unsigned char>(c) >= 0x20 && c != 0x7f) out += c;
  return out;
}

// Typed reads of metadata values that fall back when the key is absent or of another type.
std::string text_or(const nlohmann::json& obj, const char* key, const std::string& fallback) {
  const auto it = obj.find(key);
  return it != obj.end() && it->is_string() ? printable(it->get<std::string>()) : fallback;
}
int64_t integer_or(const nlohmann::json& obj, const char* key, int64_t fallback) {
  const auto it = obj.find(key);
  if (it == obj.end()) return fallback;
  return integer_in(*it, INT64_MIN, INT64_MAX).value_or(fallback);
}
bool flag_or(const nlohmann::json& obj, const char* key, bool fallback) {
  const auto it = obj.find(key);
  return it != obj.end() && it->is_boolean() ? it->get<bool>() : fallback;
}

}  // namespace

Timeline read_timeline(const std::string& text) {
  Timeline t;
  nlohmann::json meta;
  t.spans = parse_chrome_trace(text, &meta);
  if (!meta.is_object()) meta = nlohmann::json::object();
  for (const auto& s : t.spans) {
    t.ranks = std::max(t.ranks, s.rank + 1);
    if (s.rank == 0 && text_or(s.args, "phase", "") == "backward" &&
        (t.backward_start_us < 0 || s.ts < t.backward_start_us))
      t.backward_start_us = s.ts;
  }
  t.command = text_or(meta, "command", "");
  const auto hosts = meta.find("hosts");
  if (hosts != meta.end() && hosts->is_array() && hosts->size() == size_t(t.ranks) &&
      std::all_of(hosts->begin(), hosts->end(), [](const auto& h) { return h.is_string(); })) {
    for (const auto& h : *hosts) t.hosts.push_back(printable(h.template get<std::string>()));
  }
  const auto config = meta.find("config");
  if (config == meta.end() || !config->is_object()) {
    t.title = "wallfacer trace";
    return t;
  }
  const auto& c = *config;
  std::string s = text_or(c, "strategy", "?");
  if (integer_or(c, "C", 1) > 1) s += fmt::format(" C={}", integer_or(c, "C", 1));
  if (integer_or(c, "ulysses", 1) > 1)
    s = fmt::format("ulysses{} x {}", integer_or(c, "ulysses", 1), s);
  s += fmt::format(" P={} seq={}", integer_or(c, "P", 0), integer_or(c, "seq", 0));
  if (flag_or(c, "causal", false)) s += " causal";
  if (t.command == "plan") s += " (predicted)";
  if (t.command == "attn" || t.command == "train") s += " (measured)";
  t.title = s;
  return t;
}

}  // namespace wallfacer::trace
