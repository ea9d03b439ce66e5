#pragma once
// User kernels: compute kernels peers register at run time, as GLSL (compiled
// here with glslang) or SPIR-V. Before anything runs, the SPIR-V is checked by
// SPIRV-Tools' validator and its entry point, local size, buffer bindings and
// push-constant block are compared with the description (user_kernel_desc.h);
// then its pipeline is created. The result is an op (an OpSpec of category
// "user" and a kernel template) that runs through Engine::enqueueOp like any
// built-in.
//
// Unlike built-in kernels, user kernels take their buffers as descriptors
// (`layout(binding = N) buffer`, set 0, bound with push descriptors), so the
// device's robust buffer access confines an out-of-range index to the
// kernel's own buffers: it cannot read or write any other tensor.
//
// Threads: a UserKernel is immutable once built; its op may be recorded on
// the submit thread while others look at it. Whoever enqueues its op keeps
// the UserKernel alive until the op completed (the job refers to its spec).

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "compute/op_spec.h"
#include "compute/user_kernel_desc.h"

namespace spdlog {
class logger;
}

namespace tensord::compute {

class Device;
class KernelCache;

// What a peer registers.
struct UserKernelSource {
  std::string name;         // the op's name ("user.gelu")
  std::string language;     // "glsl" or "spirv"
  std::string source;       // GLSL text, or SPIR-V words as little-endian bytes
  std::string description;  // JSON (docs/kernels.md)
};

class UserKernel {
 public:
  UserKernel(UserKernelSource source, UserKernelDesc desc, std::vector<uint32_t> spirv,
             std::array<uint32_t, 3> localSize);
  UserKernel(const UserKernel&) = delete;
  UserKernel& operator=(const UserKernel&) = delete;

  const OpSpec& spec() const { return spec_; }
  const UserKernelSource& source() const { return source_; }
  const UserKernelDesc& desc() const { return desc_; }
  const std::vector<uint32_t>& spirv() const { return spirv_; }
  const std::array<uint32_t, 3>& localSize() const { return localSize_; }

 private:
  friend std::shared_ptr<const UserKernel> buildUserKernel(const Device&, KernelCache&, UserKernelSource,
                                                           spdlog::logger&);
  UserKernelSource source_;
  UserKernelDesc desc_;
  std::vector<uint32_t> spirv_;
  std::array<uint32_t, 3> localSize_;
  OpSpec spec_;  // spec_.kernel runs it (it owns the pipeline)
};

// Compiles (GLSL), validates, checks against the description and creates the
// pipeline. Throws ComputeError: kInvalid with the compiler's line and
// message, the validator's message, or the binding / push constant / entry
// point at fault; kUnsupported for an unknown dtype or a device without push
// descriptors. Blocks (compile, pipeline creation): call it off the event loop.
std::shared_ptr<const UserKernel> buildUserKernel(const Device& device, KernelCache& cache, UserKernelSource source,
                                                  spdlog::logger& log);

// What the module declares, read from its SPIR-V words (exposed for tests).
struct SpirvReflection {
  struct EntryPoint {
    uint32_t model = 0;  // SPIR-V ExecutionModel; 5 = GLCompute
    std::string name;
    uint32_t function = 0;
  };
  struct Buffer {
    std::string name;  // the variable's or block's OpName, if any
    uint32_t set = 0, binding = 0;
    uint32_t storageClass = 0;  // 12 StorageBuffer, 2 Uniform, 0 UniformConstant ...
    bool storageBlock = false;  // a storage buffer (StorageBuffer, or Uniform + BufferBlock)
    bool readOnly = false;      // NonWritable on the variable or on every member
    uint32_t elementBits = 0;   // the last member's (array) component width; 0 unknown
    bool elementFloat = false;
  };
  std::vector<EntryPoint> entryPoints;
  std::optional<std::array<uint32_t, 3>> localSize;
  bool localSizeId = false;  // LocalSizeId (specialization constants) used
  std::vector<Buffer> buffers;
  uint32_t pushBytes = 0;  // size of the push-constant block, 0 without one
};

// Throws ComputeError(kInvalid) naming `op` when the words are not a module.
SpirvReflection reflectSpirv(const std::vector<uint32_t>& words, const std::string& op);

}  // namespace tensord::compute
