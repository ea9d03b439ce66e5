#include "server/download.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <utility>
#include <vector>

#include "server/file_worker.h"
#include "server/tensor_impl.h"
#include "server/wire.h"

namespace tensord::server {
namespace {

using WriteRequest = capnp::StreamingRequest<proto::ByteSink::WriteParams>;

constexpr uint64_t kInlineCopyBytes = kChunkBytes;

// A piece copied out of its staging slot: its chunk writes, built and ready
// to go. Cap'n Proto requests own their bytes, so filling them is the one
// host copy a download needs anyway, and it frees the slot before the
// receiver has accepted anything. The copy (and the zero-filling of the
// requests' data before it) runs on a worker thread: on the event loop it
// would take the time the loop needs to send.
struct Piece {
  kj::Vector<WriteRequest> writes;
};

// One download in progress; owned by the promise it returns.
class DownloadJob {
 public:
  DownloadJob(ServerState& server, std::string requester, std::shared_ptr<TensorEntry> entry,
              proto::ByteSink::Client sink, uint64_t offset, uint64_t length)
      : server_(server),
        requester_(std::move(requester)),
        entry_(std::move(entry)),
        sink_(kj::mv(sink)),
        next_(offset),
        end_(offset + length) {}

  kj::Promise<void> run() {
    kj::Promise<void> pieces = next_ < end_ ? fetch().then([this](Piece piece) { return pump(kj::mv(piece)); })
                                            : kj::Promise<void>(kj::READY_NOW);
    return pieces.then([this]() { return sink_.doneRequest().send().ignoreResult(); });
  }

 private:
  // Copies the next piece device -> staging slot -> write requests. The slot
  // is held only while the device fills it, never while a receiver is slow.
  kj::Promise<Piece> fetch() {
    return server_.staging.acquire()
        .then([this](StagingLease lease) {
          const uint64_t at = next_;
          const uint64_t bytes = std::min({lease.capacity(), pieceLimit_, end_ - next_});
          next_ += bytes;
          pieceLimit_ = std::min(pieceLimit_ * 2, lease.capacity());
          auto copied = mapComputeErrors([&] {
            return server_.staging.transfer(lease, [&](compute::Completion done) {
              server_.engine.enqueueDownload(requester_, entry_->buffer, at, bytes, lease.slot(), std::move(done));
            });
          });
          return copied.then([this, lease = kj::mv(lease), bytes]() mutable {
            checkNotFailed(*entry_);
            return copyOut(kj::mv(lease), bytes);
          });
        })
        // Lazily evaluated, the device copy of a piece fetched ahead would
        // start only once the current piece is sent, and its slot would be
        // kept until then.
        .eagerlyEvaluate(nullptr);
  }

  // Builds the piece's write requests here (each a small message) and, on a
  // worker thread, gives each its data and fills it from the slot; then
  // gives the slot back. Cap'n Proto zero-fills the memory it allocates for
  // a message's data, so the worker writes each byte twice, and the event
  // loop, which sends, writes none of them. A piece of one chunk or less (a
  // download's first piece, a small tail) is filled here: nothing of this
  // download is being sent meanwhile, so the hand-offs to a worker and back
  // would only add to its latency.
  kj::Promise<Piece> copyOut(StagingLease lease, uint64_t bytes) {
    server_.metrics.bytesOut += bytes;
    server_.metrics.principal(requester_).bytesOut += bytes;
    // What the worker writes into lives until it is done, even when the
    // download is abandoned first; until then only the worker touches it.
    struct Copy {
      StagingLease lease;
      Piece piece;
      uint64_t bytes = 0;
    };
    auto copy = std::make_shared<Copy>();
    copy->lease = kj::mv(lease);
    copy->bytes = bytes;
    for (uint64_t pos = 0; pos < bytes; pos += kChunkBytes) {
      copy->piece.writes.add(sink_.writeRequest(capnp::MessageSize{8, 0}));
    }
    auto job = [copy = copy.get()]() {
      const auto* at = reinterpret_cast<const kj::byte*>(copy->lease.data());
      for (uint64_t pos = 0, i = 0; pos < copy->bytes; pos += kChunkBytes, ++i) {
        const uint64_t chunk = std::min<uint64_t>(kChunkBytes, copy->bytes - pos);
        std::memcpy(copy->piece.writes[i].initData(chunk).begin(), at + pos, chunk);
      }
    };
    if (bytes <= kInlineCopyBytes) {
      job();
      return kj::mv(copy->piece);
    }
    auto copied = keepUntilSettled(server_.hostCopies.run(kj::mv(job)), copy,
                                   [this](kj::Promise<void> p) { server_.addTask(kj::mv(p)); });
    return copied.then([copy]() mutable {
      copy->lease = StagingLease();  // back to the pool
      return kj::mv(copy->piece);
    });
  }

  // Sends `piece` while the next one is fetched. Holding no slot here, the
  // fetch may wait for one (the pool's deadlock rule), and at most two pieces
  // of this download are in host memory: the one being sent and the next.
  kj::Promise<void> pump(Piece piece) {
    kj::Maybe<kj::Promise<Piece>> ahead;
    if (next_ < end_) ahead = fetch();
    return send(kj::mv(piece), 0).then([this, ahead = kj::mv(ahead)]() mutable -> kj::Promise<void> {
      KJ_IF_MAYBE (next, ahead) {
        return next->then([this](Piece p) { return pump(kj::mv(p)); });
      }
      return kj::READY_NOW;
    });
  }

  // Sends writes [index, end) of `piece` one at a time, so Cap'n Proto's
  // stream flow control paces them; each sent request frees its bytes.
  kj::Promise<void> send(Piece piece, size_t index) {
    if (index == piece.writes.size()) return kj::READY_NOW;
    auto accepted = server_.timer.timeoutAfter(kStallTimeoutSeconds * kj::SECONDS, piece.writes[index].send());
    return accepted.then(
        [this, piece = kj::mv(piece), index]() mutable { return send(kj::mv(piece), index + 1); },
        [](kj::Exception&& e) -> kj::Promise<void> {
          if (e.getType() == kj::Exception::Type::OVERLOADED && e.getDescription().startsWith("operation timed out")) {
            return failed("download: the receiver accepted no data for " + std::to_string(kStallTimeoutSeconds) +
                          " s; transfer abandoned");
          }
          return kj::mv(e);
        });
  }

  ServerState& server_;
  const std::string requester_;
  std::shared_ptr<TensorEntry> entry_;
  proto::ByteSink::Client sink_;
  uint64_t next_;  // first byte not yet fetched
  uint64_t end_;
  // The largest next piece. Pieces start at one chunk and double up to a
  // slot: the first write leaves after one chunk's device copy, and each
  // piece is fetched while the one before, half its size, is sent.
  uint64_t pieceLimit_ = kChunkBytes;
};

}  // namespace

kj::Promise<void> streamToSink(ServerState& server, std::string requester, std::shared_ptr<TensorEntry> entry,
                               proto::ByteSink::Client sink, uint64_t offset, uint64_t length) {
  auto job = kj::heap<DownloadJob>(server, std::move(requester), std::move(entry), kj::mv(sink), offset, length);
  auto promise = job->run();
  return promise.attach(kj::mv(job));
}

}  // namespace tensord::server
