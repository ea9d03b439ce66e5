#include "compute/allocator.h"

#include <bit>

#include "compute/device.h"

namespace tensord::compute {

Buffer::Buffer(CachingAllocator& allocator, Block* block, uint64_t bytes, std::string owner)
    : allocator_(allocator), block_(block), bytes_(bytes), owner_(std::move(owner)) {}

Buffer::~Buffer() { allocator_.release(block_, bytes_, owner_); }

uint64_t Buffer::capacity() const { return block_->size; }
uint64_t Buffer::deviceAddress() const { return block_->address; }

namespace {

constexpr auto kUsage = vk::BufferUsageFlagBits::eStorageBuffer | vk::BufferUsageFlagBits::eTransferSrc |
                        vk::BufferUsageFlagBits::eTransferDst | vk::BufferUsageFlagBits::eShaderDeviceAddress;

std::string mib(uint64_t bytes) { return std::to_string(bytes) + " bytes (" + std::to_string(bytes >> 20) + " MiB)"; }

}  // namespace

uint64_t CachingAllocator::sizeClass(uint64_t bytes) {
  if (bytes <= 256) return 256;
  // Four classes per power of two: 2^k * {1, 1.25, 1.5, 1.75}.
  uint64_t pow = std::bit_floor(bytes - 1);
  uint64_t step = std::max<uint64_t>(pow / 4, 1);
  return (bytes + step - 1) / step * step;
}

CachingAllocator::CachingAllocator(const Device& device, uint64_t limitBytes)
    : device_(device), limitBytes_(limitBytes ? limitBytes : device.info().memoryBytes) {
  // Probe the memory type once with a small buffer.
  vk::raii::Buffer probe(device.device(), {.size = 256, .usage = kUsage});
  memoryType_ = device.memoryType(probe.getMemoryRequirements().memoryTypeBits,
                                  vk::MemoryPropertyFlagBits::eDeviceLocal);
}

CachingAllocator::~CachingAllocator() = default;

std::unique_ptr<Block> CachingAllocator::createBlock(uint64_t size) {
  const auto& dev = device_.device();
  vk::raii::Buffer buffer = vkCall("vkCreateBuffer", [&] { return vk::raii::Buffer(dev, {.size = size, .usage = kUsage}); });
  auto req = buffer.getMemoryRequirements();
  vk::MemoryAllocateFlagsInfo flags{.flags = vk::MemoryAllocateFlagBits::eDeviceAddress};
  vk::raii::DeviceMemory memory = vkCall("vkAllocateMemory", [&] {
    return vk::raii::DeviceMemory(dev, {.pNext = &flags, .allocationSize = req.size, .memoryTypeIndex = memoryType_});
  });
  buffer.bindMemory(*memory, 0);
  uint64_t address = dev.getBufferAddress({.buffer = *buffer});
  return std::make_unique<Block>(Block{std::move(buffer), std::move(memory), size, address});
}

void CachingAllocator::dropCacheLocked() {
  free_.clear();
  reservedBytes_ -= cachedBytes_;
  cachedBytes_ = 0;
}

std::shared_ptr<Buffer> CachingAllocator::allocate(uint64_t bytes, const std::string& owner) {
  const uint64_t size = sizeClass(bytes);
  const uint64_t maxAlloc = device_.info().maxAllocationBytes;
  if (maxAlloc && size > maxAlloc) {
    throw ComputeError(ComputeError::Kind::kOutOfMemory, "tensor of " + mib(bytes) +
                                                              " exceeds the device's largest allocation, " + mib(maxAlloc));
  }
  std::unique_ptr<Block> fresh;
  for (int attempt = 0;; ++attempt) {
    {
      std::lock_guard lock(mu_);
      if (!fresh) {
        if (auto it = free_.find(size); it != free_.end()) {
          fresh = std::move(it->second);
          free_.erase(it);
          cachedBytes_ -= size;
          reservedBytes_ -= size;  // re-added below
        } else if (reservedBytes_ + size > limitBytes_) {
          dropCacheLocked();
          if (reservedBytes_ + size > limitBytes_) {
            throw ComputeError(ComputeError::Kind::kOutOfMemory,
                               "out of device memory: a tensor of " + mib(bytes) + " does not fit; " +
                                   mib(liveBytes_) + " in use of a " + mib(limitBytes_) + " limit");
          }
        }
      }
      if (fresh) {
        Block* raw = fresh.get();
        used_.emplace(raw, std::move(fresh));
        reservedBytes_ += size;
        liveBytes_ += bytes;
        ownerBytes_[owner] += bytes;
        return std::make_shared<Buffer>(*this, raw, bytes, owner);
      }
    }
    try {
      fresh = createBlock(size);
    } catch (const ComputeError& e) {
      if (e.kind() != ComputeError::Kind::kOutOfMemory || attempt > 0) {
        if (e.kind() == ComputeError::Kind::kOutOfMemory) {
          throw ComputeError(ComputeError::Kind::kOutOfMemory,
                             "out of device memory: the device could not allocate " + mib(bytes));
        }
        throw;
      }
      std::lock_guard lock(mu_);
      dropCacheLocked();
    }
  }
}

void CachingAllocator::release(Block* block, uint64_t bytes, const std::string& owner) {
  std::lock_guard lock(mu_);
  auto it = used_.find(block);
  auto node = std::move(it->second);
  used_.erase(it);
  liveBytes_ -= bytes;
  if (auto o = ownerBytes_.find(owner); o != ownerBytes_.end() && (o->second -= bytes) == 0) ownerBytes_.erase(o);
  cachedBytes_ += node->size;
  free_.emplace(node->size, std::move(node));
}

MemoryStats CachingAllocator::stats() const {
  std::lock_guard lock(mu_);
  return {.liveBytes = liveBytes_, .reservedBytes = reservedBytes_, .cachedBytes = cachedBytes_,
          .limitBytes = limitBytes_};
}

uint64_t CachingAllocator::ownerBytes(const std::string& owner) const {
  std::lock_guard lock(mu_);
  auto it = ownerBytes_.find(owner);
  return it == ownerBytes_.end() ? 0 : it->second;
}

}  // namespace tensord::compute
