// The choice of the kernels' instruction-set level (kernels/isa.h). The levels' results are
// tested in test_attention.cpp and test_ops.cpp (every level this CPU runs).

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "wallfacer/core/error.h"
#include "wallfacer/kernels/isa.h"

namespace wallfacer::kernels::isa {
namespace {

TEST(Isa, WallfacerCpuChoosesTheLevel) {
  EXPECT_EQ(choose(nullptr, Level::Avx2), Level::Avx2);
  EXPECT_EQ(choose("", Level::Avx512), Level::Avx512);
  EXPECT_EQ(choose("baseline", Level::Avx512), Level::Baseline);
  EXPECT_EQ(choose("avx2", Level::Avx512), Level::Avx2);
  EXPECT_EQ(choose("avx512", Level::Avx512), Level::Avx512);
  try {
    choose("avx512", Level::Avx2);
    FAIL() << "a level wider than the CPU's was accepted";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("widest level is avx2"), std::string::npos) << e.what();
  }
  try {
    choose("sse4", Level::Avx512);
    FAIL() << "an unknown level was accepted";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("baseline, avx2 or avx512"), std::string::npos)
        << e.what();
  }
}

// With WALLFACER_CPU set (ctest kernels_baseline), the kernels run that level; unset, the widest.
TEST(Isa, ActiveLevelFollowsTheEnvironment) {
  const char* env = std::getenv("WALLFACER_CPU");
  if (env && *env) {
    EXPECT_EQ(name(active()), std::string(env));
  } else {
    EXPECT_EQ(active(), widest_supported());
  }
}

}  // namespace
}  // namespace wallfacer::kernels::isa
