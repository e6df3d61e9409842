#include <gtest/gtest.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <utility>

#include "wallfacer/core/bf16.h"
#include "wallfacer/core/dtype.h"
#include "wallfacer/core/error.h"
#include "wallfacer/core/file.h"
#include "wallfacer/core/memory.h"
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

// The one dtype parser: each name reads back, sizes are those of the element types, and any other
// name is refused with the bad value and the accepted ones.
TEST(Core, DtypeNamesReadBack) {
  EXPECT_EQ(parse_dtype("fp32"), Dtype::fp32);
  EXPECT_EQ(parse_dtype("bf16"), Dtype::bf16);
  for (const Dtype d : {Dtype::fp32, Dtype::bf16}) EXPECT_EQ(parse_dtype(dtype_name(d)), d);
  EXPECT_EQ(dtype_bytes(Dtype::fp32), int64_t(sizeof(float)));
  EXPECT_EQ(dtype_bytes(Dtype::bf16), int64_t(sizeof(bf16)));
  for (const char* bad : {"fp16", "", "FP32", "bf16 "}) {
    try {
      parse_dtype(bad);
      ADD_FAILURE() << "'" << bad << "' was accepted";
    } catch (const UsageError& e) {
      EXPECT_EQ(std::string(e.what()),
                std::string("unknown dtype '") + bad + "': use fp32 or bf16");
    }
  }
}

TEST(Core, PngIsCompleteOnlyWithItsEndChunk) {
  const auto dir = std::filesystem::path(WALLFACER_BINARY_DIR) / "test_tmp" / "png";
  std::filesystem::create_directories(dir);
  const auto write = [&](const std::string& name, const std::string& bytes) {
    std::ofstream((dir / name).string(), std::ios::binary) << bytes;
    return (dir / name).string();
  };
  // The IEND chunk: length 0, type, CRC.
  const std::string iend("\0\0\0\0IEND\xae\x42\x60\x82", 12);
  EXPECT_TRUE(png_complete(write("whole.png", "\x89PNG\r\n\x1a\n" + iend)));
  EXPECT_FALSE(png_complete(write("cut.png", "\x89PNG\r\n\x1a\n" + iend.substr(0, 10))));
  EXPECT_FALSE(png_complete(write("empty.png", "")));
  EXPECT_FALSE(png_complete((dir / "missing.png").string()));
}

// FolderLock: one holder at a time (a second lock on the folder, even in this process, is refused
// naming the holder); the file a holder that is gone left behind is taken over; a lock that ends
// removes its file.
TEST(Core, FolderLockOneHolderAtATime) {
  const auto dir = std::filesystem::path(WALLFACER_BINARY_DIR) / "test_tmp" / "lock";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "x.lock").string();
  const std::string me = "pid " + std::to_string(::getpid());
  {
    FolderLock a(dir.string(), "x.lock", "--out");
    EXPECT_EQ(a.taken_over(), "");
    std::string text;
    std::getline(std::ifstream(path), text);
    EXPECT_EQ(text.substr(0, 5), "host ");
    EXPECT_NE(text.find(me), std::string::npos) << text;
    try {
      FolderLock b(dir.string(), "x.lock", "--out");
      ADD_FAILURE() << "a second lock was granted";
    } catch (const UsageError& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find("--out '" + dir.string() + "' is in use by another job (" + text),
                std::string::npos)
          << m;
    }
  }
  EXPECT_FALSE(std::filesystem::exists(path));
  std::ofstream(path) << "host elsewhere pid 4194305\n";  // a killed job's file
  {
    FolderLock c(dir.string(), "x.lock", "--out");
    EXPECT_EQ(c.taken_over(), "host elsewhere pid 4194305");
    FolderLock d = std::move(c);  // the lock moves with the object
    EXPECT_THROW(FolderLock(dir.string(), "x.lock", "--out"), UsageError);
  }
  EXPECT_FALSE(std::filesystem::exists(path));
  // A holder whose file was removed (wallfacer-elastic, its host lost) and handed to a new holder
  // leaves the new one's file when it ends.
  {
    std::optional<FolderLock> stalled(std::in_place, dir.string(), "x.lock", "--out");
    std::filesystem::remove(path);
    FolderLock next(dir.string(), "x.lock", "--out");
    EXPECT_EQ(next.taken_over(), "");
    stalled.reset();
    EXPECT_TRUE(std::filesystem::exists(path));
    EXPECT_THROW(FolderLock(dir.string(), "x.lock", "--out"), UsageError);
  }
  EXPECT_FALSE(std::filesystem::exists(path));
}

TEST(Core, OutputFolderMustExist) {
  const auto dir = std::filesystem::path(WALLFACER_BINARY_DIR) / "test_tmp" / "png";
  std::filesystem::create_directories(dir);
  EXPECT_NO_THROW(check_output_folder((dir / "x.png").string(), "--out"));
  EXPECT_NO_THROW(check_output_folder("x.png", "--out"));  // the working folder
  try {
    check_output_folder((dir / "none" / "x.png").string(), "--out");
    ADD_FAILURE() << "a missing folder was accepted";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("does not exist or is not a folder; give --out"),
              std::string::npos)
        << e.what();
  }
}

// Large buffers start on a 2 MiB boundary (where a huge page can map them), keep their contents
// when they grow and are freed through the path that allocated them; small ones come from new.
TEST(Core, LargeVectorsStartOnHugePageBoundaries) {
  const size_t n = kLargePageBytes / sizeof(float) + 3;
  LargeVector<float> v(n);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(v.data()) % (uintptr_t(2) << 20), 0u);
  for (size_t i = 0; i < n; ++i) v[i] = float(i % 1000);
  v.resize(3 * n, -1.0f);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(v.data()) % (uintptr_t(2) << 20), 0u);
  for (size_t i = 0; i < n; i += 4099) ASSERT_EQ(v[i], float(i % 1000));
  EXPECT_EQ(v[3 * n - 1], -1.0f);
  LargeVector<uint16_t> small(100, 7);
  small.resize(1000, 9);  // from new to new: below kLargePageBytes
  EXPECT_EQ(small[99], 7);
  EXPECT_EQ(small[999], 9);
  small.resize(kLargePageBytes, 1);  // from new to the large path
  EXPECT_EQ(small[0], 7);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(small.data()) % (uintptr_t(2) << 20), 0u);
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

// Without OMP_NUM_THREADS the cores are shared by the job's ranks on the machine.
TEST(Core, ThreadsShareTheCoresAmongLocalRanks) {
  auto saved = [](const char* name) {
    const char* v = std::getenv(name);
    return std::pair<std::string, bool>(v ? v : "", v != nullptr);
  };
  const auto omp = saved("OMP_NUM_THREADS"), ompi = saved("OMPI_COMM_WORLD_LOCAL_SIZE"),
             mpich = saved("MPI_LOCALNRANKS");
  unsetenv("OMP_NUM_THREADS");
  unsetenv("OMPI_COMM_WORLD_LOCAL_SIZE");
  unsetenv("MPI_LOCALNRANKS");
  EXPECT_EQ(local_ranks(), 1);
  cpu_set_t set;
  ASSERT_EQ(sched_getaffinity(0, sizeof(set), &set), 0);
  const int cpus = CPU_COUNT(&set);
  EXPECT_EQ(num_threads(), cpus);
  setenv("MPI_LOCALNRANKS", "2", 1);
  EXPECT_EQ(local_ranks(), 2);
  EXPECT_EQ(num_threads(), std::max(1, cpus / 2));
  setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "1000", 1);  // Open MPI's name first
  EXPECT_EQ(local_ranks(), 1000);
  EXPECT_EQ(num_threads(), 1);
  setenv("OMP_NUM_THREADS", "3", 1);  // the user's setting wins
  EXPECT_EQ(num_threads(), 3);
  auto restore = [](const char* name, const std::pair<std::string, bool>& v) {
    if (v.second)
      setenv(name, v.first.c_str(), 1);
    else
      unsetenv(name);
  };
  restore("OMP_NUM_THREADS", omp);
  restore("OMPI_COMM_WORLD_LOCAL_SIZE", ompi);
  restore("MPI_LOCALNRANKS", mpich);
}

}  // namespace
}  // namespace wallfacer
