#include "acl/token_authenticator.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>

#include <stdexcept>

namespace tensord::acl {
namespace {

int hexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

std::array<uint8_t, 32> sha256(std::string_view data) {
  std::array<uint8_t, 32> digest{};
  unsigned int length = 0;
  if (EVP_Digest(data.data(), data.size(), digest.data(), &length, EVP_sha256(), nullptr) != 1 ||
      length != digest.size()) {
    throw std::runtime_error("SHA-256 computation failed (OpenSSL EVP_Digest)");
  }
  return digest;
}

}  // namespace

std::string sha256Hex(std::string_view data) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string hex;
  hex.reserve(64);
  for (uint8_t byte : sha256(data)) {
    hex.push_back(kDigits[byte >> 4]);
    hex.push_back(kDigits[byte & 15]);
  }
  return hex;
}

bool isSha256Hex(std::string_view hex) {
  if (hex.size() != 64) return false;
  for (char c : hex) {
    if (hexValue(c) < 0) return false;
  }
  return true;
}

TokenAuthenticator::TokenAuthenticator(const std::vector<TokenEntry>& entries) {
  entries_.reserve(entries.size());
  for (size_t i = 0; i < entries.size(); ++i) {
    const TokenEntry& entry = entries[i];
    if (entry.principal.empty()) {
      throw std::invalid_argument("token entry " + std::to_string(i) + ": principal must not be empty");
    }
    if (!isSha256Hex(entry.tokenSha256Hex)) {
      throw std::invalid_argument("token entry " + std::to_string(i) +
                                  ": token_sha256 must be 64 hex digits (a SHA-256 digest)");
    }
    Entry stored{Principal{entry.principal}, {}};
    for (size_t b = 0; b < stored.digest.size(); ++b) {
      stored.digest[b] =
          uint8_t(hexValue(entry.tokenSha256Hex[2 * b]) << 4 | hexValue(entry.tokenSha256Hex[2 * b + 1]));
    }
    entries_.push_back(std::move(stored));
  }
}

std::optional<Principal> TokenAuthenticator::authenticate(std::string_view token) const {
  const auto digest = sha256(token);
  // Visit every entry, without an early exit, so the time taken does not say
  // which entry (if any) matched.
  const Entry* match = nullptr;
  for (const Entry& entry : entries_) {
    const bool equal = CRYPTO_memcmp(entry.digest.data(), digest.data(), digest.size()) == 0;
    if (equal && match == nullptr) match = &entry;
  }
  if (match == nullptr) return std::nullopt;
  return match->principal;
}

}  // namespace tensord::acl
