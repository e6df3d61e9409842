// Training configs read from TOML and --set (train/config.h): what they refuse, and that the TOML
// a checkpoint records reads back to the same values.
#include <gtest/gtest.h>

#include "wallfacer/core/error.h"
#include "wallfacer/train/config.h"

namespace wallfacer::train {
namespace {

// The UsageError message of `f`, or "" when it does not throw one.
template <class F>
std::string usage_error(F&& f) {
  try {
    f();
  } catch (const UsageError& e) {
    return e.what();
  }
  return "";
}

TEST(TrainConfig, SetStringsMustBeUtf8) {
  TrainConfig c;
  c.set("data.dir=runs/d\xc3\xa9j\xc3\xa0");  // "déjà" in UTF-8
  EXPECT_EQ(TrainConfig::from_toml(c.to_toml(), "t").data_dir, c.data_dir);
  for (const char* bad : {"data.dir=\xff", "data.dir=a\xc3", "data.dir=\xc0\xaf",
                          "data.dir=\xed\xa0\x80", "data.dir=\xf4\x90\x80\x80"}) {
    EXPECT_NE(usage_error([&] { c.set(bad); }).find("data.dir expects UTF-8 text"),
              std::string::npos)
        << bad;
  }
  EXPECT_EQ(c.data_dir, "runs/d\xc3\xa9j\xc3\xa0");
}

}  // namespace
}  // namespace wallfacer::train
