#pragma once
// BatchingStream: a connection's byte stream as the RPC system should see it.
// A pipelined client sends many small messages at once and the daemon answers
// each; read and written one system call each, those calls cost more than the
// work they ask for. This wrapper reads whatever has arrived in one call and
// serves the RPC system's small reads from that buffer, and collects the small
// messages written during one pass of the event loop into one write at the
// end of the pass. Large writes (bulk data) go straight through, after what
// was collected before them.
//
// Back-pressure: a small write is accepted at once only while no write is
// under way; while one is (the socket is full), the writer waits for the batch
// its bytes go out with, so a slow reader still slows the writer down.
//
// Threads: the event-loop thread only. Lifetime: `inner` must outlive it.

#include <kj/async-io.h>
#include <kj/vector.h>

namespace tensord::server {

class BatchingStream final : public kj::AsyncIoStream {
 public:
  static constexpr size_t kReadBufferBytes = 64 * 1024;
  // Writes of at least this many bytes are not copied into the batch.
  static constexpr size_t kDirectWriteBytes = 32 * 1024;

  explicit BatchingStream(kj::AsyncIoStream& inner);
  ~BatchingStream() noexcept(false);

  kj::Promise<size_t> tryRead(void* buffer, size_t minBytes, size_t maxBytes) override;
  kj::Promise<void> write(const void* buffer, size_t size) override;
  kj::Promise<void> write(kj::ArrayPtr<const kj::ArrayPtr<const kj::byte>> pieces) override;
  kj::Promise<void> whenWriteDisconnected() override;
  void shutdownWrite() override;  // after the collected bytes are written
  void abortRead() override;
  void getsockopt(int level, int option, void* value, kj::uint* length) override;
  void setsockopt(int level, int option, const void* value, kj::uint length) override;
  void getsockname(struct sockaddr* addr, kj::uint* length) override;
  void getpeername(struct sockaddr* addr, kj::uint* length) override;

  // How many writes reached the inner stream (tests and statistics).
  uint64_t innerWrites() const { return innerWrites_; }

 private:
  size_t takeBuffered(kj::byte* out, size_t maxBytes);
  kj::Promise<void> writeLoop();  // writes batches until none is left
  void fail(const kj::Exception& e);

  kj::AsyncIoStream& inner_;
  kj::Array<kj::byte> readBuffer_;
  size_t readBegin_ = 0;
  size_t readEnd_ = 0;

  kj::Vector<kj::byte> batch_;  // accepted bytes not yet handed to inner_
  // Writers waiting for batch_ to be written (it was accepted while a write was under way).
  kj::Vector<kj::Own<kj::PromiseFulfiller<void>>> batchWaiters_;
  // Large writes waiting until every earlier byte was written.
  kj::Vector<kj::Own<kj::PromiseFulfiller<void>>> drainWaiters_;
  bool flushQueued_ = false;  // writeLoop runs at the end of this pass of the loop
  bool writing_ = false;      // a batch is being written
  bool shutdownPending_ = false;
  kj::Maybe<kj::Exception> writeError_;
  uint64_t innerWrites_ = 0;
  kj::Promise<void> flushing_ = nullptr;  // the writeLoop; cancelled with the stream
};

}  // namespace tensord::server
