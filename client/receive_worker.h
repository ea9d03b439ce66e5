#pragma once
// Lands a large download's chunks in its destination on a thread of its own.
// Internal.
//
// A download's event loop reads one chunk after another from the socket; the
// copy of a chunk into the destination (a fresh std::vector, whose pages the
// kernel faults in and zeroes on first touch, or memory the caller owns)
// would otherwise run between those reads, on the same thread. Here the loop
// hands the chunk to the worker and goes back to the socket; the worker
// lands it, and while it waits for the next chunk it faults in the
// destination's next pages (MADV_POPULATE_WRITE, where the kernel has it;
// pages already there cost a page-table walk).
//
// Threads: construct, append(), stop() and destroy on the event-loop thread
// that receives the download; the worker is the only thread that touches the
// destination until stop() returned or idle() says every append finished.

#include <kj/async.h>

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <deque>
#include <limits>
#include <mutex>
#include <span>
#include <thread>
#include <type_traits>
#include <vector>

namespace tensord::detail {

// Where a download's bytes land, in order.
class Landing {
 public:
  virtual ~Landing() = default;
  // Lands `n` bytes after those landed so far; `n` <= room().
  virtual void append(const std::byte* bytes, size_t n) = 0;
  // How many more bytes fit.
  virtual size_t room() const = 0;
  // The memory still to be written: where the worker faults pages in ahead.
  virtual std::span<std::byte> ahead() = 0;
};

// Asks for transparent huge pages (MADV_HUGEPAGE) for the whole 2 MiB pages
// inside `bytes` of fresh memory at `data`: it is then faulted in 2 MiB at a
// time instead of 4 KiB, 512 times fewer faults. Advice only, and only for
// blocks of 32 MiB or more, which glibc always maps on their own (advice
// on heap memory would outlive the vector).
void adviseHugePages(void* data, size_t bytes);

// Appends to a std::vector of a trivially copyable T (std::byte, float),
// growing it; reserve() its final size first so the bytes are copied once
// and its pages can be faulted in ahead. Bytes of an element split between
// two appends wait in `partial_` for the rest; a trailing part of an
// element is never landed (the download's byte count, checked against the
// tensor's, is a whole number of elements).
template <typename T>
class VectorLanding final : public Landing {
  static_assert(std::is_trivially_copyable_v<T>);

 public:
  explicit VectorLanding(std::vector<T>& out) : out_(out) {}
  // Reserves room for `bytes` in all (rounded up to whole elements).
  void reserve(size_t bytes) {
    out_.reserve((bytes + sizeof(T) - 1) / sizeof(T));
    adviseHugePages(out_.data(), out_.capacity() * sizeof(T));
  }
  void append(const std::byte* bytes, size_t n) override {
    while (n > 0 && filled_ > 0) {  // complete the element begun by the last append
      partial_[filled_++] = *bytes++;
      --n;
      if (filled_ == sizeof(T)) {
        grow(partial_, sizeof(T));
        filled_ = 0;
      }
    }
    if (n == 0) return;
    const size_t whole = n - n % sizeof(T);
    grow(bytes, whole);
    std::memcpy(partial_, bytes + whole, n - whole);
    filled_ = n - whole;
  }
  size_t room() const override { return std::numeric_limits<size_t>::max() - out_.size() * sizeof(T); }
  std::span<std::byte> ahead() override {
    return {reinterpret_cast<std::byte*>(out_.data() + out_.size()), (out_.capacity() - out_.size()) * sizeof(T)};
  }
 private:
  // Appends the n / sizeof(T) elements at `bytes`: straight from them where
  // they are aligned (Cap'n Proto data is), else through a zero-filled
  // resize, which writes every byte twice.
  void grow(const std::byte* bytes, size_t n) {
    if (n == 0) return;
    if (reinterpret_cast<uintptr_t>(bytes) % alignof(T) == 0) {
      const T* from = reinterpret_cast<const T*>(bytes);
      out_.insert(out_.end(), from, from + n / sizeof(T));
      return;
    }
    const size_t at = out_.size();
    out_.resize(at + n / sizeof(T));
    std::memcpy(out_.data() + at, bytes, n);
  }

  std::vector<T>& out_;
  std::byte partial_[sizeof(T)] = {};
  size_t filled_ = 0;
};

// Fills memory the caller owns, from its start.
class SpanLanding final : public Landing {
 public:
  explicit SpanLanding(std::span<std::byte> out) : out_(out) {}
  void append(const std::byte* bytes, size_t n) override;
  size_t room() const override { return out_.size() - landed_; }
  std::span<std::byte> ahead() override { return out_.subspan(landed_); }

 private:
  std::span<std::byte> out_;
  size_t landed_ = 0;
};

class ReceiveWorker {
 public:
  // `destination` must already have room for every byte that will be
  // appended, and must outlive this object.
  explicit ReceiveWorker(Landing& destination);
  ~ReceiveWorker();  // stop()
  ReceiveWorker(const ReceiveWorker&) = delete;
  ReceiveWorker& operator=(const ReceiveWorker&) = delete;

  // Lands `bytes` in the destination, after every earlier append. The
  // promise resolves on the calling thread's event loop once the bytes are
  // copied. `bytes` must stay valid until then, or until the promise is
  // destroyed: destroying it first waits until the worker is done with them.
  kj::Promise<void> append(kj::ArrayPtr<const kj::byte> bytes);

  // True when no append is queued or in progress.
  bool idle() const;

  // Ends the thread after the append in progress; once it returns the
  // destination is the caller's again. Appends still queued, or made later,
  // are never copied: their promises fail. The object must still outlive
  // every promise append() returned.
  void stop();

 private:
  struct Job;
  void run();
  bool prefaultNext();  // faults in the next pages past the copied bytes; false when there are none
  void forget(const Job& job);

  Landing& destination_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;           // a job was queued, or stop_
  std::condition_variable jobLeft_;        // `current_` changed
  std::deque<const Job*> queue_;           // guarded by mutex_
  const Job* current_ = nullptr;           // guarded by mutex_: the job being copied
  bool stop_ = false;                      // guarded by mutex_
  const std::byte* prefaulted_ = nullptr;  // worker only: faulted in up to here
  bool canPrefault_ = true;                // worker only
  std::thread thread_;                     // last: started once the rest exists
};

}  // namespace tensord::detail
