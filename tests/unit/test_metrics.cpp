// metrics.jsonl read back on --resume: damaged steps are refused naming the file and line (a float
// step is never converted to an integer), an incomplete last line is dropped and said, and the
// lines past the resumed step go.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "wallfacer/core/error.h"
#include "wallfacer/train/metrics.h"

namespace wallfacer::train {
namespace {

std::string temp_file(const std::string& name, const std::string& text) {
  const auto d = std::filesystem::path(WALLFACER_BINARY_DIR) / "test_tmp" / "metrics";
  std::filesystem::create_directories(d);
  const std::string path = (d / name).string();
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

std::string contents(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

TEST(Metrics, ParsesALine) {
  const MetricsLine m = parse_metrics_line("m", 1, R"({"step":3,"loss":2.5,"val_loss":2.75})");
  EXPECT_EQ(m.step, 3);
  EXPECT_EQ(m.loss, 2.5);
  EXPECT_TRUE(m.has_val);
  EXPECT_EQ(m.val_loss, 2.75);
  EXPECT_FALSE(parse_metrics_line("m", 1, R"({"step":1,"loss":1})").has_val);
}

TEST(Metrics, RefusesDamagedSteps) {
  for (const char* step : {"1e300", "-1", "0", "\"x\"", "1.5", "null", "18446744073709551615",
                           "9223372036854775808"}) {
    const std::string line = std::string(R"({"step":)") + step + R"(,"loss":1})";
    try {
      parse_metrics_line("run/metrics.jsonl", 4, line);
      ADD_FAILURE() << "accepted step " << step;
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find("run/metrics.jsonl:4: damaged metrics line"), std::string::npos) << msg;
      EXPECT_NE(msg.find("\"step\" is "), std::string::npos) << msg;
      EXPECT_NE(msg.find("--overwrite"), std::string::npos) << msg;
    }
  }
  for (const char* line : {"garbage", "[1]", R"({"loss":1})", R"({"step":1})",
                           R"({"step":1,"loss":"x"})", R"({"step":1,"loss":1,"val_loss":[]})"})
    EXPECT_THROW(parse_metrics_line("m", 1, line), Error) << line;
  EXPECT_EQ(parse_metrics_line("m", 1, R"({"step":9223372036854775807,"loss":1})").step, INT64_MAX);
}

TEST(Metrics, TrimKeepsStepsUpToTheResumedOne) {
  const std::string lines =
      "{\"step\":1,\"loss\":3}\n{\"step\":2,\"loss\":2}\n{\"step\":3,\"loss\":1}\n";
  const std::string path = temp_file("trim.jsonl", lines);
  EXPECT_EQ(trim_metrics(path, 2), "");
  EXPECT_EQ(contents(path), "{\"step\":1,\"loss\":3}\n{\"step\":2,\"loss\":2}\n");
  EXPECT_EQ(trim_metrics(path, 0), "");
  EXPECT_EQ(contents(path), "");
}

TEST(Metrics, DropsAnIncompleteLastLineAndSaysSo) {
  const std::string path =
      temp_file("cut.jsonl", "{\"step\":1,\"loss\":3}\n{\"step\":2,\"loss\":2}\n{\"step\":3,\"lo");
  const std::string note = trim_metrics(path, 5);
  EXPECT_NE(note.find("incomplete last line 3"), std::string::npos) << note;
  EXPECT_EQ(contents(path), "{\"step\":1,\"loss\":3}\n{\"step\":2,\"loss\":2}\n");
}

TEST(Metrics, ADamagedLineLeavesTheFileAsItWas) {
  const std::string text = "{\"step\":1,\"loss\":3}\n{\"step\":1e300,\"loss\":2}\n";
  const std::string path = temp_file("bad.jsonl", text);
  try {
    trim_metrics(path, 1);
    ADD_FAILURE() << "a damaged line was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("bad.jsonl:2:"), std::string::npos) << e.what();
  }
  EXPECT_EQ(contents(path), text);
}

}  // namespace
}  // namespace wallfacer::train
