#pragma once
// Errors: one exception type carrying the place it was raised, and checked-call macros.
// wallfacer's functions report failures by throwing Error, or UsageError for input the caller
// chose (a config, a size, a name); messages are one line saying what is wrong and how to fix it.
// The CLI turns them into exit codes 1 and 2 (docs/faults.md).

#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace wallfacer {

// Raised for bad input or a failed call; the message says what is wrong and where.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Raised for invalid user input (bad flag values, inconsistent configs); the CLI exits with 2.
class UsageError : public Error {
 public:
  using Error::Error;
};

[[noreturn]] void raise_error(const char* file, int line, const std::string& msg);

}  // namespace wallfacer

// WF_CHECK(cond, "format {}", args...): throws wallfacer::Error with file:line when cond is false.
#define WF_CHECK(cond, ...)                                                              \
  do {                                                                                   \
    if (!(cond)) ::wallfacer::raise_error(__FILE__, __LINE__, fmt::format(__VA_ARGS__)); \
  } while (0)

// WF_USAGE_CHECK(cond, ...): throws wallfacer::UsageError (no file:line: it is the user's input).
#define WF_USAGE_CHECK(cond, ...)                                         \
  do {                                                                    \
    if (!(cond)) throw ::wallfacer::UsageError(fmt::format(__VA_ARGS__)); \
  } while (0)
