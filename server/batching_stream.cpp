#include "server/batching_stream.h"

#include <algorithm>
#include <cstring>

namespace tensord::server {

BatchingStream::BatchingStream(kj::AsyncIoStream& inner)
    : inner_(inner), readBuffer_(kj::heapArray<kj::byte>(kReadBufferBytes)) {}

BatchingStream::~BatchingStream() noexcept(false) {}

size_t BatchingStream::takeBuffered(kj::byte* out, size_t maxBytes) {
  const size_t n = std::min(maxBytes, readEnd_ - readBegin_);
  if (n > 0) std::memcpy(out, readBuffer_.begin() + readBegin_, n);
  readBegin_ += n;
  return n;
}

kj::Promise<size_t> BatchingStream::tryRead(void* buffer, size_t minBytes, size_t maxBytes) {
  auto* out = static_cast<kj::byte*>(buffer);
  const size_t have = takeBuffered(out, maxBytes);
  if (have >= minBytes) return have;
  // The buffer is empty now (it held less than maxBytes).
  if (maxBytes - have >= kReadBufferBytes) {
    // A large read (bulk data): straight into the caller's memory.
    return inner_.tryRead(out + have, minBytes - have, maxBytes - have).then([have](size_t got) {
      return have + got;
    });
  }
  return inner_.tryRead(readBuffer_.begin(), minBytes - have, readBuffer_.size())
      .then([this, out, have, maxBytes](size_t got) {
        readBegin_ = 0;
        readEnd_ = got;
        // Fewer than minBytes means end of stream, as for the inner stream.
        return have + takeBuffered(out + have, maxBytes - have);
      });
}

kj::Promise<void> BatchingStream::write(const void* buffer, size_t size) {
  kj::ArrayPtr<const kj::byte> piece(static_cast<const kj::byte*>(buffer), size);
  // The caller keeps `buffer` alive until the promise resolves; the piece
  // list itself must live as long, so it goes into the promise.
  auto pieces = kj::heapArray<kj::ArrayPtr<const kj::byte>>({piece});
  auto ptr = pieces.asPtr();
  return write(ptr).attach(kj::mv(pieces));
}

kj::Promise<void> BatchingStream::write(kj::ArrayPtr<const kj::ArrayPtr<const kj::byte>> pieces) {
  KJ_IF_MAYBE (error, writeError_) {
    return kj::cp(*error);
  }
  size_t total = 0;
  for (auto piece : pieces) total += piece.size();
  if (total >= kDirectWriteBytes) {
    if (batch_.empty() && !writing_ && !flushQueued_) {
      ++innerWrites_;
      return inner_.write(pieces);
    }
    // After everything accepted before it.
    auto paf = kj::newPromiseAndFulfiller<void>();
    drainWaiters_.add(kj::mv(paf.fulfiller));
    return paf.promise.then([this, pieces]() {
      ++innerWrites_;
      return inner_.write(pieces);
    });
  }
  for (auto piece : pieces) batch_.addAll(piece);
  if (writing_) {
    // The socket is busy: this writer waits for the batch its bytes go out with.
    auto paf = kj::newPromiseAndFulfiller<void>();
    batchWaiters_.add(kj::mv(paf.fulfiller));
    return kj::mv(paf.promise);
  }
  if (!flushQueued_) {
    flushQueued_ = true;
    // Once every event queued now has run: the answers of this pass go out together.
    flushing_ = kj::evalLast([this]() { return writeLoop(); }).eagerlyEvaluate([this](kj::Exception&& e) {
      fail(e);
    });
  }
  return kj::READY_NOW;
}

kj::Promise<void> BatchingStream::writeLoop() {
  flushQueued_ = false;
  if (batch_.empty()) {
    writing_ = false;
    auto waiters = kj::mv(drainWaiters_);
    drainWaiters_ = kj::Vector<kj::Own<kj::PromiseFulfiller<void>>>();
    for (auto& waiter : waiters) waiter->fulfill();
    if (shutdownPending_) {
      shutdownPending_ = false;
      inner_.shutdownWrite();
    }
    return kj::READY_NOW;
  }
  writing_ = true;
  kj::Array<kj::byte> bytes = batch_.releaseAsArray();
  batch_ = kj::Vector<kj::byte>();
  auto waiters = kj::mv(batchWaiters_);
  batchWaiters_ = kj::Vector<kj::Own<kj::PromiseFulfiller<void>>>();
  ++innerWrites_;
  auto written = inner_.write(bytes.begin(), bytes.size());
  return written.attach(kj::mv(bytes)).then([this, waiters = kj::mv(waiters)]() mutable {
    for (auto& waiter : waiters) waiter->fulfill();
    return writeLoop();
  });
}

void BatchingStream::fail(const kj::Exception& e) {
  writeError_ = kj::cp(e);
  writing_ = false;
  flushQueued_ = false;
  batch_.clear();
  for (auto& waiter : batchWaiters_) waiter->reject(kj::cp(e));
  for (auto& waiter : drainWaiters_) waiter->reject(kj::cp(e));
  batchWaiters_ = kj::Vector<kj::Own<kj::PromiseFulfiller<void>>>();
  drainWaiters_ = kj::Vector<kj::Own<kj::PromiseFulfiller<void>>>();
  // Accepted bytes were lost: make the reader see the failure too, so the
  // connection ends instead of waiting for answers that never went out.
  inner_.abortRead();
}

kj::Promise<void> BatchingStream::whenWriteDisconnected() { return inner_.whenWriteDisconnected(); }

void BatchingStream::shutdownWrite() {
  if (writing_ || flushQueued_) {
    shutdownPending_ = true;  // writeLoop shuts down once the batch is out
  } else {
    inner_.shutdownWrite();
  }
}

void BatchingStream::abortRead() { inner_.abortRead(); }

void BatchingStream::getsockopt(int level, int option, void* value, kj::uint* length) {
  inner_.getsockopt(level, option, value, length);
}

void BatchingStream::setsockopt(int level, int option, const void* value, kj::uint length) {
  inner_.setsockopt(level, option, value, length);
}

void BatchingStream::getsockname(struct sockaddr* addr, kj::uint* length) { inner_.getsockname(addr, length); }

void BatchingStream::getpeername(struct sockaddr* addr, kj::uint* length) { inner_.getpeername(addr, length); }

}  // namespace tensord::server
