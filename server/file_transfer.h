#pragma once
// Tensor bytes between files and device buffers, through the bounded staging
// pool, with the disk work on the FileWorker: the event loop only hands
// slots around and never waits for a disk.
//
// A transfer moves its ranges one staging-slot-sized piece at a time and
// holds at most two slots: while the device copies one piece, a worker reads
// (or writes) the next. So a multi-GiB file moves through the same bounded
// host memory as a client upload, and its progress is reported per piece.
//
// Threads: the event-loop thread. Files are shared with worker jobs and are
// released on a worker (closing a file may block too).

#include <kj/async.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "compute/dtype.h"
#include "format/safetensors.h"
#include "server/confined_files.h"
#include "server/registry.h"
#include "server/server_state.h"

namespace tensord::server {

// Bytes [fileOffset, fileOffset + bytes) of a file and the whole of a
// device buffer of that size.
struct FileRange {
  uint64_t fileOffset = 0;
  uint64_t bytes = 0;
  std::shared_ptr<compute::Buffer> buffer;
  std::shared_ptr<TensorEntry> entry;  // writes: the tensor read from (its device work must not have failed)
};

// Called on the loop with the bytes moved so far, after each piece.
using TransferProgress = std::function<void(uint64_t done)>;

// Fills each range's buffer from `file`. `requester` owns the device copies
// (the principal asking, or the daemon). Rejects with an error naming
// `display` when the file ends early or a read fails.
kj::Promise<void> readIntoBuffers(ServerState& server, std::shared_ptr<UniqueFd> file, std::string display,
                                  std::vector<FileRange> ranges, std::string requester, TransferProgress progress);

// Writes each range's buffer into `file` at its offset.
kj::Promise<void> writeFromBuffers(ServerState& server, std::shared_ptr<PendingFile> file,
                                   std::vector<FileRange> ranges, std::string requester, TransferProgress progress);

// The file's dtype as the device's and back (the two enums name the same set).
compute::DType fromFileDType(safetensors::DType dtype);
safetensors::DType toFileDType(compute::DType dtype);

// Drops `file` on a worker thread, so that closing it never blocks the loop.
template <typename File>
void releaseOnWorker(ServerState& server, std::shared_ptr<File>& file) {
  if (file) server.files.detach([f = std::move(file)]() mutable { f.reset(); });
}

}  // namespace tensord::server
