// Appending received chunks on a worker thread.

#include "client/receive_worker.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>

namespace tensord::detail {

namespace {

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23  // Linux 5.14; older kernels answer EINVAL and the worker stops asking
#endif

// Destination bytes faulted in per step while the worker waits for a chunk:
// small enough that a chunk arriving meanwhile waits little.
constexpr size_t kPrefaultStep = size_t(2) << 20;

}  // namespace

struct ReceiveWorker::Job {
  kj::ArrayPtr<const kj::byte> bytes;
  kj::Own<kj::CrossThreadPromiseFulfiller<void>> copied;
};

ReceiveWorker::ReceiveWorker(std::vector<std::byte>& destination)
    : destination_(destination), thread_([this] { run(); }) {}

ReceiveWorker::~ReceiveWorker() { stop(); }

void ReceiveWorker::stop() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

kj::Promise<void> ReceiveWorker::append(kj::ArrayPtr<const kj::byte> bytes) {
  auto paf = kj::newPromiseAndCrossThreadFulfiller<void>();
  auto job = kj::heap<Job>(Job{bytes, kj::mv(paf.fulfiller)});
  {
    std::lock_guard lock(mutex_);
    queue_.push_back(job.get());
  }
  wake_.notify_one();
  // Runs when the promise goes away, done or cancelled: from then on the
  // caller may free `bytes`, so the worker must be finished with them.
  return paf.promise.attach(kj::defer([this, job = kj::mv(job)]() { forget(*job); }));
}

bool ReceiveWorker::idle() const {
  std::lock_guard lock(mutex_);
  return queue_.empty() && current_ == nullptr;
}

void ReceiveWorker::forget(const Job& job) {
  std::unique_lock lock(mutex_);
  auto queued = std::find(queue_.begin(), queue_.end(), &job);
  if (queued != queue_.end()) queue_.erase(queued);
  jobLeft_.wait(lock, [&] { return current_ != &job; });
}

void ReceiveWorker::run() {
  std::unique_lock lock(mutex_);
  while (!stop_) {
    if (!queue_.empty()) {
      current_ = queue_.front();
      queue_.pop_front();
      const auto* begin = reinterpret_cast<const std::byte*>(current_->bytes.begin());
      lock.unlock();
      destination_.insert(destination_.end(), begin, begin + current_->bytes.size());
      lock.lock();
      current_->copied->fulfill();
      current_ = nullptr;
      jobLeft_.notify_all();
    } else if (canPrefault_) {
      lock.unlock();
      const bool more = prefaultNext();
      lock.lock();
      if (!more) canPrefault_ = false;
    } else {
      wake_.wait(lock);
    }
  }
}

bool ReceiveWorker::prefaultNext() {
  const size_t end = destination_.capacity();
  const size_t from = std::max(prefaulted_, destination_.size());
  if (from >= end) return false;
  const size_t to = std::min(end, from + kPrefaultStep);
  static const uintptr_t page = uintptr_t(sysconf(_SC_PAGESIZE));
  const uintptr_t base = reinterpret_cast<uintptr_t>(destination_.data());
  const uintptr_t first = (base + from + page - 1) & ~(page - 1);  // whole pages inside [from, to)
  const uintptr_t last = (base + to) & ~(page - 1);
  if (last > first && madvise(reinterpret_cast<void*>(first), last - first, MADV_POPULATE_WRITE) != 0) return false;
  prefaulted_ = to;
  return true;
}

}  // namespace tensord::detail
