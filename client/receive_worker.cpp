// Appending received chunks on a worker thread.

#include "client/receive_worker.h"

#include <kj/debug.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

namespace tensord::detail {

namespace {

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23  // Linux 5.14; older kernels answer EINVAL and the worker stops asking
#endif

// Destination bytes faulted in per step while the worker waits for a chunk:
// small enough that a chunk arriving meanwhile waits little.
constexpr size_t kPrefaultStep = size_t(2) << 20;

// Faults in the whole pages inside `memory` for writing, without touching
// their contents; false where the kernel cannot.
bool prefault(std::span<std::byte> memory) {
  static const uintptr_t page = uintptr_t(sysconf(_SC_PAGESIZE));
  const uintptr_t begin = reinterpret_cast<uintptr_t>(memory.data());
  const uintptr_t first = (begin + page - 1) & ~(page - 1);  // whole pages inside `memory`
  const uintptr_t last = (begin + memory.size()) & ~(page - 1);
  return last <= first || madvise(reinterpret_cast<void*>(first), last - first, MADV_POPULATE_WRITE) == 0;
}

}  // namespace

void adviseHugePages(void* data, size_t bytes) {
  constexpr uintptr_t kHugePage = uintptr_t(2) << 20;
  constexpr size_t kMappedBytes = size_t(32) << 20;  // glibc's largest mmap threshold on 64-bit
  if (bytes < kMappedBytes) return;
  const uintptr_t begin = reinterpret_cast<uintptr_t>(data);
  const uintptr_t first = (begin + kHugePage - 1) & ~(kHugePage - 1);  // whole huge pages inside the memory
  const uintptr_t last = (begin + bytes) & ~(kHugePage - 1);
  // Where the kernel has no huge pages the vector works as before.
  if (last > first) madvise(reinterpret_cast<void*>(first), last - first, MADV_HUGEPAGE);
}

void SpanLanding::append(const std::byte* bytes, size_t n) {
  if (n == 0) return;
  std::memcpy(out_.data() + landed_, bytes, n);
  landed_ += n;
}

struct ReceiveWorker::Job {
  kj::ArrayPtr<const kj::byte> bytes;
  kj::Own<kj::CrossThreadPromiseFulfiller<void>> copied;
};

ReceiveWorker::ReceiveWorker(Landing& destination) : destination_(destination), thread_([this] { run(); }) {}

ReceiveWorker::~ReceiveWorker() { stop(); }

void ReceiveWorker::stop() {
  std::deque<const Job*> abandoned;
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
    abandoned.swap(queue_);
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
  // The promises of these jobs still exist (forget() takes a job out of the
  // queue when its promise goes), on this thread.
  for (const Job* job : abandoned) {
    job->copied->reject(KJ_EXCEPTION(FAILED, "download abandoned: its bytes are no longer wanted"));
  }
}

kj::Promise<void> ReceiveWorker::append(kj::ArrayPtr<const kj::byte> bytes) {
  auto paf = kj::newPromiseAndCrossThreadFulfiller<void>();
  auto job = kj::heap<Job>(Job{bytes, kj::mv(paf.fulfiller)});
  {
    std::lock_guard lock(mutex_);
    if (stop_) return KJ_EXCEPTION(FAILED, "download abandoned: its bytes are no longer wanted");
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
      destination_.append(begin, current_->bytes.size());
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
  const std::span<std::byte> ahead = destination_.ahead();
  const std::byte* end = ahead.data() + ahead.size();
  const std::byte* from = std::max<const std::byte*>(prefaulted_, ahead.data());
  if (ahead.empty() || from >= end) return false;
  const size_t step = std::min<size_t>(size_t(end - from), kPrefaultStep);
  if (!prefault(ahead.subspan(size_t(from - ahead.data()), step))) return false;
  prefaulted_ = from + step;
  return true;
}

}  // namespace tensord::detail
