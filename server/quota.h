#pragma once
// Per-principal quotas (policy "quotas": device_bytes, tensor_count,
// largest_tensor, calls_per_second, connections, inflight_ops), enforced at
// the server's choke points before anything is enqueued or allocated. An
// exceeded quota fails only the offending call with OVERLOADED:
//   "quota exceeded: principal 'bob' would hold 3 tensors; tensor_count is 2 (policy.quotas)"
// Limits come from the authorizer's policy in force (replaced on reload), so
// a reload applies to the next call; with no JsonPolicy (no policy_file)
// nothing is limited.
//
// Threads: the event-loop thread only.

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "acl/policy_json.h"

namespace tensord::compute {
class Engine;
}

namespace tensord::server {

class Registry;
class QuotaTracker;

// Counts one op of a principal in flight (enqueued, not completed) while alive.
class QuotaSlot {
 public:
  QuotaSlot() = default;
  QuotaSlot(QuotaTracker* tracker, std::string principal) : tracker_(tracker), principal_(std::move(principal)) {}
  QuotaSlot(QuotaSlot&& other) noexcept { *this = std::move(other); }
  QuotaSlot& operator=(QuotaSlot&& other) noexcept;
  QuotaSlot(const QuotaSlot&) = delete;
  QuotaSlot& operator=(const QuotaSlot&) = delete;
  ~QuotaSlot() { release(); }

 private:
  void release();
  QuotaTracker* tracker_ = nullptr;
  std::string principal_;
};

class QuotaTracker {
 public:
  QuotaTracker(const Registry& registry, const compute::Engine& engine, const acl::Authorizer& authorizer)
      : registry_(registry), engine_(engine), authorizer_(authorizer) {}
  ~QuotaTracker();

  std::optional<acl::Quotas> quotas(std::string_view principal) const;

  // calls_per_second: takes one token of the principal's bucket (burst = rate).
  void chargeCall(const std::string& principal, std::string_view method) { chargeCalls(principal, method, 1); }
  // Takes `calls` tokens at once (a graph run), or none when fewer are left.
  void chargeCalls(const std::string& principal, std::string_view method, uint64_t calls);
  // device_bytes, tensor_count, largest_tensor for new tensors of these sizes.
  // `views`: they share an existing buffer (view ops) and allocate nothing, so
  // device_bytes does not apply.
  void checkAllocation(const std::string& principal, std::string_view what, std::span<const uint64_t> bytes,
                       bool views = false) const;
  // connections: one more authenticated session when `open` are open now.
  void checkSession(const std::string& principal, uint64_t open) const;
  // inflight_ops: checked before the op allocates; enterOp counts it once enqueued.
  void checkInflightOp(const std::string& principal, std::string_view what) const;
  QuotaSlot enterOp(const std::string& principal);

  uint64_t inflightOps(std::string_view principal) const;

 private:
  friend class QuotaSlot;
  struct Usage {
    uint64_t inflightOps = 0;
    double tokens = 0;
    uint64_t rate = 0;  // the rate `tokens` was filled for; a new rate refills
    std::chrono::steady_clock::time_point refilled{};
  };
  void released(const std::string& principal);

  const Registry& registry_;
  const compute::Engine& engine_;
  const acl::Authorizer& authorizer_;
  std::map<std::string, Usage, std::less<>> usage_;
};

}  // namespace tensord::server
