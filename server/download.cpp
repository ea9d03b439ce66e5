#include "server/download.h"

#include <algorithm>

#include "server/tensor_impl.h"
#include "server/wire.h"

namespace tensord::server {
namespace {

struct Piece {
  StagingLease lease;
  uint64_t bytes = 0;
};

// One download in progress; owned by the promise it returns.
class DownloadJob {
 public:
  DownloadJob(ServerState& server, std::shared_ptr<TensorEntry> entry, proto::ByteSink::Client sink, uint64_t offset,
              uint64_t length)
      : server_(server), entry_(std::move(entry)), sink_(kj::mv(sink)), next_(offset), end_(offset + length) {}

  kj::Promise<void> run() {
    kj::Promise<void> pieces = next_ < end_
                                   ? acquireAndStart().then([this](Piece piece) { return pump(kj::mv(piece)); })
                                   : kj::Promise<void>(kj::READY_NOW);
    return pieces.then([this]() { return sink_.doneRequest().send().ignoreResult(); });
  }

 private:
  kj::Promise<Piece> acquireAndStart() {
    return server_.staging.acquire().then([this](StagingLease lease) { return start(kj::mv(lease)); });
  }

  // Enqueues the device copy of the next piece into `lease`'s slot.
  kj::Promise<Piece> start(StagingLease lease) {
    const uint64_t at = next_;
    const uint64_t bytes = std::min(lease.capacity(), end_ - next_);
    next_ += bytes;
    auto copied = mapComputeErrors([&] {
      return server_.staging.transfer(lease, [&](compute::Completion done) {
        server_.engine.enqueueDownload(entry_->buffer, at, bytes, lease.slot(), std::move(done));
      });
    });
    return copied.then([this, lease = kj::mv(lease), bytes]() mutable {
      checkNotFailed(*entry_);
      return Piece{kj::mv(lease), bytes};
    });
  }

  kj::Promise<void> pump(Piece piece) {
    current_ = kj::mv(piece);
    // Overlap: start the next device copy now if a slot is free without waiting.
    kj::Maybe<kj::Promise<Piece>> ahead;
    if (next_ < end_) {
      if (auto lease = server_.staging.tryAcquire()) ahead = start(kj::mv(*lease));
    }
    return send(0).then([this, ahead = kj::mv(ahead)]() mutable -> kj::Promise<void> {
      current_ = Piece();  // give the slot back before waiting for another
      KJ_IF_MAYBE (next, ahead) {
        return next->then([this](Piece p) { return pump(kj::mv(p)); });
      }
      if (next_ < end_) return acquireAndStart().then([this](Piece p) { return pump(kj::mv(p)); });
      return kj::READY_NOW;
    });
  }

  // Sends bytes [pos, end) of the current piece as 1 MiB stream writes.
  kj::Promise<void> send(uint64_t pos) {
    if (pos >= current_.bytes) return kj::READY_NOW;
    const uint64_t chunk = std::min<uint64_t>(kChunkBytes, current_.bytes - pos);
    auto request = sink_.writeRequest(capnp::MessageSize{chunk / 8 + 8, 0});
    request.setData(kj::arrayPtr(reinterpret_cast<const kj::byte*>(current_.lease.data() + pos), chunk));
    auto accepted = server_.timer.timeoutAfter(kStallTimeoutSeconds * kj::SECONDS, request.send());
    return accepted.then(
        [this, pos, chunk]() { return send(pos + chunk); },
        [](kj::Exception&& e) -> kj::Promise<void> {
          if (e.getType() == kj::Exception::Type::OVERLOADED && e.getDescription().startsWith("operation timed out")) {
            return failed("download: the receiver accepted no data for " + std::to_string(kStallTimeoutSeconds) +
                          " s; transfer abandoned");
          }
          return kj::mv(e);
        });
  }

  ServerState& server_;
  std::shared_ptr<TensorEntry> entry_;
  proto::ByteSink::Client sink_;
  uint64_t next_;  // first byte not yet enqueued for copying
  uint64_t end_;
  Piece current_;  // the piece being sent
};

}  // namespace

kj::Promise<void> streamToSink(ServerState& server, std::shared_ptr<TensorEntry> entry, proto::ByteSink::Client sink,
                               uint64_t offset, uint64_t length) {
  auto job = kj::heap<DownloadJob>(server, std::move(entry), kj::mv(sink), offset, length);
  auto promise = job->run();
  return promise.attach(kj::mv(job));
}

}  // namespace tensord::server
