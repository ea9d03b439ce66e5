#pragma once
// What a kernel template sees while its op is being recorded into a command
// buffer: a way to dispatch a compute kernel. Kernels take every operand as a
// buffer device address in their push constants (GL_EXT_buffer_reference), so
// there are no descriptor sets and no storage-range limit on tensor size.

#include <cstdint>
#include <span>
#include <string>

namespace tensord::compute {

// GLSL source of one compute kernel. Identity is the object: templates keep
// their sources for the lifetime of the op table.
struct KernelSource {
  std::string name;
  std::string glsl;
};

constexpr uint32_t kMaxPushBytes = 128;  // guaranteed minimum of every device

class Recorder {
 public:
  virtual ~Recorder() = default;
  // Dispatches `source` over groups (x, y, z); orders it after everything
  // recorded before (a memory barrier).
  virtual void dispatch(const KernelSource& source, std::span<const std::byte> push, uint32_t groupsX,
                        uint32_t groupsY = 1, uint32_t groupsZ = 1) = 0;
  virtual uint32_t maxGroups(int axis) const = 0;  // the device's limit on axis 0 (x), 1 (y) or 2 (z)

  template <typename Push>
  void dispatch(const KernelSource& source, const Push& push, uint32_t gx, uint32_t gy = 1, uint32_t gz = 1) {
    static_assert(sizeof(Push) <= kMaxPushBytes);
    dispatch(source, std::as_bytes(std::span(&push, 1)), gx, gy, gz);
  }
};

}  // namespace tensord::compute
