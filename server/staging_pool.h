#pragma once
// The event loop's view of the engine's staging slots: a FIFO of waiters for
// when every slot is busy, and leases that give a slot back exactly once,
// never while the device may still be copying through it.
//
// Deadlock rule for callers: only wait in acquire() while holding no slot;
// use tryAcquire() for a second one.
//
// Threads: the event-loop thread only. The pool must outlive its leases and
// the engine must outlive the pool.

#include <kj/async.h>

#include <deque>
#include <set>
#include <memory>
#include <optional>

#include "compute/engine.h"

namespace tensord::server {

class StagingPool;

// A slot held by the loop. Copies share it; the slot goes back to the engine
// (and the next waiter) when the last copy is dropped.
class StagingLease {
 public:
  StagingLease() = default;
  explicit operator bool() const { return state_ != nullptr; }
  const compute::StagingSlot& slot() const { return state_->slot; }
  std::byte* data() const { return state_->slot.data; }
  uint64_t capacity() const { return state_->slot.capacity; }

 private:
  friend class StagingPool;
  struct State {
    State(StagingPool& pool, compute::StagingSlot slot) : pool(pool), slot(slot) {}
    ~State();
    StagingPool& pool;
    compute::StagingSlot slot;
  };
  explicit StagingLease(std::shared_ptr<State> state) : state_(std::move(state)) {}
  std::shared_ptr<State> state_;
};

// Something that may sit on a partly filled slot between requests (an upload
// waiting for its next chunk). It must hand the slot back when asked.
class IdleSlotHolder {
 public:
  virtual void releaseIdleSlot() = 0;

 protected:
  ~IdleSlotHolder() = default;
};

class StagingPool final : private kj::TaskSet::ErrorHandler {
 public:
  explicit StagingPool(compute::Engine& engine);
  StagingPool(const StagingPool&) = delete;
  StagingPool& operator=(const StagingPool&) = delete;

  kj::Promise<StagingLease> acquire();       // waits, first come first served
  std::optional<StagingLease> tryAcquire();  // a slot now if nobody waits, else nothing
  bool hasWaiters() const { return !waiters_.empty(); }

  // An idle holder keeps its slot until someone has to wait for one; then
  // acquire() asks every idle holder to release, so a client that stops
  // sending mid-upload cannot starve the others. A holder unregisters before
  // it is destroyed.
  void addIdleHolder(IdleSlotHolder& holder) { idleHolders_.insert(&holder); }
  void removeIdleHolder(IdleSlotHolder& holder) { idleHolders_.erase(&holder); }

  // Starts a transfer through `lease`'s slot with `start(completion)`, which
  // must enqueue engine work that calls the completion. The slot stays leased
  // until the device finished, even if the returned promise is dropped.
  template <typename Start>
  kj::Promise<void> transfer(const StagingLease& lease, Start&& start);

 private:
  friend class StagingLease;
  void release(const compute::StagingSlot& slot);
  kj::Promise<void> keepUntilDone(const StagingLease& lease, compute::Completion& completion);
  StagingLease wrap(compute::StagingSlot slot);
  void taskFailed(kj::Exception&& exception) override {}  // the transfer's caller sees the error

  compute::Engine& engine_;
  std::deque<kj::Own<kj::PromiseFulfiller<StagingLease>>> waiters_;
  std::set<IdleSlotHolder*> idleHolders_;
  kj::TaskSet tasks_{*this};  // last: its leases are released while the rest still exists
};

template <typename Start>
kj::Promise<void> StagingPool::transfer(const StagingLease& lease, Start&& start) {
  compute::Completion completion;
  auto done = keepUntilDone(lease, completion);
  start(std::move(completion));
  return done;
}

}  // namespace tensord::server
