#include "compute/allocator.h"

#include <algorithm>
#include <bit>

#include "compute/device.h"

namespace tensord::compute {

Buffer::Buffer(CachingAllocator& allocator, Block* block, uint64_t bytes, std::string owner)
    : allocator_(allocator), block_(block), bytes_(bytes), owner_(std::move(owner)) {}

Buffer::~Buffer() { allocator_.forget(block_); }

uint64_t Buffer::capacity() const { return block_->size; }
uint64_t Buffer::deviceAddress() const { return block_->address; }
uint64_t Buffer::offset() const { return block_->offset; }
std::byte* Buffer::hostData() const { return block_->host; }

namespace {

constexpr auto kUsage = vk::BufferUsageFlagBits::eStorageBuffer | vk::BufferUsageFlagBits::eTransferSrc |
                        vk::BufferUsageFlagBits::eTransferDst | vk::BufferUsageFlagBits::eShaderDeviceAddress;

// Slots of a chunk start at multiples of this (Vulkan's largest
// minStorageBufferOffsetAlignment; kernels need 16 for vector loads).
constexpr uint64_t kSlotAlign = 256;
// A class's first chunk holds at least kMinSlots slots and kMinChunkBytes;
// each further chunk of the class is twice the size, up to kMaxChunkBytes.
constexpr uint64_t kMinSlots = 16;
constexpr uint64_t kMinChunkBytes = 64ull << 10;
constexpr uint64_t kMaxChunkBytes = 4ull << 20;

std::string mib(uint64_t bytes) { return std::to_string(bytes) + " bytes (" + std::to_string(bytes >> 20) + " MiB)"; }

}  // namespace

uint64_t CachingAllocator::sizeClass(uint64_t bytes) {
  if (bytes <= 256) return 256;
  // Four classes per power of two: 2^k * {1, 1.25, 1.5, 1.75}.
  uint64_t pow = std::bit_floor(bytes - 1);
  uint64_t step = std::max<uint64_t>(pow / 4, 1);
  return (bytes + step - 1) / step * step;
}

uint64_t CachingAllocator::blockSize(uint64_t bytes, uint64_t maxAllocation) {
  const uint64_t c = sizeClass(bytes);
  if (c <= kSlotMaxBytes) return (c + kSlotAlign - 1) / kSlotAlign * kSlotAlign;
  constexpr uint64_t kOwnAlign = 64 << 10;
  const uint64_t own = (bytes + kOwnAlign - 1) / kOwnAlign * kOwnAlign;
  if (maxAllocation != 0 && c > maxAllocation && own <= maxAllocation) return own;
  return c;
}

CachingAllocator::CachingAllocator(const Device& device, uint64_t limitBytes, Placement placement)
    : device_(device),
      limitBytes_(limitBytes ? limitBytes : device.info().memoryBytes),
      placement_(placement),
      memoryName_(placement == Placement::kHost ? "host memory" : "device memory") {
  // Probe the memory type once with a small buffer.
  vk::raii::Buffer probe(device.device(), {.size = 256, .usage = kUsage});
  const uint32_t types = probe.getMemoryRequirements().memoryTypeBits;
  memoryType_ = placement == Placement::kHost
                    ? device.memoryType(types,
                                        vk::MemoryPropertyFlagBits::eHostVisible |
                                            vk::MemoryPropertyFlagBits::eHostCoherent,
                                        vk::MemoryPropertyFlagBits::eHostCached)
                    : device.memoryType(types, vk::MemoryPropertyFlagBits::eDeviceLocal);
}

CachingAllocator::~CachingAllocator() = default;

std::unique_ptr<DeviceAllocation> CachingAllocator::createAllocation(uint64_t size, uint64_t slot) {
  const auto& dev = device_.device();
  vk::raii::Buffer buffer =
      vkCall("vkCreateBuffer", [&] { return vk::raii::Buffer(dev, {.size = size, .usage = kUsage}); });
  auto req = buffer.getMemoryRequirements();
  vk::MemoryAllocateFlagsInfo flags{.flags = vk::MemoryAllocateFlagBits::eDeviceAddress};
  vk::raii::DeviceMemory memory = vkCall("vkAllocateMemory", [&] {
    return vk::raii::DeviceMemory(dev, {.pNext = &flags, .allocationSize = req.size, .memoryTypeIndex = memoryType_});
  });
  buffer.bindMemory(*memory, 0);
  const uint64_t address = dev.getBufferAddress({.buffer = *buffer});
  std::byte* mapped = nullptr;
  if (placement_ == Placement::kHost) {
    mapped = static_cast<std::byte*>(vkCall("vkMapMemory", [&] { return memory.mapMemory(0, VK_WHOLE_SIZE); }));
  }
  auto m = std::make_unique<DeviceAllocation>(
      DeviceAllocation{std::move(buffer), std::move(memory), size, slot, {}, 0, mapped});
  const uint64_t blockBytes = slot ? slot : size;
  for (uint64_t offset = 0; offset + blockBytes <= size; offset += blockBytes) {
    m->blocks.push_back(std::make_unique<Block>(Block{.buffer = *m->buffer,
                                                      .offset = offset,
                                                      .size = blockBytes,
                                                      .address = address + offset,
                                                      .host = mapped ? mapped + offset : nullptr,
                                                      .allocation = m.get()}));
  }
  return m;
}

uint64_t CachingAllocator::chunkBytesLocked(uint64_t slot) const {
  auto it = chunks_.find(slot);
  const uint32_t held = it == chunks_.end() ? 0 : it->second;
  uint64_t bytes = std::max(kMinChunkBytes, slot * kMinSlots) << std::min<uint32_t>(held, 8);
  bytes = std::max(std::min(bytes, kMaxChunkBytes), slot * kMinSlots);
  return bytes / slot * slot;
}

void CachingAllocator::makeIdleLocked(Block& block) {
  block.state = Block::State::kIdle;
  block.freeAt = idle_.emplace(block.size, &block);
  ++block.allocation->idle;
}

Block* CachingAllocator::takeLocked(uint64_t size, const std::string& owner, Reuse reuse, bool anyOwner) {
  if (auto it = idle_.find(size); it != idle_.end()) {
    Block* b = it->second;
    idle_.erase(it);
    --b->allocation->idle;
    return b;
  }
  if (reuse != Reuse::kStreamOrdered) return nullptr;
  auto [first, last] = ordered_.equal_range(size);
  for (auto it = first; it != last; ++it) {
    Block* b = it->second;
    if (anyOwner || b->freedBy == owner) {
      ordered_.erase(it);
      return b;
    }
  }
  return nullptr;
}

std::shared_ptr<Buffer> CachingAllocator::leaseLocked(Block* block, uint64_t bytes, const std::string& owner) {
  auto pin = std::make_shared<Buffer>(*this, block, bytes, owner);
  block->state = Block::State::kLeased;
  ++block->buffers;
  leasedBytes_ += block->size;
  liveBytes_ += bytes;
  ownerBytes_[owner] += bytes;
  return pin;
}

std::shared_ptr<Buffer> CachingAllocator::leaseOf(std::shared_ptr<Buffer> pin) {
  Buffer* raw = pin.get();
  // The lease's own control block: its last copy retires the block, then
  // lets go of the pin it holds.
  return std::shared_ptr<Buffer>(raw, [this, pin = std::move(pin)](Buffer* b) mutable {
    retire(*b);
    pin.reset();
  });
}

std::vector<std::unique_ptr<DeviceAllocation>> CachingAllocator::dropCacheLocked() {
  std::vector<std::unique_ptr<DeviceAllocation>> dropped;
  for (auto it = allocations_.begin(); it != allocations_.end();) {
    DeviceAllocation& m = *it->second;
    if (m.idle != m.blocks.size()) {
      ++it;
      continue;
    }
    for (auto& b : m.blocks) idle_.erase(b->freeAt);
    reservedBytes_ -= m.size;
    if (m.slot != 0 && --chunks_[m.slot] == 0) chunks_.erase(m.slot);
    dropped.push_back(std::move(it->second));
    it = allocations_.erase(it);
  }
  return dropped;
}

std::shared_ptr<Buffer> CachingAllocator::allocate(uint64_t bytes, const std::string& owner, Reuse reuse) {
  const uint64_t maxAlloc = device_.info().maxAllocationBytes;
  const uint64_t size = blockSize(bytes, maxAlloc);
  if (maxAlloc && size > maxAlloc) {
    throw ComputeError(ComputeError::Kind::kOutOfMemory,
                       "tensor of " + mib(bytes) + " exceeds the device's largest allocation, " + mib(maxAlloc));
  }
  for (int attempt = 0;; ++attempt) {
    std::vector<std::unique_ptr<DeviceAllocation>> dropped;  // destroyed after the lock
    std::shared_ptr<Buffer> pin;
    uint64_t want = 0, slot = 0;
    {
      std::lock_guard lock(mu_);
      if (Block* b = takeLocked(size, owner, reuse, false)) {
        pin = leaseLocked(b, bytes, owner);
      } else {
        slot = size <= kSlotMaxBytes ? size : 0;
        want = slot ? chunkBytesLocked(slot) : size;
        if (reservedBytes_ + want > limitBytes_) {
          // Anyone's ordered block before giving up cached memory.
          if (Block* b = takeLocked(size, owner, reuse, true)) {
            pin = leaseLocked(b, bytes, owner);
          } else {
            dropped = dropCacheLocked();
            if (slot && reservedBytes_ + want > limitBytes_) slot = 0, want = size;  // a block of its own fits better
            if (reservedBytes_ + want > limitBytes_) {
                      throw ComputeError(ComputeError::Kind::kOutOfMemory,
                                 std::string("out of ") + memoryName_ + ": a tensor of " + mib(bytes) +
                                     " does not fit; " + mib(liveBytes_) + " in use of a " + mib(limitBytes_) +
                                     " limit");
            }
          }
        }
        if (!pin) {
          reservedBytes_ += want;  // held from now, so racing allocations respect the limit
          creatingBytes_ += want;
        }
      }
    }
    dropped.clear();
    if (pin) return leaseOf(std::move(pin));

    std::unique_ptr<DeviceAllocation> fresh;
    try {
      fresh = createAllocation(want, slot);
    } catch (const ComputeError& e) {
      std::lock_guard lock(mu_);
      reservedBytes_ -= want;
      creatingBytes_ -= want;
      if (e.kind() != ComputeError::Kind::kOutOfMemory || attempt > 0) {
        if (e.kind() == ComputeError::Kind::kOutOfMemory) {
          throw ComputeError(ComputeError::Kind::kOutOfMemory,
                             std::string("out of ") + memoryName_ + ": the device could not allocate " + mib(bytes));
        }
        throw;
      }
      dropped = dropCacheLocked();
      continue;
    }
    {
      std::lock_guard lock(mu_);
      creatingBytes_ -= want;
      DeviceAllocation* m = fresh.get();
      allocations_.emplace(m, std::move(fresh));
      if (slot) ++chunks_[slot];
      for (size_t i = 1; i < m->blocks.size(); ++i) makeIdleLocked(*m->blocks[i]);
      pin = leaseLocked(m->blocks[0].get(), bytes, owner);
    }
    return leaseOf(std::move(pin));
  }
}

void CachingAllocator::retire(Buffer& buffer) {
  std::lock_guard lock(mu_);
  Block& b = *buffer.block_;
  liveBytes_ -= buffer.bytes_;
  leasedBytes_ -= b.size;
  if (auto o = ownerBytes_.find(buffer.owner_); o != ownerBytes_.end() && (o->second -= buffer.bytes_) == 0) {
    ownerBytes_.erase(o);
  }
  // The lease's pin is still alive (b.buffers >= 1): ordered until the last
  // Buffer over the block is gone.
  b.state = Block::State::kOrdered;
  b.freedBy = buffer.owner_;
  b.freeAt = ordered_.emplace(b.size, &b);
}

void CachingAllocator::forget(Block* block) {
  std::lock_guard lock(mu_);
  if (--block->buffers == 0 && block->state == Block::State::kOrdered) {
    ordered_.erase(block->freeAt);
    makeIdleLocked(*block);
  }
}

MemoryStats CachingAllocator::stats() const {
  std::lock_guard lock(mu_);
  return {.liveBytes = liveBytes_,
          .reservedBytes = reservedBytes_,
          .cachedBytes = reservedBytes_ - creatingBytes_ - leasedBytes_,
          .limitBytes = limitBytes_};
}

uint64_t CachingAllocator::ownerBytes(const std::string& owner) const {
  std::lock_guard lock(mu_);
  auto it = ownerBytes_.find(owner);
  return it == ownerBytes_.end() ? 0 : it->second;
}

size_t CachingAllocator::deviceAllocations() const {
  std::lock_guard lock(mu_);
  return allocations_.size();
}

}  // namespace tensord::compute
