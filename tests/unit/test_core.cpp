#include <gtest/gtest.h>

#include "wallfacer/core/error.h"
#include "wallfacer/core/threads.h"

namespace wallfacer {
namespace {

TEST(Core, CheckThrowsWithPlace) {
  try {
    WF_CHECK(1 + 1 == 3, "arithmetic is off: {}", 42);
    FAIL() << "WF_CHECK did not throw";
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("arithmetic is off: 42"), std::string::npos) << msg;
    EXPECT_NE(msg.find("test_core.cpp:"), std::string::npos) << msg;
  }
}

TEST(Core, UsageCheckThrowsUsageError) {
  EXPECT_THROW(WF_USAGE_CHECK(false, "bad {}", "value"), UsageError);
  EXPECT_NO_THROW(WF_USAGE_CHECK(true, "fine"));
}

TEST(Core, ThreadsFollowEnvironment) {
  const char* old = std::getenv("OMP_NUM_THREADS");
  std::string saved = old ? old : "";
  setenv("OMP_NUM_THREADS", "3", 1);
  EXPECT_EQ(num_threads(), 3);
  unsetenv("OMP_NUM_THREADS");
  EXPECT_GE(num_threads(), 1);
  if (old) setenv("OMP_NUM_THREADS", saved.c_str(), 1);
}

}  // namespace
}  // namespace wallfacer
