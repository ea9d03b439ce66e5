#pragma once
// TensorWriterImpl: receives one upload. Bytes arrive in order through
// write() (a `-> stream` method, so the client is paced by flow control),
// are copied into a staging slot, and every full slot is handed to the device
// (engine.enqueueUpload) and returned to the pool when that copy completed.
// commit() flushes the partial slot, checks the byte count and yields the
// Tensor. Dropping the writer without commit frees the buffer.
//
// A client that writes part of a slot and then goes quiet keeps that slot
// only while nobody else needs one: between writes the writer is an idle
// holder, and the first acquire() that has to wait makes it hand the partial
// slot to the device (at its odd offset) and give it back. So each chunk is
// copied once, from the incoming message straight into the slot, and a
// stalled upload holds only its device buffer. (Gathering a slot's worth in
// host memory first would cost a second copy on every upload; a stall
// timeout would still hold the slot for the length of the timeout.)
//
// Threads: the event-loop thread only. Cap'n Proto delivers the calls of one
// streaming capability one at a time, in order.

#include <memory>

#include "compute/buffer.h"
#include "compute/dtype.h"
#include "protocol/tensord.capnp.h"
#include "server/server_state.h"
#include "server/staging_pool.h"

namespace tensord::server {

class TensorWriterImpl final : public proto::TensorWriter::Server, private IdleSlotHolder {
 public:
  TensorWriterImpl(std::shared_ptr<SessionState> session, compute::TensorDesc desc,
                   std::shared_ptr<compute::Buffer> buffer);
  ~TensorWriterImpl();

 protected:
  kj::Promise<void> write(WriteContext context) override;
  kj::Promise<void> commit(CommitContext context) override;

 private:
  // Outcome of the writes and device copies (which may finish after the
  // writer is gone): the first failure, reported by every later call.
  struct UploadStatus {
    kj::Maybe<kj::Exception> failure;
    std::weak_ptr<TensorEntry> entry;  // set by commit
  };

  kj::Promise<void> writeNow(WriteContext context);
  kj::Promise<void> copyIn(WriteContext context, uint64_t pos);
  void flushSlot();
  void releaseIdleSlot() override { flushSlot(); }
  void throwIfFailed() const;

  std::shared_ptr<SessionState> session_;
  compute::TensorDesc desc_;
  std::shared_ptr<compute::Buffer> buffer_;
  std::shared_ptr<UploadStatus> status_ = std::make_shared<UploadStatus>();
  uint64_t received_ = 0;  // bytes accepted by write()
  uint64_t flushed_ = 0;   // bytes handed to the device
  StagingLease slot_;      // the slot being filled, if any
  uint64_t slotFill_ = 0;
  bool committed_ = false;
};

}  // namespace tensord::server
