#include "compute/staging.h"

#include "compute/device.h"

namespace tensord::compute {
namespace {

vk::raii::Buffer makeBuffer(const Device& device, uint64_t bytes) {
  return vkCall("vkCreateBuffer (staging)", [&] {
    return vk::raii::Buffer(device.device(), {.size = bytes,
                                              .usage = vk::BufferUsageFlagBits::eTransferSrc |
                                                       vk::BufferUsageFlagBits::eTransferDst});
  });
}

vk::raii::DeviceMemory makeMemory(const Device& device, const vk::raii::Buffer& buffer) {
  auto req = buffer.getMemoryRequirements();
  // Host-cached makes downloads (CPU reads) fast; coherent spares flushes.
  uint32_t type = device.memoryType(req.memoryTypeBits,
                                    vk::MemoryPropertyFlagBits::eHostVisible | vk::MemoryPropertyFlagBits::eHostCoherent,
                                    vk::MemoryPropertyFlagBits::eHostCached);
  auto memory = vkCall("vkAllocateMemory (staging)", [&] {
    return vk::raii::DeviceMemory(device.device(), {.allocationSize = req.size, .memoryTypeIndex = type});
  });
  buffer.bindMemory(*memory, 0);
  return memory;
}

}  // namespace

StagingPool::StagingPool(const Device& device, uint64_t slotBytes, uint32_t slots)
    : slotBytes_(slotBytes),
      slotCount_(slots),
      buffer_(makeBuffer(device, slotBytes * slots)),
      memory_(makeMemory(device, buffer_)),
      mapped_(static_cast<std::byte*>(memory_.mapMemory(0, slotBytes * slots))) {
  for (uint32_t i = slots; i-- > 0;) freeSlots_.push_back(i);
}

std::optional<StagingSlot> StagingPool::tryAcquire() {
  std::lock_guard lock(mu_);
  if (freeSlots_.empty()) return std::nullopt;
  uint32_t index = freeSlots_.back();
  freeSlots_.pop_back();
  return StagingSlot{index, mapped_ + uint64_t(index) * slotBytes_, slotBytes_};
}

void StagingPool::release(const StagingSlot& slot) {
  std::lock_guard lock(mu_);
  freeSlots_.push_back(slot.index);
}

}  // namespace tensord::compute
