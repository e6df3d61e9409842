#include "wallfacer/plan/toml_util.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "wallfacer/core/error.h"

namespace wallfacer::plan::detail {

toml::table parse_toml(std::string_view text, const std::string& source) {
  try {
    return toml::parse(text, source);
  } catch (const toml::parse_error& e) {
    const auto& b = e.source().begin;
    throw UsageError(fmt::format("{}:{}:{}: {}", source, b.line, b.column, e.description()));
  }
}

std::string read_text_file(const std::string& path, std::string_view what) {
  std::error_code ec;
  WF_USAGE_CHECK(!std::filesystem::is_directory(path, ec),
                 "the {} file '{}' is a folder; give the path of a TOML file", what, path);
  std::ifstream in(path);
  WF_USAGE_CHECK(in.good(), "cannot read {} file '{}' (check the path)", what, path);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

Table::Table(const toml::table* t, std::string path, std::string source)
    : t_(t), path_(std::move(path)), source_(std::move(source)) {}

std::string Table::name(std::string_view key) const {
  return path_.empty() ? std::string(key) : path_ + "." + std::string(key);
}

bool Table::has(std::string_view key) const { return t_ && t_->contains(key); }

const toml::node* Table::get(std::string_view key) {
  read_.insert(std::string(key));
  return t_ ? t_->get(key) : nullptr;
}

Table Table::sub(std::string_view key, bool required) {
  const toml::node* n = get(key);
  WF_USAGE_CHECK(n || !required, "{}: missing table [{}]", source_, name(key));
  WF_USAGE_CHECK(!n || n->is_table(), "{}: '{}' must be a table", source_, name(key));
  return Table(n ? n->as_table() : nullptr, name(key), source_);
}

double Table::number(std::string_view key, double lo, double hi) {
  const toml::node* n = get(key);
  WF_USAGE_CHECK(n, "{}: missing key '{}'", source_, name(key));
  auto v = n->value<double>();
  WF_USAGE_CHECK(v && (n->is_integer() || n->is_floating_point()), "{}: '{}' must be a number",
                 source_, name(key));
  WF_USAGE_CHECK(*v >= lo && *v <= hi, "{}: '{}' = {} is out of range [{}, {}]", source_, name(key),
                 *v, lo, hi);
  return *v;
}

double Table::number_or(std::string_view key, double fallback, double lo, double hi) {
  return has(key) ? number(key, lo, hi) : (read_.insert(std::string(key)), fallback);
}

int Table::integer(std::string_view key, int lo, int hi) {
  const toml::node* n = get(key);
  WF_USAGE_CHECK(n, "{}: missing key '{}'", source_, name(key));
  WF_USAGE_CHECK(n->is_integer(), "{}: '{}' must be an integer", source_, name(key));
  int64_t v = *n->value<int64_t>();
  WF_USAGE_CHECK(v >= lo && v <= hi, "{}: '{}' = {} is out of range [{}, {}]", source_, name(key),
                 v, lo, hi);
  return static_cast<int>(v);
}

int Table::integer_or(std::string_view key, int fallback, int lo, int hi) {
  return has(key) ? integer(key, lo, hi) : (read_.insert(std::string(key)), fallback);
}

std::vector<double> Table::numbers_or_empty(std::string_view key, double lo, double hi) {
  std::vector<double> out;
  if (!has(key)) {
    read_.insert(std::string(key));
    return out;
  }
  const toml::node* n = get(key);
  WF_USAGE_CHECK(n->is_array(), "{}: '{}' must be an array of numbers", source_, name(key));
  for (const toml::node& e : *n->as_array()) {
    auto v = e.value<double>();
    WF_USAGE_CHECK(v && (e.is_integer() || e.is_floating_point()),
                   "{}: '{}' must be an array of numbers", source_, name(key));
    WF_USAGE_CHECK(*v >= lo && *v <= hi, "{}: '{}' has {}, out of range [{}, {}]", source_,
                   name(key), *v, lo, hi);
    out.push_back(*v);
  }
  return out;
}

std::string Table::string(std::string_view key) {
  const toml::node* n = get(key);
  WF_USAGE_CHECK(n, "{}: missing key '{}'", source_, name(key));
  WF_USAGE_CHECK(n->is_string(), "{}: '{}' must be a string", source_, name(key));
  return *n->value<std::string>();
}

std::string Table::string_or(std::string_view key, std::string fallback) {
  return has(key) ? string(key) : (read_.insert(std::string(key)), fallback);
}

bool Table::boolean_or(std::string_view key, bool fallback) {
  if (!has(key)) return fallback;
  const toml::node* n = get(key);
  WF_USAGE_CHECK(n->is_boolean(), "{}: '{}' must be true or false", source_, name(key));
  return *n->value<bool>();
}

void Table::reject_unknown(const std::set<std::string>& ignore) const {
  if (!t_) return;
  for (const auto& [k, v] : *t_) {
    std::string key(k.str());
    if (read_.count(key) || ignore.count(key)) continue;
    throw UsageError(fmt::format("{}: unknown key '{}' (check the spelling)", source_, name(key)));
  }
}

}  // namespace wallfacer::plan::detail
