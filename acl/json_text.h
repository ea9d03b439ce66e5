#pragma once
// JSON files written by people (the config, the access policy): parsed with
// comments allowed, and a syntax error reported without nlohmann's internal
// exception id.

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace tensord::acl {

// Parses `text`; on failure throws Error("<what>: invalid JSON: <message>"),
// e.g. "policy: invalid JSON: parse error at line 3, column 5: ...". Covers
// bad syntax and numbers no double holds ("1e400").
template <typename Error>
nlohmann::json parseJsonText(std::string_view text, std::string_view what) {
  try {
    return nlohmann::json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/true,
                                 /*ignore_comments=*/true);
  } catch (const nlohmann::json::exception& e) {
    // e.what() reads "[json.exception.parse_error.101] parse error at ...";
    // the bracketed id means nothing to a reader.
    std::string message = e.what();
    if (const size_t start = message.find("] "); start != std::string::npos) message.erase(0, start + 2);
    throw Error(std::string(what) + ": invalid JSON: " + message);
  }
}

}  // namespace tensord::acl
