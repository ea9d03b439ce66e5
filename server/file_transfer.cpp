#include "server/file_transfer.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

#include "server/tensor_impl.h"
#include "server/wire.h"

namespace tensord::server {
namespace {

// Positioned read of exactly `n` bytes (worker threads).
void readExactly(int fd, std::byte* out, uint64_t n, uint64_t offset, const std::string& display) {
  while (n > 0) {
    const ssize_t got = ::pread(fd, out, n, off_t(offset));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) throw std::runtime_error("cannot read " + display + ": " + std::strerror(errno));
    if (got == 0)
      throw std::runtime_error(display + " ended at byte " + std::to_string(offset) + " (changed while it was read?)");
    out += got;
    n -= uint64_t(got);
    offset += uint64_t(got);
  }
}

// Walks the ranges one piece (at most a slot) at a time, skipping empty ones.
class PieceCursor {
 public:
  struct Piece {
    size_t range = 0;
    uint64_t offset = 0;  // within the range
    uint64_t bytes = 0;
  };

  explicit PieceCursor(const std::vector<FileRange>& ranges) : ranges_(ranges) { skipEmpty(); }
  bool done() const { return range_ == ranges_.size(); }
  Piece next(uint64_t capacity) {
    Piece piece{range_, offset_, std::min(capacity, ranges_[range_].bytes - offset_)};
    offset_ += piece.bytes;
    if (offset_ == ranges_[range_].bytes) {
      ++range_;
      offset_ = 0;
      skipEmpty();
    }
    return piece;
  }

 private:
  void skipEmpty() {
    while (range_ < ranges_.size() && ranges_[range_].bytes == 0) ++range_;
  }
  const std::vector<FileRange>& ranges_;
  size_t range_ = 0;
  uint64_t offset_ = 0;
};

// State shared by both directions.
class Transfer {
 protected:
  Transfer(ServerState& server, std::vector<FileRange> ranges, std::string requester, TransferProgress progress)
      : server_(server),
        ranges_(std::move(ranges)),
        cursor_(ranges_),
        requester_(std::move(requester)),
        progress_(std::move(progress)) {}

  // A worker job that uses the slot's memory: the slot stays leased until
  // the job is over, even when this transfer is abandoned first.
  kj::Promise<void> onWorker(const StagingLease& lease, kj::Promise<void> job) {
    return keepUntilSettled(kj::mv(job), lease, [this](kj::Promise<void> p) { server_.addTask(kj::mv(p)); });
  }

  void moved(uint64_t bytes) {
    done_ += bytes;
    if (progress_) progress_(done_);
  }

  ServerState& server_;
  std::vector<FileRange> ranges_;
  PieceCursor cursor_;
  const std::string requester_;
  TransferProgress progress_;
  uint64_t done_ = 0;
  // The previous piece's second half (device copy or disk write): at most it
  // and the piece being prepared hold a slot.
  kj::Promise<void> previous_ = kj::READY_NOW;
};

class ReadTransfer final : public Transfer {
 public:
  ReadTransfer(ServerState& server, std::shared_ptr<UniqueFd> file, std::string display, std::vector<FileRange> ranges,
               std::string requester, TransferProgress progress)
      : Transfer(server, std::move(ranges), std::move(requester), std::move(progress)),
        file_(std::move(file)),
        display_(std::move(display)) {}
  ~ReadTransfer() { releaseOnWorker(server_, file_); }

  // Piece by piece: a worker reads it from disk into a slot while the device
  // takes in the previous one; then the device copies it into its buffer.
  kj::Promise<void> next() {
    if (cursor_.done()) return kj::mv(previous_);
    return server_.staging.acquire().then([this](StagingLease lease) {
      const PieceCursor::Piece piece = cursor_.next(lease.capacity());
      const FileRange& range = ranges_[piece.range];
      auto read = server_.files.run([file = file_, data = lease.data(), bytes = piece.bytes,
                                     at = range.fileOffset + piece.offset,
                                     display = display_] { readExactly(file->get(), data, bytes, at, display); });
      return onWorker(lease, kj::mv(read)).then([this, lease = kj::mv(lease), piece]() mutable {
        return kj::mv(previous_).then([this, lease = kj::mv(lease), piece]() {
          previous_ = upload(lease, piece);
          return next();
        });
      });
    });
  }

 private:
  kj::Promise<void> upload(const StagingLease& lease, PieceCursor::Piece piece) {
    const FileRange& range = ranges_[piece.range];
    auto copied = mapComputeErrors([&] {
      return server_.staging.transfer(lease, [&](compute::Completion done) {
        server_.engine.enqueueUpload(requester_, lease.slot(), piece.bytes, range.buffer, piece.offset,
                                     std::move(done));
      });
    });
    return copied.then([this, bytes = piece.bytes]() { moved(bytes); }).eagerlyEvaluate(nullptr);
  }

  std::shared_ptr<UniqueFd> file_;
  const std::string display_;
};

class WriteTransfer final : public Transfer {
 public:
  WriteTransfer(ServerState& server, std::shared_ptr<PendingFile> file, std::vector<FileRange> ranges,
                std::string requester, TransferProgress progress)
      : Transfer(server, std::move(ranges), std::move(requester), std::move(progress)), file_(std::move(file)) {}
  ~WriteTransfer() { releaseOnWorker(server_, file_); }

  // Piece by piece: the device copies it into a slot while a worker writes
  // the previous one to disk; then a worker writes it.
  kj::Promise<void> next() {
    if (cursor_.done()) return kj::mv(previous_);
    return server_.staging.acquire().then([this](StagingLease lease) {
      const PieceCursor::Piece piece = cursor_.next(lease.capacity());
      const FileRange& range = ranges_[piece.range];
      auto copied = mapComputeErrors([&] {
        return server_.staging.transfer(lease, [&](compute::Completion done) {
          server_.engine.enqueueDownload(requester_, range.buffer, piece.offset, piece.bytes, lease.slot(),
                                         std::move(done));
        });
      });
      return copied.then([this, lease = kj::mv(lease), piece]() mutable {
        if (const auto& entry = ranges_[piece.range].entry) checkNotFailed(*entry);
        return kj::mv(previous_).then([this, lease = kj::mv(lease), piece]() {
          previous_ = write(lease, piece);
          return next();
        });
      });
    });
  }

 private:
  kj::Promise<void> write(const StagingLease& lease, PieceCursor::Piece piece) {
    auto job =
        server_.files.run([file = file_, data = lease.data(), bytes = piece.bytes,
                           at = ranges_[piece.range].fileOffset + piece.offset] { file->writeAt(data, bytes, at); });
    return onWorker(lease, kj::mv(job)).then([this, bytes = piece.bytes]() { moved(bytes); }).eagerlyEvaluate(nullptr);
  }

  std::shared_ptr<PendingFile> file_;
};

}  // namespace

compute::DType fromFileDType(safetensors::DType dtype) {
  switch (dtype) {
    case safetensors::DType::F32:
      return compute::DType::F32;
    case safetensors::DType::F16:
      return compute::DType::F16;
    case safetensors::DType::BF16:
      return compute::DType::BF16;
    case safetensors::DType::I32:
      return compute::DType::I32;
    case safetensors::DType::I64:
      return compute::DType::I64;
    case safetensors::DType::U8:
      return compute::DType::U8;
    case safetensors::DType::Bool:
      return compute::DType::Bool;
  }
  throw std::logic_error("unknown safetensors dtype");
}

safetensors::DType toFileDType(compute::DType dtype) {
  switch (dtype) {
    case compute::DType::F32:
      return safetensors::DType::F32;
    case compute::DType::F16:
      return safetensors::DType::F16;
    case compute::DType::BF16:
      return safetensors::DType::BF16;
    case compute::DType::I32:
      return safetensors::DType::I32;
    case compute::DType::I64:
      return safetensors::DType::I64;
    case compute::DType::U8:
      return safetensors::DType::U8;
    case compute::DType::Bool:
      return safetensors::DType::Bool;
  }
  throw std::logic_error("unknown dtype");
}

kj::Promise<void> readIntoBuffers(ServerState& server, std::shared_ptr<UniqueFd> file, std::string display,
                                  std::vector<FileRange> ranges, std::string requester, TransferProgress progress) {
  auto transfer = kj::heap<ReadTransfer>(server, std::move(file), std::move(display), std::move(ranges),
                                         std::move(requester), std::move(progress));
  auto promise = transfer->next();
  return promise.attach(kj::mv(transfer));
}

kj::Promise<void> writeFromBuffers(ServerState& server, std::shared_ptr<PendingFile> file,
                                   std::vector<FileRange> ranges, std::string requester, TransferProgress progress) {
  auto transfer =
      kj::heap<WriteTransfer>(server, std::move(file), std::move(ranges), std::move(requester), std::move(progress));
  auto promise = transfer->next();
  return promise.attach(kj::mv(transfer));
}

}  // namespace tensord::server
