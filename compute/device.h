#pragma once
// Device: the Vulkan instance, the chosen physical device, the logical device
// and its compute queue. Choice: config selector (index or name substring),
// else the first discrete GPU, else integrated, else virtual, else CPU
// (lavapipe). Immutable after construction; the queue is used only by the
// CommandStream's submit thread.

#include <array>
#include <cstdint>
#include <string>

#include "compute/engine.h"
#include "compute/vk.h"

namespace tensord::compute {

class Device {
 public:
  // `f32OnTensorCores`: DeviceFeatures::f32SplitBf16 where the device allows it.
  Device(const std::string& selector, spdlog::logger& log, bool f32OnTensorCores = true);

  const DeviceInfo& info() const { return info_; }
  const vk::raii::Device& device() const { return device_; }
  const vk::raii::PhysicalDevice& physical() const { return physical_; }
  const vk::raii::Queue& queue() const { return queue_; }
  uint32_t queueFamily() const { return queueFamily_; }
  const std::array<uint8_t, 16>& pipelineCacheUuid() const { return pipelineCacheUuid_; }
  const vk::PhysicalDeviceLimits& limits() const { return limits_; }

  // Index of a memory type allowed by `typeBits` with all of `required`,
  // preferring one that also has `preferred`. Throws if none.
  uint32_t memoryType(uint32_t typeBits, vk::MemoryPropertyFlags required,
                      vk::MemoryPropertyFlags preferred = {}) const;

 private:
  vk::raii::Context context_;
  vk::raii::Instance instance_;
  vk::raii::PhysicalDevice physical_;
  uint32_t queueFamily_ = 0;
  DeviceInfo info_;  // before device_: makeDevice fills in its features
  vk::raii::Device device_;
  vk::raii::Queue queue_;
  vk::PhysicalDeviceLimits limits_;
  vk::PhysicalDeviceMemoryProperties memory_;
  std::array<uint8_t, 16> pipelineCacheUuid_{};
};

}  // namespace tensord::compute
