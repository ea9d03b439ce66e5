#pragma once
// The identity every request acts as. A connection never acts without one:
// the server binds a Principal to a session when its token authenticates.

#include <string>

namespace tensord::acl {

struct Principal {
  std::string name;  // as configured in auth.tokens[].principal

  bool operator==(const Principal&) const = default;
};

}  // namespace tensord::acl
