// Chunked upload and download.

#include "client/transfer.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include "client/receive_worker.h"
#include "client/wire.h"

namespace tensord::detail {

namespace {

uint64_t byteCount(DType dtype, const Shape& shape) {
  uint64_t numel = 1;
  for (int64_t d : shape) {
    if (d < 0) {
      throw Error(Error::Kind::kFailed, "upload: shape " + wire::shapeStr(shape) + " has a negative dim");
    }
    if (d != 0 && numel > std::numeric_limits<uint64_t>::max() / uint64_t(d) / dtypeSize(dtype)) {
      throw Error(Error::Kind::kFailed, "upload: shape " + wire::shapeStr(shape) + " is too large");
    }
    numel *= uint64_t(d);
  }
  return numel * dtypeSize(dtype);
}

// Downloads from this size up land their chunks through a ReceiveWorker;
// smaller ones are copied on the event loop: each chunk's hand-off to the
// worker and back costs more than it saves until the download is long
// enough for the copies to overlap the socket. On an H100's host, 4 MiB
// downloads into a fresh vector read 1.0-1.3 GB/s through the worker and
// 2.0-2.3 without; 16 MiB alike either way; 64 MiB 2.5-2.7 with, 1.9-2.0
// without.
constexpr uint64_t kWorkerBytes = uint64_t(32) << 20;

// What a download collects. Shared by the sink capability (which the daemon
// may hold a little longer than the download call) and the caller.
struct DownloadState {
  Landing* landing = nullptr;  // the caller's; null once the download returned or failed
  uint64_t received = 0;       // bytes accepted by write(), copied or queued
  uint64_t expected = 0;       // valid once `known`
  bool known = false;
  bool done = false;
  kj::Own<kj::PromiseFulfiller<void>> onDone;  // fulfilled by done(); null once the download returned
  Progress progress;
  std::unique_ptr<ReceiveWorker> worker;  // lands into *landing while it exists and is not idle
};

class SinkServer final : public proto::ByteSink::Server {
 public:
  explicit SinkServer(std::shared_ptr<DownloadState> state) : state_(std::move(state)) {}

 protected:
  kj::Promise<void> write(WriteContext context) override {
    auto chunk = context.getParams().getData();
    KJ_REQUIRE(!state_->done, "ByteSink.write after done()");
    KJ_REQUIRE(state_->landing != nullptr, "download abandoned: its bytes are no longer wanted");
    KJ_REQUIRE(!state_->known || state_->received + chunk.size() <= state_->expected,
               "download sent more bytes than the tensor has", state_->expected);
    if (state_->worker) {
      state_->received += chunk.size();
      if (state_->progress) state_->progress(state_->received, state_->expected);
      // Cap'n Proto delivers the next write (and done()) only once this
      // promise resolved, and keeps `chunk` valid until then; the state stays
      // alive until the worker let go of `chunk`.
      return state_->worker->append(chunk).attach(std::shared_ptr<DownloadState>(state_));
    }
    // Before the tensor's size is known the destination's room bounds it (a
    // caller's buffer of the wrong size is reported once the size is known).
    KJ_REQUIRE(chunk.size() <= state_->landing->room(), "download sent more bytes than the destination holds");
    state_->received += chunk.size();
    if (state_->progress && state_->known) state_->progress(state_->received, state_->expected);
    state_->landing->append(reinterpret_cast<const std::byte*>(chunk.begin()), chunk.size());
    return kj::READY_NOW;
  }

  kj::Promise<void> done(DoneContext context) override {
    state_->done = true;
    if (state_->onDone) state_->onDone->fulfill();
    return kj::READY_NOW;
  }

 private:
  std::shared_ptr<DownloadState> state_;
};

}  // namespace

Tensor upload(const std::shared_ptr<Connection>& conn, DType dtype, const Shape& shape, std::span<const std::byte> data,
              const Progress& progress) {
  uint64_t expected = byteCount(dtype, shape);
  if (data.size() != expected) {
    throw Error(Error::Kind::kFailed, "upload: shape " + wire::shapeStr(shape) + " of " +
                                          std::string(dtypeName(dtype)) + " needs " + std::to_string(expected) +
                                          " bytes; got " + std::to_string(data.size()));
  }
  return conn->blocking([&] {
    auto request = conn->session().uploadRequest();
    auto desc = request.initDesc();
    desc.setDtype(wire::toWire(dtype));
    auto dims = desc.initShape(uint32_t(shape.size()));
    for (size_t i = 0; i < shape.size(); ++i) dims.set(uint32_t(i), shape[i]);
    auto started = request.send();
    auto writer = started.getWriter();

    if (progress) progress(0, data.size());
    for (size_t offset = 0, length = 0; offset < data.size(); offset += length) {
      length = std::min(offset < kChunkBytes ? kLeadingChunkBytes : kChunkBytes, data.size() - offset);
      auto write = writer.writeRequest(capnp::MessageSize{length / sizeof(capnp::word) + 16, 0});
      write.setData(capnp::Data::Reader(reinterpret_cast<const kj::byte*>(data.data() + offset), length));
      // Resolves when the flow controller wants more, not when the daemon has the chunk.
      conn->wait(write.send());
      if (progress) progress(offset + length, data.size());
    }

    auto commit = writer.commitRequest().send();
    proto::Tensor::Client cap = commit.getTensor();
    auto origin =
        std::make_shared<PendingCall>(commit.then([](capnp::Response<proto::TensorWriter::CommitResults>&&) {}));
    Tensor tensor = makeTensor(conn, std::move(origin), std::move(cap));
    conn->flush();
    return tensor;
  });
}

TensorInfo download(Tensor::Impl& impl, Landing& landing, const std::function<void(const TensorInfo&)>& expect,
                    const Progress& progress) {
  auto& conn = *impl.conn;
  return conn.blocking([&] {
    auto state = std::make_shared<DownloadState>();
    state->landing = &landing;
    state->progress = progress;
    // The sink may outlive the download (an error, an abandoned wait): from
    // here on it must touch neither the caller's destination nor its
    // progress. Stopping the worker waits for the copy in progress.
    auto doneArrived = kj::newPromiseAndFulfiller<void>();
    state->onDone = kj::mv(doneArrived.fulfiller);
    KJ_DEFER({
      if (state->worker) state->worker->stop();
      state->landing = nullptr;
      state->progress = nullptr;
      state->onDone = nullptr;
    });

    // Both requests leave together; the info answer normally arrives before
    // the first chunk, so the destination is sized once, before any byte.
    auto infoCall = capOf(impl).infoRequest().send();
    auto request = capOf(impl).downloadRequest();
    request.setSink(kj::heap<SinkServer>(state));
    request.setOffset(0);
    request.setLength(0);
    auto transfer = request.send();

    TensorInfo info = wire::fromWire(conn.wait(kj::mv(infoCall)).getInfo());
    if (state->received > info.bytes) {
      throw Error(Error::Kind::kFailed, "download: received " + std::to_string(state->received) +
                                            " bytes; the tensor has " + std::to_string(info.bytes));
    }
    expect(info);  // throws when the destination does not fit; the download is then dropped
    state->expected = info.bytes;
    state->known = true;
    // From here on every chunk goes through the worker, after those copied so far.
    if (info.bytes >= kWorkerBytes) state->worker = std::make_unique<ReceiveWorker>(landing);
    if (progress) progress(state->received, info.bytes);

    // done() comes after every write, so once it arrived every byte has
    // landed: return then, rather than one more trip later with the download
    // call's own answer (the daemon sends that once done() returned; the
    // call is dropped here instead). A failure before done() still ends it.
    conn.wait(transfer.ignoreResult().exclusiveJoin(kj::mv(doneArrived.promise)));
    // Send done()'s answer now: the daemon's download call ends only once it
    // arrives, and this thread's event loop may not run again until its next
    // blocking call (a daemon stopping meanwhile would wait for that call).
    conn.flush();
    // done() was delivered after every write's copy finished, so the worker
    // is idle and the destination is this thread's again.
    if (!state->done || state->received != info.bytes || (state->worker && !state->worker->idle())) {
      throw Error(Error::Kind::kFailed, "download: received " + std::to_string(state->received) + " of " +
                                            std::to_string(info.bytes) + " bytes" +
                                            (state->done ? "" : " and no done()"));
    }
    return info;
  });
}

std::pair<TensorInfo, std::vector<std::byte>> download(Tensor::Impl& impl, const Progress& progress) {
  std::vector<std::byte> data;
  VectorLanding<std::byte> landing(data);
  TensorInfo info = download(
      impl, landing, [&](const TensorInfo& known) { landing.reserve(known.bytes); }, progress);
  return {std::move(info), std::move(data)};
}

}  // namespace tensord::detail
