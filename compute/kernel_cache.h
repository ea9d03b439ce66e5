#pragma once
// KernelCache: GLSL -> SPIR-V (glslang) -> compute pipeline, cached three
// ways: pipelines in memory; SPIR-V on disk under <cacheDir>/spirv keyed by a
// hash of the source and the compiler version; the VkPipelineCache on disk
// under <cacheDir>/pipelines-<driver uuid>.bin, so a restart compiles
// nothing. All kernels share one pipeline layout: push constants only.
//
// Thread-safe; pipelines live as long as the cache.

#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "compute/recorder.h"
#include "compute/vk.h"

namespace spdlog {
class logger;
}

namespace tensord::compute {

class Device;

// Compiles one GLSL compute shader; throws ComputeError with glslang's log.
std::vector<uint32_t> compileGlsl(const std::string& name, const std::string& glsl);

class KernelCache {
 public:
  KernelCache(const Device& device, std::filesystem::path cacheDir, spdlog::logger& log);
  ~KernelCache();  // saves the pipeline cache

  // The pipeline for one dispatch of `source` (compiled on first use): each
  // call that returns one counts as a dispatch recorded (dispatches()).
  const vk::raii::Pipeline& pipeline(const KernelSource& source);
  // Dispatches recorded since the cache was made, by kernel variant name
  // (KernelSource::name, "conv_gemm|f32|64x128x8|v4|inside"): which kernel
  // each op took, for the daemon's metrics and for tests of the routing.
  // Takes a lock of its own, never held across a compile.
  std::map<std::string, uint64_t> dispatches() const;
  const vk::raii::PipelineLayout& layout() const { return layout_; }
  const Device& device() const { return device_; }
  void savePipelineCache();

  // For user kernels: GLSL -> SPIR-V through the same disk cache, and a
  // pipeline over a layout of their own through the same pipeline cache.
  std::vector<uint32_t> compile(const std::string& name, const std::string& glsl);
  vk::raii::Pipeline createPipeline(const std::vector<uint32_t>& spirv, const vk::raii::PipelineLayout& layout);

 private:
  std::vector<uint32_t> spirv(const KernelSource& source);
  // The SPIR-V as this device runs it: NV cooperative matrices rewritten to
  // the KHR extension where the device enabled that one (spirv_coop.h).
  // Throws ComputeError (unsupported) naming `name` if they cannot be.
  std::vector<uint32_t> forDevice(const std::string& name, std::vector<uint32_t> spirv, bool bf16) const;
  // The pipeline of `source`, compiled on first use (under mu_).
  const vk::raii::Pipeline& compiled(const KernelSource& source);

  const Device& device_;
  std::filesystem::path cacheDir_;
  spdlog::logger& log_;
  vk::raii::PipelineLayout layout_;
  vk::raii::PipelineCache pipelineCache_;

  std::mutex mu_;  // held across compiles
  std::unordered_map<const KernelSource*, std::unique_ptr<vk::raii::Pipeline>> pipelines_;  // GUARDED_BY(mu_)
  mutable std::mutex countsMu_;
  std::unordered_map<const KernelSource*, uint64_t> counts_;  // GUARDED_BY(countsMu_)
};

}  // namespace tensord::compute
