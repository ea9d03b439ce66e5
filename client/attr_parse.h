#pragma once
// Typing `--attr key=value` arguments by the op's spec. Internal to tensorctl.

#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "tensord/client.h"

namespace tensord::cli {

// A bad --attr: unknown name, wrong type, malformed value, given twice.
class AttrError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

// Parses `text` as a value of `spec.type`: int, float, bool (true/false),
// text (as is), ints / floats (comma-separated, optionally in [ ]), scalar
// (an int when it reads as one, else a float; or true/false).
// `op` is named in errors.
AttrValue parseAttrValue(std::string_view op, const AttrSpec& spec, std::string_view text);

// Parses "key=value" assignments against `op`'s attrs. Attrs not given are
// left out (the daemon applies defaults and rejects missing required ones).
Attrs parseAttrs(const OpInfo& op, const std::vector<std::string>& assignments);

// "int", "[1, 2]", "true", "'text'", ... for listings.
std::string formatAttrValue(const AttrValue& value);

}  // namespace tensord::cli
