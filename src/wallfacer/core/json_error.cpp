#include "wallfacer/core/json_error.h"

#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>

namespace wallfacer {

std::string json_error_reason(const std::exception& e) {
  const std::string what = e.what();
  if (what.rfind("[json.exception.", 0) != 0) return what;
  const auto end = what.find("] ");
  return end == std::string::npos ? what : what.substr(end + 2);
}

std::string describe_json_error(const std::string& text, const std::exception& e) {
  if (std::all_of(text.begin(), text.end(),
                  [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }))
    return "the file is empty (a JSON document was expected)";
  std::string what = json_error_reason(e);
  if (dynamic_cast<const nlohmann::json::parse_error*>(&e)) {
    // "parse error at line L, column C: REASON"
    const std::string lead = "parse error at ";
    if (what.rfind(lead, 0) == 0) what = what.substr(lead.size());
    return "not valid JSON at " + what;
  }
  // "number overflow parsing '1e400'": find the number to name its line.
  const auto q0 = what.find('\''), q1 = what.rfind('\'');
  if (what.rfind("number overflow", 0) == 0 && q0 != std::string::npos && q1 > q0) {
    const std::string number = what.substr(q0 + 1, q1 - q0 - 1);
    const auto at = text.find(number);
    if (at != std::string::npos) {
      const auto line = 1 + std::count(text.begin(), text.begin() + long(at), '\n');
      // The key it is the value of: "KEY" : NUMBER
      std::string key;
      auto k = text.find_last_not_of(" \t\r\n", at == 0 ? 0 : at - 1);
      if (at > 0 && k != std::string::npos && text[k] == ':') {
        const auto close = text.find_last_not_of(" \t\r\n", k == 0 ? 0 : k - 1);
        const auto open = close == std::string::npos || close == 0 || text[close] != '"'
                              ? std::string::npos
                              : text.rfind('"', close - 1);
        if (open != std::string::npos) key = text.substr(open + 1, close - open - 1);
      }
      return fmt::format("line {}: the number {}{} is out of range", line, number,
                         key.empty() ? "" : fmt::format(" of \"{}\"", key));
    }
    return fmt::format("the number {} is out of range", number);
  }
  return "not valid JSON: " + what;
}

}  // namespace wallfacer
