// The span recorder and the Chrome trace format (core/trace.h, docs/trace.md).
#include <gtest/gtest.h>

#include "wallfacer/core/error.h"
#include "wallfacer/core/trace.h"

namespace wallfacer::trace {
namespace {

TEST(Trace, NothingIsRecordedWhenOff) {
  start(8);
  stop();
  record("x", Cat::Compute, 0, 1, {});
  { Span s("y", Cat::Phase); }
  EXPECT_TRUE(events().empty());
  start(8);
  set_active(false);
  record("x", Cat::Compute, 0, 1, {});
  set_active(true);
  record("z", Cat::Compute, 0, 1, {{"k", 3}});
  stop();
  ASSERT_EQ(events().size(), 1u);
  EXPECT_STREQ(events()[0].name, "z");
  EXPECT_EQ(events()[0].args[0].num, 3);
}

TEST(Trace, FullBufferDropsAndCounts) {
  start(3);
  for (int i = 0; i < 5; ++i) record("x", Cat::Compute, i, i + 1, {});
  stop();
  EXPECT_EQ(events().size(), 3u);
  EXPECT_EQ(dropped(), 2u);
  start(3);  // a new start clears both
  stop();
  EXPECT_EQ(events().size(), 0u);
  EXPECT_EQ(dropped(), 0u);
}

TEST(Trace, SpansNest) {
  start(8);
  {
    Span outer("outer", Cat::Phase, {{"layer", 2}, {"phase", 0, "forward"}});
    Span inner("inner", Cat::Compute);
  }
  stop();
  const auto& e = events();
  ASSERT_EQ(e.size(), 2u);
  EXPECT_STREQ(e[0].name, "inner");  // recorded when it ends
  EXPECT_LE(e[1].t0, e[0].t0);
  EXPECT_GE(e[1].t1, e[0].t1);
  EXPECT_EQ(e[1].nargs, 2);
  EXPECT_STREQ(e[1].args[1].str, "forward");
}

Event ev(const char* name, Cat cat, int64_t t0, int64_t t1, uint8_t lane = 0) {
  Event e = make_event(name, cat, {{"peer", 1}});
  e.t0 = t0;
  e.t1 = t1;
  e.lane = lane;
  return e;
}

TEST(Trace, ChromeTraceProcessesThreadsAndLanes) {
  // Rank 0: a kernel and three transfers, two of them overlapping; rank 1 on another host, its
  // clock 1 us behind rank 0's.
  std::vector<RankTrace> ranks(2);
  ranks[0].host = "a";
  ranks[0].events =
      rank_events_json({ev("k", Cat::Compute, 1000, 5000), ev("send", Cat::Comm, 1000, 3000, 1),
                        ev("recv", Cat::Comm, 2000, 4000, 1), ev("send", Cat::Comm, 3000, 6000, 1)},
                       0);
  ranks[1].rank = 1;
  ranks[1].host = "b";
  ranks[1].events = rank_events_json({ev("w", Cat::Wait, 500, 1500)}, 1000);
  const auto j = chrome_trace(ranks, {{"alignment_error_us", 0.5}});
  EXPECT_EQ(j["displayTimeUnit"], "ms");
  EXPECT_EQ(j["otherData"]["alignment_error_us"], 0.5);
  std::map<std::string, int> pid;
  std::map<int, std::string> thread;
  for (const auto& e : j["traceEvents"]) {
    if (e["name"] == "process_name") pid[e["args"]["name"]] = e["pid"];
    if (e["name"] == "thread_name") thread[e["tid"]] = e["args"]["name"];
  }
  EXPECT_EQ(pid.size(), 2u);
  EXPECT_NE(pid["a"], pid["b"]);
  EXPECT_EQ(thread[0], "rank 0");
  EXPECT_EQ(thread[1], "rank 0 transfers 1");
  EXPECT_EQ(thread[2], "rank 0 transfers 2");
  EXPECT_EQ(thread[100], "rank 1");
  EXPECT_EQ(thread.size(), 4u);  // the third transfer reuses lane 1

  const auto spans = parse_chrome_trace(j.dump());
  ASSERT_EQ(spans.size(), 5u);
  double first = 1e9;
  for (const auto& s : spans) {
    first = std::min(first, s.ts);
    if (s.name == "w") {
      EXPECT_EQ(s.rank, 1);
      EXPECT_DOUBLE_EQ(s.ts, 0.5);  // 0.5 us + 1 us of offset, less the origin (rank 0 at 1 us)
    }
    if (s.name == "recv") {
      EXPECT_EQ(s.lane, 2);
    }
    if (s.name == "k") {
      EXPECT_EQ(s.lane, 0);
      EXPECT_DOUBLE_EQ(s.dur, 4.0);
      EXPECT_EQ(s.args["peer"], 1);
      EXPECT_EQ(s.args["rank"], 0);
    }
  }
  EXPECT_DOUBLE_EQ(first, 0.0);
}

TEST(Trace, ParseRejectsWhatIsNotATrace) {
  EXPECT_THROW(parse_chrome_trace("not json"), UsageError);
  EXPECT_THROW(parse_chrome_trace("{\"a\": 1}"), UsageError);
  EXPECT_THROW(parse_chrome_trace("{\"traceEvents\": [{\"ph\": \"X\"}]}"), UsageError);
  EXPECT_TRUE(parse_chrome_trace("{\"traceEvents\": []}").empty());
}

TEST(Trace, JsonErrorsSayWhereInWords) {
  auto error = [](const std::string& text) {
    try {
      parse_chrome_trace(text);
    } catch (const UsageError& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_EQ(error(""), "the file is empty (a JSON document was expected)");
  EXPECT_EQ(error(" \n"), "the file is empty (a JSON document was expected)");
  std::string e = error("{\"traceEvents\": [\n  {\"ph\": }]}");
  EXPECT_EQ(e.rfind("not valid JSON at line 2, column ", 0), 0u) << e;
  EXPECT_EQ(error("{\"traceEvents\": [\n\n{\"ts\": 1e400}]}"),
            "line 3: the number 1e400 of \"ts\" is out of range");
  e = error("{\"traceEvents\": [{\"ph\": \"M\"}, {\"ph\": \"X\"}]}");
  EXPECT_EQ(e, "trace event 2 (counting from 1) is malformed: key 'name' not found");
  for (const char* bad : {"", "{", "[1e400]", "{\"traceEvents\": [{\"ph\": 1}]}"})
    EXPECT_EQ(error(bad).find("json.exception"), std::string::npos) << error(bad);
}

// A trace file's text with the given events (as JSON text) and metadata.
std::string trace_text(const std::string& events, const std::string& other = "{}") {
  return "{\"traceEvents\": [" + events + "], \"otherData\": " + other + "}";
}

TEST(Trace, TimelineLabelsFromTheMetadata) {
  const std::string events =
      R"({"ph": "X", "name": "a", "ts": 5, "dur": 1, "tid": 0, "args": {"phase": "forward"}},
         {"ph": "X", "name": "b", "ts": 9, "dur": 1, "tid": 0, "args": {"phase": "backward"}},
         {"ph": "X", "name": "c", "ts": 7, "dur": 1, "tid": 101, "args": {"phase": "backward"}},
         {"ph": "X", "name": "d", "ts": 8, "dur": 2, "tid": 203, "args": {}})";
  const Timeline t =
      read_timeline(trace_text(events, R"({"command": "attn", "hosts": ["n0", "n0", "n\u00071"],
                  "config": {"strategy": "zigzag", "C": 2, "ulysses": 2, "P": 8,
                             "seq": 4096, "causal": true}})"));
  ASSERT_EQ(t.spans.size(), 4u);
  EXPECT_EQ(t.ranks, 3);
  EXPECT_EQ(t.spans[3].rank, 2);
  EXPECT_EQ(t.spans[3].lane, 3);
  EXPECT_EQ(t.hosts, (std::vector<std::string>{"n0", "n0", "n1"}));  // control character dropped
  EXPECT_EQ(t.command, "attn");
  EXPECT_EQ(t.title, "ulysses2 x zigzag C=2 P=8 seq=4096 causal (measured)");
  EXPECT_DOUBLE_EQ(t.backward_start_us, 9);  // rank 0's, not rank 1's earlier one

  // Metadata of other types than written is left out, not an error.
  const Timeline u = read_timeline(trace_text(events, R"({"command": 3, "hosts": ["n0", 1, "n2"],
                  "config": {"strategy": 7, "C": "x", "P": 1.5, "causal": "yes"}})"));
  EXPECT_TRUE(u.hosts.empty());
  EXPECT_EQ(u.command, "");
  EXPECT_EQ(u.title, "? P=0 seq=0");
  EXPECT_EQ(read_timeline(trace_text(events, "[1]")).title, "wallfacer trace");
  EXPECT_TRUE(read_timeline(trace_text(events, R"({"hosts": ["a"]})")).hosts.empty());
}

TEST(Trace, ParseRefusesRanksTimesAndNestingOutOfRange) {
  auto refused = [](const std::string& text, const std::string& why) {
    try {
      parse_chrome_trace(text);
      ADD_FAILURE() << "accepted: " << text;
    } catch (const UsageError& e) {
      EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << e.what();
    }
  };
  const std::string span = R"({"ph": "X", "name": "a", "ts": 0, "dur": 1)";
  refused(trace_text(span + R"(, "tid": 1e300})"), "has tid 1e+300");
  refused(trace_text(span + R"(, "tid": -1})"), "has tid -1");
  refused(trace_text(span + R"(, "tid": 104857600})"), "has tid 104857600");
  refused(trace_text(span + R"(, "args": {"rank": 1048576}})"), "has rank 1048576");
  refused(trace_text(span + R"(, "args": {"rank": 2.0}})"), "has rank 2.0");
  refused(trace_text(span + R"(, "args": [1]})"), "\"args\" must be an object");
  refused(trace_text(R"({"ph": "X", "name": "a", "ts": 1e308, "dur": 1e308})"), "finite times");
  refused(trace_text(R"({"ph": "X", "name": "a", "ts": 0, "dur": -1})"), "dur >= 0");
  refused(trace_text(span + R"(, "args": {"x": )" + std::string(100, '[') + std::string(100, ']') +
                     "}}"),
          "nested deeper than 64 levels");
  EXPECT_EQ(parse_chrome_trace(trace_text(span + R"(, "tid": 104857599})"))[0].rank, 1048575);
}

}  // namespace
}  // namespace wallfacer::trace
