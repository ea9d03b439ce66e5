#pragma once
// The authorization hook. The server asks it before every action it performs
// for a principal (op call, tensor read/write/delete/save/restore, listing);
// nothing is enqueued or changed before the answer is "allowed".
//
// Threads: check() may be called from any thread; setPolicy() swaps the
// policy atomically (SIGHUP reload), and calls already inside check() finish
// against the policy they started with.

#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include "acl/principal.h"

namespace tensord::acl {

enum class Action {
  kCallOp,         // resource: op name; Request::category: the op's category
  kReadTensor,     // resource: tensor name, or "#<id>" for an unnamed tensor
  kWriteTensor,    // upload (resource ""), or an in-place write of an input (its name or "#<id>")
  kDeleteTensor,   // resource: tensor name
  kSaveTensor,     // resource: the name being given (also when it replaces one)
  kRestoreTensor,  // resource: tensor name
  kListTensors,    // resource: ""
  kAdminReload,    // resource: ""
  kAdminUsage,     // resource: ""
  kLoadFile,       // resource: the file's path as the client gave it (Session.loadFile)
  kSaveFile,       // resource: the file's path as the client gave it (Session.saveFile)
  kGroupCreate,    // resource: the group's name (Session.groupCreate, groupDelete)
  kManageKernel,   // resource: the kernel's op name (Session.kernelAdd; kernelRemove of another's kernel)
};

// "call", "read", "write", ..., "admin:reload", "admin:usage", "files:load", "files:save", "group:create",
// "kernel", "kernel"
std::string_view actionName(Action action);

// One question to the policy.
struct Request {
  Action action = Action::kCallOp;
  std::string_view resource;  // see Action
  std::string_view category;  // kCallOp: the op's category ("linalg"); otherwise ""
};

struct Decision {
  bool allowed = false;
  std::string reason;  // why it was denied; empty when allowed

  static Decision allow() { return {true, {}}; }
  static Decision deny(std::string reason) { return {false, std::move(reason)}; }
};

// A policy decides one request. Implementations are immutable once shared.
class Policy {
 public:
  virtual ~Policy() = default;
  virtual Decision decide(const Principal& principal, const Request& request) const = 0;
};

// Allows every authenticated principal everything: the policy when the
// config names no policy_file.
class PermissivePolicy final : public Policy {
 public:
  Decision decide(const Principal& principal, const Request& request) const override;
};

class Authorizer {
 public:
  explicit Authorizer(std::shared_ptr<const Policy> policy = std::make_shared<PermissivePolicy>());

  Decision check(const Principal& principal, const Request& request) const;
  void setPolicy(std::shared_ptr<const Policy> policy);
  // The policy in force now (never null).
  std::shared_ptr<const Policy> current() const;

 private:

  mutable std::mutex mutex_;
  std::shared_ptr<const Policy> policy_;  // guarded by mutex_
};

}  // namespace tensord::acl
