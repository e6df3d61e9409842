#pragma once
// Errors of the JSON library in words: where the text is bad and why, without the library's own
// "[json.exception...]" prefix.

#include <exception>
#include <string>

namespace wallfacer {

// What is wrong with `text`, given the exception the JSON parser threw on it: "the file is
// empty", "line L, column C: syntax error ...", or "line L: the number 1e400 is out of range".
std::string describe_json_error(const std::string& text, const std::exception& e);

// The library's message without its "[json.exception.KIND.ID] " prefix, e.g. "key 'ph' not found"
// or "type must be number, but is string".
std::string json_error_reason(const std::exception& e);

}  // namespace wallfacer
