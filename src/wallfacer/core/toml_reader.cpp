#include "wallfacer/core/toml_reader.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "wallfacer/core/error.h"

namespace wallfacer {

toml::table parse_toml(std::string_view text, const std::string& source) {
  try {
    return toml::parse(text, source);
  } catch (const toml::parse_error& e) {
    const auto& b = e.source().begin;
    throw UsageError(fmt::format("{}:{}:{}: {}", source, b.line, b.column, e.description()));
  }
}

std::string read_toml_file(const std::string& path, std::string_view what,
                           std::string_view example) {
  std::error_code ec;
  WF_USAGE_CHECK(!std::filesystem::is_directory(path, ec),
                 "the {} file '{}' is a folder; give the path of a TOML file{}", what, path,
                 example.empty() ? std::string() : fmt::format(" such as {}", example));
  std::ifstream in(path);
  WF_USAGE_CHECK(in.good(), "cannot read {} file '{}' (check the path)", what, path);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::optional<double> toml_number(const toml::node& n) {
  if (n.is_integer()) return static_cast<double>(*n.value<int64_t>());
  if (n.is_floating_point()) return *n.value<double>();
  return std::nullopt;
}

std::optional<int64_t> toml_integer(const toml::node& n) {
  if (n.is_integer()) return *n.value<int64_t>();
  return std::nullopt;
}

TomlTable::TomlTable(const toml::table* t, std::string path, std::string source)
    : t_(t), path_(std::move(path)), source_(std::move(source)) {}

std::string TomlTable::name(std::string_view key) const {
  return path_.empty() ? std::string(key) : path_ + "." + std::string(key);
}

bool TomlTable::has(std::string_view key) const { return t_ && t_->contains(key); }

const toml::node* TomlTable::get(std::string_view key) {
  read_.insert(std::string(key));
  return t_ ? t_->get(key) : nullptr;
}

TomlTable TomlTable::sub(std::string_view key, bool required) {
  const toml::node* n = get(key);
  WF_USAGE_CHECK(n || !required, "{}: missing table [{}]", source_, name(key));
  WF_USAGE_CHECK(!n || n->is_table(), "{}: '{}' must be a table", source_, name(key));
  return TomlTable(n ? n->as_table() : nullptr, name(key), source_);
}

// The value of a required key as `convert` reads it, in [lo, hi]; `kind` names the type wanted.
template <typename T>
T TomlTable::in_range(std::string_view key, std::optional<T> (*convert)(const toml::node&),
                      std::string_view kind, T lo, T hi) {
  const toml::node* n = get(key);
  WF_USAGE_CHECK(n, "{}: missing key '{}'", source_, name(key));
  const std::optional<T> v = convert(*n);
  WF_USAGE_CHECK(v, "{}: '{}' must be {}", source_, name(key), kind);
  WF_USAGE_CHECK(*v >= lo && *v <= hi, "{}: '{}' = {} is out of range [{}, {}]", source_, name(key),
                 *v, lo, hi);
  return *v;
}

double TomlTable::number(std::string_view key, double lo, double hi) {
  return in_range(key, &toml_number, "a number", lo, hi);
}

double TomlTable::number_or(std::string_view key, double fallback, double lo, double hi) {
  return has(key) ? number(key, lo, hi) : (read_.insert(std::string(key)), fallback);
}

int TomlTable::integer(std::string_view key, int lo, int hi) {
  return static_cast<int>(in_range<int64_t>(key, &toml_integer, "an integer", lo, hi));
}

int TomlTable::integer_or(std::string_view key, int fallback, int lo, int hi) {
  return has(key) ? integer(key, lo, hi) : (read_.insert(std::string(key)), fallback);
}

std::vector<double> TomlTable::numbers_or_empty(std::string_view key, double lo, double hi) {
  std::vector<double> out;
  if (!has(key)) {
    read_.insert(std::string(key));
    return out;
  }
  const toml::node* n = get(key);
  WF_USAGE_CHECK(n->is_array(), "{}: '{}' must be an array of numbers", source_, name(key));
  for (const toml::node& e : *n->as_array()) {
    const std::optional<double> v = toml_number(e);
    WF_USAGE_CHECK(v, "{}: '{}' must be an array of numbers", source_, name(key));
    WF_USAGE_CHECK(*v >= lo && *v <= hi, "{}: '{}' has {}, out of range [{}, {}]", source_,
                   name(key), *v, lo, hi);
    out.push_back(*v);
  }
  return out;
}

std::string TomlTable::string(std::string_view key) {
  const toml::node* n = get(key);
  WF_USAGE_CHECK(n, "{}: missing key '{}'", source_, name(key));
  WF_USAGE_CHECK(n->is_string(), "{}: '{}' must be a string", source_, name(key));
  return *n->value<std::string>();
}

std::string TomlTable::string_or(std::string_view key, std::string fallback) {
  return has(key) ? string(key) : (read_.insert(std::string(key)), fallback);
}

bool TomlTable::boolean_or(std::string_view key, bool fallback) {
  if (!has(key)) return fallback;
  const toml::node* n = get(key);
  WF_USAGE_CHECK(n->is_boolean(), "{}: '{}' must be true or false", source_, name(key));
  return *n->value<bool>();
}

void TomlTable::reject_unknown(const std::set<std::string>& ignore) const {
  if (!t_) return;
  for (const auto& [k, v] : *t_) {
    std::string key(k.str());
    if (read_.count(key) || ignore.count(key)) continue;
    throw UsageError(fmt::format("{}: unknown key '{}' (check the spelling)", source_, name(key)));
  }
}

}  // namespace wallfacer
