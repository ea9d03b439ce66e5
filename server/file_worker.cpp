#include "server/file_worker.h"

#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace tensord::server {

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
