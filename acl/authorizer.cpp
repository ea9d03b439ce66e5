#include "acl/authorizer.h"

#include <array>
#include <stdexcept>

namespace tensord::acl {

std::string_view actionName(Action action) {
  static constexpr std::array<std::string_view, 13> kNames = {
      "call", "read", "write", "delete", "save", "restore", "list", "admin:reload", "admin:usage", "files:load",
      "files:save", "group:create", "kernel"};
  return kNames[size_t(action)];
}

Decision PermissivePolicy::decide(const Principal&, const Request&) const { return Decision::allow(); }

Authorizer::Authorizer(std::shared_ptr<const Policy> policy) { setPolicy(std::move(policy)); }

Decision Authorizer::check(const Principal& principal, const Request& request) const {
  return current()->decide(principal, request);
}

void Authorizer::setPolicy(std::shared_ptr<const Policy> policy) {
  if (!policy) throw std::invalid_argument("Authorizer::setPolicy: policy must not be null");
  std::lock_guard lock(mutex_);
  policy_ = std::move(policy);
}

std::shared_ptr<const Policy> Authorizer::current() const {
  std::lock_guard lock(mutex_);
  return policy_;
}

}  // namespace tensord::acl
