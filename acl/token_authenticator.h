#pragma once
// Bearer-token authentication. Tokens are never stored: only their SHA-256
// digests are (configured as hex). authenticate() hashes the presented token
// and compares it against every stored digest in constant time, so neither
// the match position nor the number of matching bytes shows in the timing.
//
// Threads: immutable after construction; authenticate() may be called from
// any thread. Reloading builds a new TokenAuthenticator.

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "acl/principal.h"

namespace tensord::acl {

struct TokenEntry {
  std::string principal;
  std::string tokenSha256Hex;  // 64 hex digits, either case
};

// Lower-case hex SHA-256 of `data`.
std::string sha256Hex(std::string_view data);

// True if `hex` is 64 hex digits.
bool isSha256Hex(std::string_view hex);

class TokenAuthenticator {
 public:
  // Throws std::invalid_argument naming the entry (by index) when a principal
  // is empty or a digest is not 64 hex digits.
  explicit TokenAuthenticator(const std::vector<TokenEntry>& entries);

  // The principal whose token this is, or nullopt.
  std::optional<Principal> authenticate(std::string_view token) const;

  size_t size() const { return entries_.size(); }

 private:
  using Digest = std::array<uint8_t, 32>;
  struct Entry {
    Principal principal;
    Digest digest;
  };
  std::vector<Entry> entries_;
};

}  // namespace tensord::acl
