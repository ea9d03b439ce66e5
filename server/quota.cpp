#include "server/quota.h"

#include <algorithm>

#include "compute/engine.h"
#include "server/registry.h"
#include "server/wire.h"

namespace tensord::server {
namespace {

[[noreturn]] void exceeded(std::string_view what, const std::string& principal, const std::string& use,
                           std::string_view quota, uint64_t limit) {
  std::string message = std::string(what) + ": quota exceeded: principal '" + principal + "' " + use + "; " +
                        std::string(quota) + " is " + std::to_string(limit) + " (policy.quotas)";
  kj::throwFatalException(overloaded(std::move(message)));
}

}  // namespace

QuotaSlot& QuotaSlot::operator=(QuotaSlot&& other) noexcept {
  if (this != &other) {
    release();
    tracker_ = other.tracker_;
    principal_ = std::move(other.principal_);
    other.tracker_ = nullptr;
  }
  return *this;
}

void QuotaSlot::release() {
  if (tracker_ != nullptr) tracker_->released(principal_);
  tracker_ = nullptr;
}

QuotaTracker::~QuotaTracker() = default;

std::optional<acl::Quotas> QuotaTracker::quotas(std::string_view principal) const {
  const std::shared_ptr<const acl::Policy> policy = authorizer_.current();
  const auto* json = dynamic_cast<const acl::JsonPolicy*>(policy.get());
  if (json == nullptr) return std::nullopt;
  return json->quotas(principal);
}

void QuotaTracker::chargeCalls(const std::string& principal, std::string_view method, uint64_t calls) {
  const auto q = quotas(principal);
  if (!q || !q->callsPerSecond) return;
  const uint64_t rate = *q->callsPerSecond;
  Usage& u = usage_[principal];
  const auto now = std::chrono::steady_clock::now();
  if (u.rate != rate || u.refilled == std::chrono::steady_clock::time_point{}) {
    u.rate = rate;
    u.tokens = double(rate);
  } else {
    const double seconds = std::chrono::duration<double>(now - u.refilled).count();
    u.tokens = std::min(double(rate), u.tokens + seconds * double(rate));
  }
  u.refilled = now;
  const double need = double(calls);
  if (calls > rate) {
    exceeded(method, principal,
             "would make " + std::to_string(calls) + " calls at once, more than its burst of " +
                 std::to_string(rate) + " calls",
             "calls_per_second", rate);
  }
  if (u.tokens < need) {
    exceeded(method, principal,
             "has used its burst of " + std::to_string(rate) + " calls (next call allowed in " +
                 std::to_string(int((need - u.tokens) / double(std::max<uint64_t>(rate, 1)) * 1000) + 1) + " ms)",
             "calls_per_second", rate);
  }
  u.tokens -= need;
}

void QuotaTracker::checkAllocation(const std::string& principal, std::string_view what,
                                   std::span<const uint64_t> bytes, bool views) const {
  const auto q = quotas(principal);
  if (!q) return;
  if (q->largestTensor) {
    for (uint64_t b : bytes) {
      if (b > *q->largestTensor) {
        exceeded(what, principal, "asked for a tensor of " + std::to_string(b) + " bytes", "largest_tensor",
                 *q->largestTensor);
      }
    }
  }
  if (q->tensorCount) {
    const uint64_t held = registry_.ownedCount(principal);
    const uint64_t after = held + bytes.size();
    if (after > *q->tensorCount) {
      exceeded(what, principal, "would hold " + std::to_string(after) + " tensors", "tensor_count", *q->tensorCount);
    }
  }
  if (q->deviceBytes && !views) {
    uint64_t after = engine_.ownerBytes(principal);
    for (uint64_t b : bytes) after += b;
    if (after > *q->deviceBytes) {
      exceeded(what, principal, "would hold " + std::to_string(after) + " bytes of device memory", "device_bytes",
               *q->deviceBytes);
    }
  }
}

void QuotaTracker::checkSession(const std::string& principal, uint64_t open) const {
  const auto q = quotas(principal);
  if (q && q->connections && open + 1 > *q->connections) {
    exceeded("authenticate", principal, "would have " + std::to_string(open + 1) + " sessions open", "connections",
             *q->connections);
  }
}

void QuotaTracker::checkInflightOp(const std::string& principal, std::string_view what) const {
  const auto q = quotas(principal);
  const uint64_t running = inflightOps(principal);
  if (q && q->inflightOps && running + 1 > *q->inflightOps) {
    exceeded(what, principal, "would have " + std::to_string(running + 1) + " ops in flight", "inflight_ops",
             *q->inflightOps);
  }
}

QuotaSlot QuotaTracker::enterOp(const std::string& principal) {
  ++usage_[principal].inflightOps;
  return QuotaSlot(this, principal);
}

uint64_t QuotaTracker::inflightOps(std::string_view principal) const {
  auto it = usage_.find(principal);
  return it == usage_.end() ? 0 : it->second.inflightOps;
}

void QuotaTracker::released(const std::string& principal) {
  auto it = usage_.find(principal);
  if (it != usage_.end() && it->second.inflightOps > 0) --it->second.inflightOps;
}

}  // namespace tensord::server
