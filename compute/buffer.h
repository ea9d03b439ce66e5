#pragma once
// A block of device memory holding one tensor. Buffers come from the
// CachingAllocator and go back to it when the last shared_ptr drops, which
// may happen on any thread.

#include <cstdint>
#include <exception>
#include <string>

namespace tensord::compute {

class CachingAllocator;
struct Block;

class Buffer {
 public:
  Buffer(CachingAllocator& allocator, Block* block, uint64_t bytes, std::string owner);
  ~Buffer();
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  uint64_t bytes() const { return bytes_; }          // logical size asked for
  uint64_t capacity() const;                         // size of the block behind it
  uint64_t deviceAddress() const;                    // for shaders (buffer_reference)
  const std::string& owner() const { return owner_; }
  Block& block() const { return *block_; }

  // The error of the device work that last wrote this buffer, if it failed.
  // Read and written by the CommandStream's completion thread only.
  std::exception_ptr failure;

 private:
  CachingAllocator& allocator_;  // must outlive every Buffer
  Block* block_;
  uint64_t bytes_;
  std::string owner_;
};

}  // namespace tensord::compute
