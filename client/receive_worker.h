#pragma once
// Lands a large download's chunks in its destination on a thread of its own.
// Internal.
//
// A download's event loop reads one chunk after another from the socket; the
// copy of a chunk into the destination (a fresh std::vector, whose pages the
// kernel faults in and zeroes on first touch) would otherwise run between
// those reads, on the same thread. Here the loop hands the chunk to the
// worker and goes back to the socket; the worker appends it, and while it
// waits for the next chunk it faults in the destination's next pages
// (MADV_POPULATE_WRITE, where the kernel has it).
//
// Threads: construct, append() and destroy on the event-loop thread that
// receives the download; the worker is the only thread that touches the
// destination until stop() returned or idle() says every append finished.

#include <kj/async.h>

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

namespace tensord::detail {

class ReceiveWorker {
 public:
  // `destination` must already have the capacity for every byte that will be
  // appended (reserve), and must outlive this object.
  explicit ReceiveWorker(std::vector<std::byte>& destination);
  ~ReceiveWorker();  // stop()
  ReceiveWorker(const ReceiveWorker&) = delete;
  ReceiveWorker& operator=(const ReceiveWorker&) = delete;

  // Appends `bytes` to the destination, after every earlier append. The
  // promise resolves on the calling thread's event loop once the bytes are
  // copied. `bytes` must stay valid until then, or until the promise is
  // destroyed: destroying it first waits until the worker is done with them.
  kj::Promise<void> append(kj::ArrayPtr<const kj::byte> bytes);

  // True when no append is queued or in progress.
  bool idle() const;

  // Ends the thread after the append in progress; call it once idle() to
  // have the destination back. Appends still queued, or made later, are never
  // copied. The object must still outlive every promise append() returned.
  void stop();

 private:
  struct Job;
  void run();
  bool prefaultNext();  // faults in the next pages past the copied bytes; false when there are none
  void forget(const Job& job);

  std::vector<std::byte>& destination_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;     // a job was queued, or stop_
  std::condition_variable jobLeft_;  // `current_` changed
  std::deque<const Job*> queue_;     // guarded by mutex_
  const Job* current_ = nullptr;     // guarded by mutex_: the job being copied
  bool stop_ = false;                // guarded by mutex_
  size_t prefaulted_ = 0;            // worker only: destination bytes known to be faulted in
  bool canPrefault_ = true;          // worker only
  std::thread thread_;               // last: started once the rest exists
};

}  // namespace tensord::detail
