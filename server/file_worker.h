#pragma once
// Blocking work off the event loop. KJ has no asynchronous file I/O, so
// jobs that touch the disk (open, read, write, fsync, rename) run on a few
// worker threads of their own, and each job's result comes back to the loop
// through a cross-thread fulfiller, like device completions do
// (loop_completion.h). Downloads use a pool of their own for large host
// copies (ServerState::hostCopies).
//
// Threads: run() on the event-loop thread; jobs on a worker thread. A job
// must touch no loop-side object (no capability, lease or promise): it gets
// plain data and file descriptors, and may write only into memory the loop
// keeps alive until its promise settled (keepUntilSettled). The destructor
// lets running jobs finish and drops queued ones (their promises reject).

#include <kj/async.h>
#include <kj/function.h>

#include <condition_variable>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "server/wire.h"

namespace tensord::server {

class FileWorker {
 public:
  // Below the loop and the device threads: copying a big file in and out of
  // the page cache takes CPU, and requests should get it first.
  static constexpr int kBackgroundNice = 10;

  // `nice`: the threads' niceness (Linux niceness is per thread).
  explicit FileWorker(unsigned threads = 2, int nice = kBackgroundNice);
  ~FileWorker();
  FileWorker(const FileWorker&) = delete;
  FileWorker& operator=(const FileWorker&) = delete;

  // Runs `job` on a worker thread; the promise resolves on the calling loop
  // when it returned, or rejects with what it threw (a std::exception
  // becomes a FAILED exception with its message). A job hands results back
  // through memory the caller shares with it (a shared_ptr it captures),
  // read once the promise resolved.
  template <typename Job>
  kj::Promise<void> run(Job&& job);

  // Copies `bytes` from `from` to `to` on a worker thread. Unlike run(), the
  // memory need live only as long as the returned promise: dropping the
  // promise before the copy finished stops a copy under way after the 1 MiB
  // piece it is on and waits for that, on the calling thread (the
  // destination then holds a first part of the bytes), and a copy not yet
  // started never starts. For bytes the caller holds only until its
  // promise settles (a call's message).
  kj::Promise<void> copy(void* to, const void* from, size_t bytes);

  // Runs `job` on a worker thread for its effect alone (closing a file,
  // removing a temporary one); what it throws is dropped.
  template <typename Job>
  void detach(Job&& job) {
    post([job = std::forward<Job>(job)]() mutable {
      try {
        job();
      } catch (...) {
      }
    });
  }

 private:
  void post(kj::Function<void()> task);
  void work(int nice);


  std::mutex mu_;
  std::condition_variable wake_;
  std::deque<kj::Function<void()>> queue_;  // GUARDED_BY(mu_)
  bool stopping_ = false;                   // GUARDED_BY(mu_)
  std::vector<std::thread> threads_;
};

template <typename Job>
kj::Promise<void> FileWorker::run(Job&& job) {
  static_assert(std::is_void_v<std::invoke_result_t<Job>>, "a job returns its results through shared memory");
  auto paf = kj::newPromiseAndCrossThreadFulfiller<void>();
  post([job = std::forward<Job>(job), fulfiller = kj::mv(paf.fulfiller)]() mutable {
    try {
      job();
      fulfiller->fulfill();
    } catch (...) {
      fulfiller->reject(fromExceptionPtr(std::current_exception()));
    }
  });
  return kj::mv(paf.promise);
}

// Holds `keep` (a staging lease, a buffer) until `promise` settled, even if
// the caller drops the returned promise first: a worker job may still be
// writing into memory that `keep` owns. `addTask` (ServerState::addTask)
// takes a promise that must run on after the caller is gone.
template <typename Keep, typename AddTask>
kj::Promise<void> keepUntilSettled(kj::Promise<void> promise, Keep keep, AddTask&& addTask) {
  auto forked = promise.fork();
  addTask(forked.addBranch().then([keep]() {}, [keep](kj::Exception&&) {}));
  return forked.addBranch();
}

}  // namespace tensord::server
