#pragma once
// The measured errors behind the "measured in tests" columns of docs/numerics.md. With
// WALLFACER_ERRORS_OUT=FILE in the environment, record_error() appends one JSON line to FILE: the
// table, the quantity, the test, the case, the code path, the error and the test's tolerance
// (bench/numerics_errors.sh runs the tests so; bench/numerics_table.py renders the tables). Without
// it nothing is written.

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

namespace wallfacer::measured_errors {

// Appends {"table", "quantity", "test", "case", "path", "err", "tol"} to $WALLFACER_ERRORS_OUT.
// The names are identifiers of the tests (no quotes or backslashes to escape).
inline void record_error(std::string_view table, std::string_view quantity,
                         std::string_view case_name, std::string_view path, double err,
                         double tol) {
  const char* out = std::getenv("WALLFACER_ERRORS_OUT");
  if (out == nullptr || *out == '\0') return;
  const ::testing::TestInfo* info = ::testing::UnitTest::GetInstance()->current_test_info();
  const std::string test =
      info ? fmt::format("{}.{}", info->test_suite_name(), info->name()) : std::string();
  std::FILE* f = std::fopen(out, "a");
  if (f == nullptr) {
    ADD_FAILURE() << "cannot append to WALLFACER_ERRORS_OUT=" << out;
    return;
  }
  const std::string line = fmt::format(
      "{{\"table\": \"{}\", \"quantity\": \"{}\", \"test\": \"{}\", \"case\": \"{}\", "
      "\"path\": \"{}\", \"err\": {:.17g}, \"tol\": {:.17g}}}\n",
      table, quantity, test, case_name, path, err, tol);
  std::fputs(line.c_str(), f);
  std::fclose(f);
}

}  // namespace wallfacer::measured_errors
