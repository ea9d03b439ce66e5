// Exception translation for the client library.

#include "client/errors.h"

#include <cctype>

namespace tensord::errors {

Error::Kind kindOf(const kj::Exception& e) {
  switch (e.getType()) {
    case kj::Exception::Type::OVERLOADED:
      return Error::Kind::kOverloaded;
    case kj::Exception::Type::DISCONNECTED:
      return Error::Kind::kDisconnected;
    case kj::Exception::Type::UNIMPLEMENTED:
      return Error::Kind::kUnimplemented;
    default:
      return Error::Kind::kFailed;
  }
}

namespace {

bool startsWith(std::string_view s, std::string_view prefix) { return s.substr(0, prefix.size()) == prefix; }

// Strips a leading "some/file.c++:123: " (and the "failed: " / "overloaded: " ...
// word KJ puts after it) when present.
std::string_view stripLocation(std::string_view s) {
  size_t colon = s.find(':');
  while (colon != std::string_view::npos && colon > 0) {
    size_t i = colon + 1;
    size_t digits = 0;
    while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) ++i, ++digits;
    if (digits > 0 && i + 1 < s.size() && s[i] == ':' && s[i + 1] == ' ') {
      std::string_view file = s.substr(0, colon);
      if (file.find(' ') != std::string_view::npos) return s;  // prose, not a path
      s.remove_prefix(i + 2);
      for (std::string_view word : {"failed: ", "overloaded: ", "disconnected: ", "unimplemented: "}) {
        if (startsWith(s, word)) {
          s.remove_prefix(word.size());
          break;
        }
      }
      return s;
    }
    colon = s.find(':', colon + 1);
    if (colon != std::string_view::npos && s.substr(0, colon).find(' ') != std::string_view::npos) break;
  }
  return s;
}

// True when `text` reads as C++ source rather than prose: KJ_REQUIRE puts the
// failed condition and non-literal arguments' source text into descriptions.
bool looksLikeCode(std::string_view text) {
  if (text.empty()) return false;
  if (text.find(' ') == std::string_view::npos) return true;
  for (std::string_view token : {"()", "\"", "==", "!=", "&&", "||", "->", "::", " < ", " > ", " <= ", " >= "}) {
    if (text.find(token) != std::string_view::npos) return true;
  }
  return false;
}

// KJ_REQUIRE(cond, args...) describes a failure as "expected COND; ARG; ..."
// and a non-literal ARG as "EXPR = VALUE": keep what a person wrote.
std::string_view stripKjDecoration(std::string_view s) {
  if (startsWith(s, "expected ")) {
    size_t semi = s.find("; ");
    if (semi != std::string_view::npos && looksLikeCode(s.substr(9, semi - 9))) s.remove_prefix(semi + 2);
  }
  size_t eq = s.find(" = ");
  if (eq != std::string_view::npos && looksLikeCode(s.substr(0, eq))) s.remove_prefix(eq + 3);
  return s;
}

}  // namespace

std::string cleanMessage(std::string_view description) {
  // Keep only the first line's paragraph: context/stack lines follow a newline.
  std::string_view s = description;
  for (std::string_view marker : {"\ncontext: ", "\nstack: "}) {
    size_t at = s.find(marker);
    if (at != std::string_view::npos) s = s.substr(0, at);
  }
  for (;;) {
    std::string_view before = s;
    while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
    if (startsWith(s, "remote exception: ")) s.remove_prefix(sizeof("remote exception: ") - 1);
    s = stripLocation(s);
    s = stripKjDecoration(s);
    if (s == before) break;
  }
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  if (s.empty()) return "unknown error";
  return std::string(s);
}

Error toError(const kj::Exception& e, std::string_view address) {
  Error::Kind kind = kindOf(e);
  std::string message = cleanMessage(e.getDescription().cStr());
  if (kind == Error::Kind::kDisconnected) {
    message = "connection to tensord at " + std::string(address) + " lost: " + message;
  }
  return Error(kind, std::move(message));
}

}  // namespace tensord::errors
