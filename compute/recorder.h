#pragma once
// What a kernel template sees while its op is being recorded into a command
// buffer: a way to dispatch a compute kernel, plus the per-batch resources a
// kernel may need. Kernels take every operand as a buffer device address in
// their push constants (GL_EXT_buffer_reference), so there are no descriptor
// sets and no storage-range limit on tensor size.

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

struct VkCommandBuffer_T;  // Vulkan's handle type, as vulkan_core.h declares it

namespace tensord::compute {

class Buffer;
struct DeviceFeatures;

// GLSL source of one compute kernel. Identity is the object: templates keep
// their sources (see KernelVariants) for the lifetime of the op table.
struct KernelSource {
  std::string name;
  std::string glsl;
};

constexpr uint32_t kMaxPushBytes = 128;  // guaranteed minimum of every device

// Turns the error words a kernel wrote into a message for the caller.
using DeviceErrorDescriber = std::function<std::string(const uint32_t* words)>;

class Recorder {
 public:
  virtual ~Recorder() = default;
  // Dispatches `source` over groups (x, y, z); orders it after everything
  // recorded before (a memory barrier). A job's first command is ordered
  // after the earlier jobs whose memory it shares only: it may run
  // alongside the others.
  virtual void dispatch(const KernelSource& source, std::span<const std::byte> push, uint32_t groupsX,
                        uint32_t groupsY = 1, uint32_t groupsZ = 1) = 0;
  virtual uint32_t maxGroups(int axis) const = 0;  // the device's limit on axis 0 (x), 1 (y) or 2 (z)
  // The optional features of the device recorded for, for kernels that have
  // a faster variant where one is present; nullptr: none known.
  virtual const DeviceFeatures* features() const { return nullptr; }

  // Copies `bytes` into host-written memory the device can read while this
  // batch runs and returns its device address (16-byte aligned). For shapes,
  // strides and other per-call tables too large for push constants.
  virtual uint64_t params(std::span<const std::byte> bytes) = 0;

  // Device memory for intermediate results of one op (partial sums of a
  // split reduction, say). It lives until the batch has finished. Throws
  // ComputeError(kOutOfMemory) like any allocation.
  virtual std::shared_ptr<Buffer> scratch(uint64_t bytes) = 0;

  // Returns the address of eight zeroed uint32 words. A kernel that finds bad
  // input only the device can see (an index out of range) clamps its access,
  // sets word 0 non-zero and fills the rest; after the batch the op fails with
  // ComputeError(kInvalid, describe(words)), and the outputs are not used.
  virtual uint64_t errorSlot(DeviceErrorDescriber describe) = 0;

  // For kernels that bind their own pipeline layout (user kernels take
  // descriptors): runs `record` with the batch's command buffer, ordered
  // as dispatch() orders its command. `record` must leave
  // no state that later dispatches rely on.
  virtual void recordCommands(const std::function<void(VkCommandBuffer_T* commandBuffer)>& record) {
    throw std::logic_error("this recorder cannot record raw commands");
  }

  template <typename Push>
  void dispatch(const KernelSource& source, const Push& push, uint32_t gx, uint32_t gy = 1, uint32_t gz = 1) {
    static_assert(sizeof(Push) <= kMaxPushBytes);
    dispatch(source, std::as_bytes(std::span(&push, 1)), gx, gy, gz);
  }

  template <typename T>
  uint64_t params(const std::vector<T>& values) {
    return params(std::as_bytes(std::span(values)));
  }

  // `count` zeroed uint32 words, in params()'s memory, that the device may
  // also write (atomically, too) while this batch runs: counters that a
  // kernel's workgroups share.
  uint64_t zeroedWords(uint32_t count) { return params(std::vector<uint32_t>(count, 0u)); }

  // Workgroups for `items` at `perGroup` items each on `axis`, capped at the
  // device's limit; kernels loop (grid stride) over whatever the cap leaves.
  uint32_t groupsFor(uint64_t items, uint64_t perGroup, int axis = 0) const {
    uint64_t groups = (items + perGroup - 1) / perGroup;
    return uint32_t(groups < maxGroups(axis) ? groups : maxGroups(axis));
  }
};

}  // namespace tensord::compute
