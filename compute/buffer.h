#pragma once
// A block of device memory holding one tensor. Buffers come from the
// CachingAllocator, which hands out *leases*: shared_ptrs whose last copy
// going away (on any thread) returns the memory to the allocator.
//
// Queued device work does not hold a lease. It holds a *pin* (pin()): a
// reference that keeps this object and the memory behind it alive until the
// work completed, but not the lease. The device runs work from one in-order
// queue, and the queue orders work by the memory it touches (FairQueue keys
// its hazards by Block), so once the last lease is gone the memory may serve
// a tensor allocated later at once: that tensor's work is queued after, and
// runs after, the work that still pins the old one (stream-ordered reuse).
//
// Rule for code that queues work: take pins from leases and keep a lease
// until the job is queued (a lease dropped earlier could let the memory be
// handed out to work that gets queued ahead of this job).

#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <string>

namespace tensord::compute {

class CachingAllocator;
struct Block;

class Buffer : public std::enable_shared_from_this<Buffer> {
 public:
  // Only the CachingAllocator makes Buffers.
  Buffer(CachingAllocator& allocator, Block* block, uint64_t bytes, std::string owner);
  ~Buffer();
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  uint64_t bytes() const { return bytes_; }  // logical size asked for
  uint64_t capacity() const;                 // size of the block behind it (>= 256, a multiple of 64)
  uint64_t deviceAddress() const;            // for shaders (buffer_reference)
  // Where the block starts in its VkBuffer, block().buffer: small tensors
  // share one, so a copy or a descriptor over this tensor is
  // (block().buffer, offset(), bytes()), never offset 0.
  uint64_t offset() const;
  // The memory as the host sees it: only for buffers from Engine::allocateHost
  // (null for device memory).
  std::byte* hostData() const;
  const std::string& owner() const { return owner_; }
  Block& block() const { return *block_; }

  // A reference for queued device work: keeps this Buffer and its memory
  // alive, but not the lease (see above).
  std::shared_ptr<Buffer> pin() { return shared_from_this(); }

  // The error of the device work that last wrote this buffer, if it failed.
  // Read and written by the CommandStream's completion thread only.
  std::exception_ptr failure;

 private:
  friend class CachingAllocator;
  CachingAllocator& allocator_;  // must outlive every Buffer
  Block* block_;
  uint64_t bytes_;
  std::string owner_;
};

}  // namespace tensord::compute
