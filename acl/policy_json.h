#pragma once
// JsonPolicy: the access policy language, modelled on Redis ACL rules.
// Principals get roles; roles (and principals) carry rule lists applied in
// order, the last matching rule wins, and anything no rule allows is denied.
// See docs/policy.md for the file format.
//
//   {"principals": {"alice": {"roles": ["trainer"], "quotas": {"device_bytes": 1073741824}}},
//    "roles": {"trainer": {"rules": ["+@elementwise", "+@nn", "-softmax", "+matmul",
//                                    "~alice/*:rw", "~shared/*:r", "&admin:reload"]}}}
//
// Threads: immutable after construction; decide() may be called from any thread.

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "acl/authorizer.h"

namespace tensord::acl {

// A policy file that does not parse or validate. The message starts with the
// key path it is about: "roles.trainer.rules[2]: unknown category '@foo' ...".
class PolicyError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Per-principal limits. Parsed, validated and exposed; enforcing them is the
// server's business (unset = no limit).
struct Quotas {
  std::optional<uint64_t> deviceBytes;     // device memory held by the principal's tensors
  std::optional<uint64_t> tensorCount;     // live tensors
  std::optional<uint64_t> largestTensor;   // bytes of one tensor
  std::optional<uint64_t> callsPerSecond;  // op calls
  std::optional<uint64_t> connections;     // open authenticated sessions
  std::optional<uint64_t> inflightOps;     // calls in flight over all sessions

  bool operator==(const Quotas&) const = default;
};

// Op categories a rule may name ("@nn"); the reserved ones match no op today.
// "all" matches every op.
const std::vector<std::string_view>& knownCategories();

class JsonPolicy final : public Policy {
 public:
  // One parsed rule.
  struct Rule {
    enum class Kind { kCategory, kOp, kTensor, kAdmin, kFiles, kGroup };
    Kind kind = Kind::kOp;
    bool allow = true;
    std::string pattern;  // category name, op glob, tensor-name glob, admin right ("reload", "usage", "*"),
                          // files right ("load", "save", "*"), group right ("create", "*")
    bool read = false, write = false, del = false;  // kTensor
    std::string text;                               // as written, for reasons
    std::string source;                             // "role 'trainer'" or "principal 'alice'"
  };

  // Throws PolicyError.
  static std::shared_ptr<const JsonPolicy> parse(std::string_view jsonText);
  static std::shared_ptr<const JsonPolicy> loadFile(const std::filesystem::path& path);

  Decision decide(const Principal& principal, const Request& request) const override;

  // The principal's quotas; nullopt when the policy does not name it.
  std::optional<Quotas> quotas(std::string_view principal) const;
  // The principal's roles as listed; empty when the policy does not name it.
  std::vector<std::string> roles(std::string_view principal) const;

  size_t principalCount() const { return principals_.size(); }
  size_t roleCount() const { return roleCount_; }
  // Every rule of a principal, roles first (in the order listed), then its own.
  const std::vector<Rule>* rules(std::string_view principal) const;

 private:
  struct Entry {
    std::vector<Rule> rules;
    Quotas quotas;
    std::vector<std::string> roles;
  };
  std::map<std::string, Entry, std::less<>> principals_;
  size_t roleCount_ = 0;
};

// Glob as used by rules: '*' any run of characters (including '/'), '?' one
// character, [...] a character class.
bool globMatch(std::string_view pattern, std::string_view text);

}  // namespace tensord::acl
