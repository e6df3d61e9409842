#pragma once
// The one strict TOML reader of the project's files (training configs, cluster and model files):
// parsing with the place of a syntax error, reading a file, and values checked for type (an
// integer read as a number converts to the nearest double). TomlTable reads one table key by key,
// checking ranges, and reports the keys never read. Every error is a UsageError that names the
// file and the key.

#include <toml++/toml.h>

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace wallfacer {

// Parses TOML text; a syntax error becomes a UsageError "source:line:col: what".
toml::table parse_toml(std::string_view text, const std::string& source);

// Reads the whole of the `what` file at `path` (e.g. "cluster"); a folder or an unreadable file is
// a UsageError (`example`, when given, names a file to give instead of a folder).
std::string read_toml_file(const std::string& path, std::string_view what,
                           std::string_view example = {});

// The node as a number: a float, or an integer converted to the nearest double (the TOML library
// refuses an integer that is not exactly a double). nullopt for any other type.
std::optional<double> toml_number(const toml::node& n);

// The node as an integer; nullopt for any other type (a float is not an integer).
std::optional<int64_t> toml_integer(const toml::node& n);

// A view of one table that remembers which keys were read, so unknown ones can be reported.
// Messages read "source: 'path.key' must be ...".
class TomlTable {
 public:
  TomlTable(const toml::table* t, std::string path, std::string source);
  bool has(std::string_view key) const;
  TomlTable sub(std::string_view key, bool required = true);
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
  template <typename T>
  T in_range(std::string_view key, std::optional<T> (*convert)(const toml::node&),
             std::string_view kind, T lo, T hi);
  const toml::table* t_;
  std::string path_, source_;
  std::set<std::string> read_;
};

}  // namespace wallfacer
