#pragma once
// CachingAllocator: device memory for tensors. Sizes are rounded up to size
// classes (256 B minimum, then four classes per power of two, so at most 25%
// slack); freed blocks are kept per class and reused. When the limit or the
// device runs out, the cache is dropped and the allocation retried once;
// after that the caller gets ComputeError(kOutOfMemory). Accounting is exact:
// live bytes are the logical sizes asked for, per owner and in total.
//
// Thread-safe (one mutex). Must outlive every Buffer it handed out.

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "compute/buffer.h"
#include "compute/engine.h"
#include "compute/vk.h"

namespace tensord::compute {

class Device;

struct Block {
  vk::raii::Buffer buffer;
  vk::raii::DeviceMemory memory;
  uint64_t size;
  uint64_t address;  // buffer device address
};

class CachingAllocator {
 public:
  CachingAllocator(const Device& device, uint64_t limitBytes);
  ~CachingAllocator();

  std::shared_ptr<Buffer> allocate(uint64_t bytes, const std::string& owner);
  MemoryStats stats() const;
  uint64_t ownerBytes(const std::string& owner) const;

  static uint64_t sizeClass(uint64_t bytes);

 private:
  friend class Buffer;
  void release(Block* block, uint64_t bytes, const std::string& owner);
  std::unique_ptr<Block> createBlock(uint64_t size);  // called without mu_ held
  void dropCacheLocked();

  const Device& device_;
  const uint64_t limitBytes_;
  uint32_t memoryType_;

  mutable std::mutex mu_;
  std::multimap<uint64_t, std::unique_ptr<Block>> free_;      // GUARDED_BY(mu_), by size
  std::unordered_map<Block*, std::unique_ptr<Block>> used_;  // GUARDED_BY(mu_)
  std::unordered_map<std::string, uint64_t> ownerBytes_;     // GUARDED_BY(mu_)
  uint64_t liveBytes_ = 0;                                    // GUARDED_BY(mu_)
  uint64_t reservedBytes_ = 0;                                // GUARDED_BY(mu_), used + cached
  uint64_t cachedBytes_ = 0;                                  // GUARDED_BY(mu_)
};

}  // namespace tensord::compute
