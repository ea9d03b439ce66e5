#pragma once
// CachingAllocator: device memory for tensors. Sizes are rounded up to size
// classes (256 B minimum, then four classes per power of two, so at most 25%
// slack); freed blocks are kept per class and reused. When the limit or the
// device runs out, the idle cache is dropped and the allocation retried once;
// after that the caller gets ComputeError(kOutOfMemory). Accounting is exact:
// live bytes are the logical sizes asked for, per owner and in total.
//
// Small tensors (classes up to kSlotMaxBytes) are slots of a chunk: one
// vkAllocateMemory cut into equal slots at multiples of 256 bytes (the
// largest minStorageBufferOffsetAlignment Vulkan allows), so many small
// tensors cost one device allocation. Larger tensors get one of their own.
//
// Stream-ordered reuse (see buffer.h): when the last lease of a Buffer goes,
// its block is free at once, even while queued work still pins the Buffer.
// Such a block is *ordered*: only work queued from now on may use it, which
// is every allocation through Engine::allocate (its work is queued later,
// and the queue orders it after the pinned work by memory). Memory needed
// while a batch is being recorded (Reuse::kIdleOnly: scratch) takes only
// *idle* blocks, which no Buffer refers to any more. An ordered block goes
// to the owner whose tensor it held before another owner gets it, so owners
// rarely wait on each other's queued work; under the limit anyone gets it.
// Vulkan objects are destroyed only with idle blocks, never under queued work.
//
// Placement::kHost makes the same allocator hand out host-visible memory
// (host-cached where the device has it) that kernels still reach through
// device addresses and the host through Buffer::hostData(): for data that
// crosses the network (collectives), which the host reads and writes
// without staging copies. The host's accesses are not ordered by the queue,
// so such memory is taken with Reuse::kIdleOnly.
//
// Thread-safe (one mutex). Must outlive every Buffer it handed out.

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "compute/buffer.h"
#include "compute/engine.h"
#include "compute/vk.h"

namespace tensord::compute {

class Device;
struct DeviceAllocation;

// The device memory behind one Buffer: a whole allocation or a slot of one.
struct Block {
  vk::Buffer buffer;     // the VkBuffer it lies in (owned by its DeviceAllocation)
  uint64_t offset = 0;   // where it starts in `buffer`
  uint64_t size = 0;     // bytes it spans (its size class, or its slot)
  uint64_t address = 0;  // device address of its first byte
  std::byte* host = nullptr;  // its first byte mapped, for Placement::kHost

  // Bookkeeping, guarded by the allocator's mutex.
  enum class State { kLeased, kOrdered, kIdle };
  DeviceAllocation* allocation = nullptr;
  State state = State::kIdle;
  uint32_t buffers = 0;  // Buffer objects over it: the leased one and ones queued work still pins
  std::string freedBy;   // owner of the tensor it held last
  std::multimap<uint64_t, Block*>::iterator freeAt;  // in idle_ or ordered_ while not leased
};

// One vkAllocateMemory with a VkBuffer over all of it, cut into blocks.
struct DeviceAllocation {
  vk::raii::Buffer buffer;
  vk::raii::DeviceMemory memory;
  uint64_t size = 0;  // bytes charged to reservedBytes
  uint64_t slot = 0;  // a chunk's slot size; 0: one block of its own
  std::vector<std::unique_ptr<Block>> blocks;
  uint32_t idle = 0;  // blocks in State::kIdle
  std::byte* mapped = nullptr;  // the whole memory mapped, for Placement::kHost
};

class CachingAllocator {
 public:
  // Which free blocks an allocation may take.
  enum class Reuse {
    kStreamOrdered,  // any free block: the buffer's work will be queued after this call
    kIdleOnly,       // only blocks no queued work refers to (memory used while recording)
  };

  // Classes up to this size are slots of chunks.
  static constexpr uint64_t kSlotMaxBytes = 256ull << 10;

  enum class Placement { kDevice, kHost };

  CachingAllocator(const Device& device, uint64_t limitBytes, Placement placement = Placement::kDevice);
  ~CachingAllocator();

  // A lease on device memory for `bytes`, charged to `owner`.
  std::shared_ptr<Buffer> allocate(uint64_t bytes, const std::string& owner, Reuse reuse = Reuse::kStreamOrdered);
  MemoryStats stats() const;
  uint64_t ownerBytes(const std::string& owner) const;

  static uint64_t sizeClass(uint64_t bytes);
  // Bytes of the block that serves `bytes`: the size class, rounded up to a
  // multiple of 256 where it is a chunk's slot. Where the class would pass
  // `maxAllocation` (the device's largest allocation; 0: no limit) and the
  // tensor itself fits, the block is the tensor's size rounded up to 64 KiB
  // instead: NVIDIA's limit is 4 GiB - 2 MiB, which the classes of a tensor
  // over 3.5 GiB overshoot.
  static uint64_t blockSize(uint64_t bytes, uint64_t maxAllocation = 0);
  // Device allocations held (chunks and whole blocks), for tests.
  size_t deviceAllocations() const;

 private:
  friend class Buffer;
  void retire(Buffer& buffer);  // its last lease is gone
  void forget(Block* block);    // a Buffer object is gone
  // A free block of `size`, or null. Ordered blocks only for kStreamOrdered,
  // and only those `owner` freed unless `anyOwner`.
  Block* takeLocked(uint64_t size, const std::string& owner, Reuse reuse, bool anyOwner);
  std::shared_ptr<Buffer> leaseLocked(Block* block, uint64_t bytes, const std::string& owner);  // returns the pin
  std::shared_ptr<Buffer> leaseOf(std::shared_ptr<Buffer> pin);  // wraps a pin into a lease; without mu_ held
  void makeIdleLocked(Block& block);
  std::unique_ptr<DeviceAllocation> createAllocation(uint64_t size, uint64_t slot);  // without mu_ held
  // Removes every memory whose blocks are all idle; the caller destroys
  // them after unlocking.
  std::vector<std::unique_ptr<DeviceAllocation>> dropCacheLocked();
  uint64_t chunkBytesLocked(uint64_t slot) const;

  const Device& device_;
  const uint64_t limitBytes_;
  const Placement placement_;
  const char* memoryName_;  // in errors: "device memory" or "host memory"
  uint32_t memoryType_;

  mutable std::mutex mu_;
  std::unordered_map<DeviceAllocation*, std::unique_ptr<DeviceAllocation>> allocations_;  // GUARDED_BY(mu_)
  std::multimap<uint64_t, Block*> idle_;                  // GUARDED_BY(mu_), free, by size
  std::multimap<uint64_t, Block*> ordered_;               // GUARDED_BY(mu_), free, by size
  std::map<uint64_t, uint32_t> chunks_;                   // GUARDED_BY(mu_), chunks per slot size
  std::unordered_map<std::string, uint64_t> ownerBytes_;  // GUARDED_BY(mu_)
  uint64_t liveBytes_ = 0;                                // GUARDED_BY(mu_)
  uint64_t reservedBytes_ = 0;                            // GUARDED_BY(mu_): memories held, and ones being created
  uint64_t creatingBytes_ = 0;                            // GUARDED_BY(mu_): part of reserved not yet created
  uint64_t leasedBytes_ = 0;                              // GUARDED_BY(mu_): sizes of leased blocks
};

}  // namespace tensord::compute
