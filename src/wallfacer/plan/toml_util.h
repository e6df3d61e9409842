#pragma once
// Strict reading of TOML tables for the planner's files: every key is checked for type and range,
// unknown keys are errors, and every message names the file and the key.

#include <toml++/toml.h>

#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace wallfacer::plan::detail {

// Parses TOML text; a syntax error becomes a UsageError "source:line:col: what".
toml::table parse_toml(std::string_view text, const std::string& source);

// Reads the whole file; a missing file is a UsageError.
std::string read_text_file(const std::string& path, std::string_view what);

// A view of one table that remembers which keys were read, so unknown ones can be reported.
class Table {
 public:
  Table(const toml::table* t, std::string path, std::string source);
  bool has(std::string_view key) const;
  Table sub(std::string_view key, bool required = true);
  double number(std::string_view key, double lo, double hi);
  double number_or(std::string_view key, double fallback, double lo, double hi);
  int integer(std::string_view key, int lo, int hi);
  int integer_or(std::string_view key, int fallback, int lo, int hi);
  // An array of numbers in [lo, hi]; empty when the key is absent.
  std::vector<double> numbers_or_empty(std::string_view key, double lo, double hi);
  std::string string(std::string_view key);
  std::string string_or(std::string_view key, std::string fallback);
  bool boolean_or(std::string_view key, bool fallback);
  // Throws for keys never read (ignoring the sub-tables named in `ignore`).
  void reject_unknown(const std::set<std::string>& ignore = {}) const;
  std::string name(std::string_view key) const;

 private:
  const toml::node* get(std::string_view key);
  const toml::table* t_;
  std::string path_, source_;
  std::set<std::string> read_;
};

}  // namespace wallfacer::plan::detail
