#pragma once
// StagingPool: one persistently mapped host-visible buffer cut into a fixed
// number of equal slots, so transfers of any size use bounded host memory.
// Thread-safe.

#include <cstdint>
#include <mutex>
#include <optional>
#include <vector>

#include "compute/engine.h"
#include "compute/vk.h"

namespace tensord::compute {

class Device;

class StagingPool {
 public:
  StagingPool(const Device& device, uint64_t slotBytes, uint32_t slots);

  std::optional<StagingSlot> tryAcquire();
  void release(const StagingSlot& slot);

  uint64_t slotBytes() const { return slotBytes_; }
  uint32_t slotCount() const { return slotCount_; }
  vk::Buffer buffer() const { return *buffer_; }
  uint64_t offsetOf(const StagingSlot& slot) const { return uint64_t(slot.index) * slotBytes_; }

 private:
  uint64_t slotBytes_;
  uint32_t slotCount_;
  vk::raii::Buffer buffer_;
  vk::raii::DeviceMemory memory_;
  std::byte* mapped_;

  std::mutex mu_;
  std::vector<uint32_t> freeSlots_;  // GUARDED_BY(mu_)
};

}  // namespace tensord::compute
