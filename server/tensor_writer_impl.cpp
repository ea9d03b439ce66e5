#include "server/tensor_writer_impl.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstring>

#include "server/tensor_impl.h"
#include "server/wire.h"

namespace tensord::server {

TensorWriterImpl::TensorWriterImpl(std::shared_ptr<SessionState> session, compute::TensorDesc desc,
                                   std::shared_ptr<compute::Buffer> buffer)
    : session_(std::move(session)), desc_(std::move(desc)), buffer_(std::move(buffer)) {}

TensorWriterImpl::~TensorWriterImpl() { session_->server().staging.removeIdleHolder(*this); }

void TensorWriterImpl::throwIfFailed() const {
  KJ_IF_MAYBE (failure, status_->failure) {
    kj::Exception copy = *failure;
    kj::throwFatalException(kj::mv(copy));
  }
}

kj::Promise<void> TensorWriterImpl::write(WriteContext context) {
  // A failed stream write reaches the client only on its next call, so the
  // first failure is also kept for commit() to report.
  return kj::evalNow([&]() { return writeNow(context); }).catch_([this](kj::Exception&& e) -> kj::Promise<void> {
    if (status_->failure == nullptr) status_->failure = e;
    return kj::mv(e);
  });
}

kj::Promise<void> TensorWriterImpl::writeNow(WriteContext context) {
  if (committed_) kj::throwFatalException(failed("upload: write after commit"));
  throwIfFailed();
  const uint64_t size = context.getParams().getData().size();
  const uint64_t total = desc_.bytes();
  if (size > total - received_) {
    kj::throwFatalException(failed("upload: " + desc_.str() + " holds " + std::to_string(total) + " bytes; got " +
                                   std::to_string(received_ + size) + " (a write of " + std::to_string(size) +
                                   " bytes at offset " + std::to_string(received_) + ")"));
  }
  received_ += size;
  session_->server().metrics.bytesIn += size;
  session_->usage.bytesIn += size;
  return copyIn(context, 0).then([this]() {
    // Do not sit on a half-filled slot while others wait for one; keep it
    // otherwise, but hand it over as soon as someone has to wait.
    StagingPool& pool = session_->server().staging;
    if (slot_ && pool.hasWaiters()) flushSlot();
    if (slot_) pool.addIdleHolder(*this);
  });
}

kj::Promise<void> TensorWriterImpl::copyIn(WriteContext context, uint64_t pos) {
  auto data = context.getParams().getData();
  StagingPool& pool = session_->server().staging;
  while (pos < data.size()) {
    if (!slot_) {
      if (auto lease = pool.tryAcquire()) {
        slot_ = kj::mv(*lease);
      } else {
        return pool.acquire().then([this, context, pos](StagingLease lease) mutable {
          slot_ = kj::mv(lease);
          return copyIn(context, pos);
        });
      }
      slotFill_ = 0;
    }
    const uint64_t n = std::min(slot_.capacity() - slotFill_, uint64_t(data.size()) - pos);
    std::memcpy(slot_.data() + slotFill_, data.begin() + pos, n);
    slotFill_ += n;
    pos += n;
    if (slotFill_ == slot_.capacity()) flushSlot();
  }
  return kj::READY_NOW;
}

void TensorWriterImpl::flushSlot() {
  if (!slot_) return;
  ServerState& server = session_->server();
  server.staging.removeIdleHolder(*this);
  const uint64_t bytes = slotFill_;
  const uint64_t dst = flushed_;
  StagingLease lease = kj::mv(slot_);
  slot_ = StagingLease();
  slotFill_ = 0;
  flushed_ += bytes;
  if (bytes == 0) return;
  auto done = mapComputeErrors([&] {
    return server.staging.transfer(lease, [&](compute::Completion completion) {
      server.engine.enqueueUpload(session_->principal.name, lease.slot(), bytes, buffer_, dst, std::move(completion));
    });
  });
  server.addTask(done.catch_([status = status_, &log = server.log](kj::Exception&& e) {
    log.error("upload to the device failed: {}", e.getDescription().cStr());
    if (auto entry = status->entry.lock()) markFailed(*entry, e);
    status->failure = kj::mv(e);
  }));
}

kj::Promise<void> TensorWriterImpl::commit(CommitContext context) {
  auto guard = session_->enterCall("commit");
  if (committed_) kj::throwFatalException(failed("upload: commit called twice"));
  throwIfFailed();
  const uint64_t total = desc_.bytes();
  if (received_ != total) {
    kj::throwFatalException(failed("upload: " + desc_.str() + " holds " + std::to_string(total) + " bytes; got " +
                                   std::to_string(received_) + " before commit"));
  }
  flushSlot();
  committed_ = true;
  ServerState& server = session_->server();
  auto entry = server.registry.add(session_->principal.name, session_->id, desc_, kj::mv(buffer_));
  status_->entry = entry;
  server.log.debug("{} uploaded #{} ({})", session_->principal.name, entry->id, desc_.str());
  context.getResults().setTensor(TensorImpl::makeCap(session_, kj::mv(entry)));
  return kj::READY_NOW;
}

}  // namespace tensord::server
