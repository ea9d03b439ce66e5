#include "server/staging_pool.h"

#include "server/loop_completion.h"

namespace tensord::server {

StagingLease::State::~State() { pool.release(slot); }

StagingPool::StagingPool(compute::Engine& engine) : engine_(engine) {}

StagingLease StagingPool::wrap(compute::StagingSlot slot) {
  return StagingLease(std::make_shared<StagingLease::State>(*this, slot));
}

kj::Promise<StagingLease> StagingPool::acquire() {
  if (waiters_.empty()) {
    if (auto slot = engine_.tryAcquireStaging()) return wrap(*slot);
  }
  auto paf = kj::newPromiseAndFulfiller<StagingLease>();
  waiters_.push_back(kj::mv(paf.fulfiller));
  auto idle = kj::mv(idleHolders_);  // each releases (and unregisters) itself
  idleHolders_.clear();
  for (IdleSlotHolder* holder : idle) holder->releaseIdleSlot();
  return kj::mv(paf.promise);
}

std::optional<StagingLease> StagingPool::tryAcquire() {
  if (!waiters_.empty()) return std::nullopt;
  if (auto slot = engine_.tryAcquireStaging()) return wrap(*slot);
  return std::nullopt;
}

void StagingPool::release(const compute::StagingSlot& slot) {
  engine_.releaseStaging(slot);
  while (!waiters_.empty()) {
    if (!waiters_.front()->isWaiting()) {  // its caller went away
      waiters_.pop_front();
      continue;
    }
    auto next = engine_.tryAcquireStaging();
    if (!next) return;
    auto waiter = kj::mv(waiters_.front());
    waiters_.pop_front();
    waiter->fulfill(wrap(*next));
  }
}

kj::Promise<void> StagingPool::keepUntilDone(const StagingLease& lease, compute::Completion& completion) {
  auto loop = makeLoopCompletion();
  completion = std::move(loop.completion);
  auto forked = loop.promise.fork();
  // This branch keeps the slot leased until the device is done with it.
  tasks_.add(forked.addBranch().then([keep = lease]() {}, [keep = lease](kj::Exception&&) {}));
  return forked.addBranch();
}

}  // namespace tensord::server
