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

}  // namespace
}  // namespace wallfacer::trace
