#include "server/file_worker.h"

#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>

namespace tensord::server {

namespace {

// A copy of FileWorker::copy goes in pieces of this size; a dropped one
// stops after the piece under way.
constexpr size_t kCopyPieceBytes = size_t(1) << 20;

// Where a copy of FileWorker::copy stands. `dropped` is set once its
// promise is gone: a copy not yet started then never starts, one under way
// stops after its piece, and the guard waits until `running` is false.
struct CopyState {
  std::mutex mu;
  std::condition_variable stopped;
  bool running = false;  // GUARDED_BY(mu)
  std::atomic<bool> dropped{false};
};

// Goes with the copy's promise: once it is gone, so is every access to the
// copy's memory.
class CopyGuard {
 public:
  explicit CopyGuard(std::shared_ptr<CopyState> state) : state_(std::move(state)) {}
  ~CopyGuard() {
    state_->dropped = true;
    std::unique_lock lock(state_->mu);
    state_->stopped.wait(lock, [this] { return !state_->running; });
  }
  CopyGuard(const CopyGuard&) = delete;
  CopyGuard& operator=(const CopyGuard&) = delete;

 private:
  std::shared_ptr<CopyState> state_;
};

}  // namespace

kj::Promise<void> FileWorker::copy(void* to, const void* from, size_t bytes) {
  auto state = std::make_shared<CopyState>();
  auto copied = run([state, to, from, bytes] {
    {
      std::lock_guard lock(state->mu);
      if (state->dropped) return;
      state->running = true;
    }
    auto* out = static_cast<std::byte*>(to);
    const auto* in = static_cast<const std::byte*>(from);
    for (size_t at = 0; at < bytes && !state->dropped; at += kCopyPieceBytes) {
      std::memcpy(out + at, in + at, std::min(kCopyPieceBytes, bytes - at));
    }
    {
      std::lock_guard lock(state->mu);
      state->running = false;
    }
    state->stopped.notify_all();
  });
  // Attached, the guard goes after the copy's promise.
  return copied.attach(kj::heap<CopyGuard>(kj::mv(state)));
}

FileWorker::FileWorker(unsigned threads, int nice) {
  for (unsigned i = 0; i < threads; ++i) threads_.emplace_back([this, nice] { work(nice); });
}

FileWorker::~FileWorker() {
  std::deque<kj::Function<void()>> dropped;
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
    dropped.swap(queue_);
  }
  wake_.notify_all();
  for (auto& thread : threads_) thread.join();
  // `dropped` goes here: each job's fulfiller rejects its promise.
}

void FileWorker::post(kj::Function<void()> task) {
  {
    std::lock_guard lock(mu_);
    queue_.push_back(kj::mv(task));
  }
  wake_.notify_one();
}

void FileWorker::work(int nice) {
  if (nice != 0) ::setpriority(PRIO_PROCESS, id_t(::syscall(SYS_gettid)), nice);  // a failure leaves the default
  for (;;) {
    kj::Function<void()> task;
    {
      std::unique_lock lock(mu_);
      wake_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (stopping_) return;
      task = kj::mv(queue_.front());
      queue_.pop_front();
    }
    task();
  }
}

}  // namespace tensord::server
