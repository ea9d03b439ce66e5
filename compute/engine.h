#pragma once
// Engine: the face compute/ shows the server. It owns the Vulkan device, the
// caching allocator, the staging pool, the kernel cache and the command stream.
//
// Threads: every method may be called from any thread. Work is recorded and
// submitted on the engine's own submit thread; `Completion` callbacks run on
// its completion thread, in submission order, and must not block. Buffers and staging slots handed to
// enqueue* stay alive until their completion has run (queued work pins buffers: their memory may serve
// tensors allocated later as soon as the caller's last lease is gone, see buffer.h).

#include <chrono>
#include <cstdint>
#include <exception>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "compute/attrs.h"
#include "compute/buffer.h"
#include "compute/dtype.h"
#include "compute/op_spec.h"

namespace spdlog {
class logger;
}

namespace tensord::compute {

class OpTable;
class UserKernel;
struct UserKernelSource;

// The device time of one finished job, from Vulkan timestamp queries.
struct DeviceTime {
  std::string_view what;  // the op's name, or "upload", "download", "copy"
  uint64_t nanos = 0;
};

// Called on the completion thread once per finished batch, before the
// batch's completions run, with the device time of each job recorded in it
// (failed recordings left out). Must be cheap and must not block.
using DeviceTimeObserver = std::function<void(std::span<const DeviceTime> times)>;

struct EngineOptions {
  std::string device;                // "" = automatic; else index ("1") or name substring
  std::filesystem::path cacheDir;    // SPIR-V and pipeline cache; "" = no disk cache
  uint64_t memoryLimitBytes = 0;     // 0 = the device-local heap size
  uint64_t stagingSlotBytes = 8u << 20;
  uint32_t stagingSlots = 8;
  // Share queued device work fairly between owners (FairQueue); false runs
  // it in arrival order.
  bool fairSharing = true;
  // f32 matrix products (matmul, linear, bmm, the products inside
  // convolutions) on bf16 tensor cores where the device has them, each f32
  // operand split exactly into three bf16 parts; false keeps them on f32
  // FMA kernels (docs/design.md, "f32 products on tensor cores").
  bool f32ProductsOnTensorCores = true;
  std::shared_ptr<spdlog::logger> logger;  // required
  // Receives per-job device times where the device has timestamps
  // (Engine::measuresDeviceTime); may be empty, and then nothing is timed.
  DeviceTimeObserver deviceTimeObserver;
  // At most one batch is timed per interval (0: every batch): the
  // timestamps cost the device a few microseconds per job, which small ops
  // feel. Batches longer than the interval are all timed.
  std::chrono::microseconds deviceTimeInterval{0};
};

// Optional device features the kernels use; a dtype whose feature is missing
// is not offered on that device (introspection lists what is).
struct DeviceFeatures {
  bool int64 = false;      // shaderInt64: i64 tensors
  bool storage16 = false;  // storageBuffer16BitAccess: f16 and bf16 tensors
  bool storage8 = false;   // storageBuffer8BitAccess: u8 and bool tensors
  // VK_KHR_cooperative_matrix or VK_NV_cooperative_matrix with a
  // subgroup-scope 16x16x16 product of f16 A/B into f32 C/D on 32-wide
  // subgroups, plus shaderFloat16 and the Vulkan memory model its shaders
  // need: f16 matmul and conv on tensor cores.
  bool coopMatrixF16 = false;
  // ... through the KHR extension: the kernels' SPIR-V (glslang emits the NV
  // one) is rewritten for it when the pipeline is made (spirv_coop.h).
  // Preferred where both exist; TENSORD_COOPERATIVE_MATRIX=nv picks NV.
  bool coopMatrixKhr = false;
  // ... and VK_KHR_shader_bfloat16 with the 16x16x16 bf16 product into f32:
  // bf16 matmul on tensor cores too (the f16 kernels, rewritten).
  bool coopMatrixBf16 = false;
  // f32 products on those bf16 tensor cores, each operand split into three
  // bf16 parts (kernels/matmul_coop.comp, F32_SPLIT): coopMatrixBf16 unless
  // EngineOptions::f32ProductsOnTensorCores is false.
  bool f32SplitBf16 = false;
  // User kernels (user_kernels.h) bind descriptors with VK_KHR_push_descriptor
  // and need VK_EXT_robustness2's robustBufferAccess2 (with robustBufferAccess):
  // an out-of-range access then stays inside the bound range of one tensor.
  bool pushDescriptors = false;
  bool robustBufferAccess2 = false;
  // VK_KHR_pipeline_executable_properties, turned on only when
  // TENSORD_PIPELINE_STATS is set: each built-in kernel's pipeline then logs
  // the driver's statistics (registers, shared memory, stack), for tuning
  // kernels (docs/design.md, "Kernels are .comp files").
  bool pipelineStats = false;
  // The device class the tiled kernels choose their tiles for:
  // maxComputeSharedMemorySize (at least 16 KiB on every device; the default
  // describes such a device), and its compute units (NVIDIA's SMs through
  // VK_NV_shader_sm_builtins; AMD's CUs through VK_AMD_shader_core_properties,
  // as physically laid out, which a part with CUs turned off overstates;
  // 0: not reported). A recorder without features leaves the kernels an
  // H100's choices.
  uint32_t sharedMemoryBytes = 16384;
  uint32_t computeUnits = 0;
};

struct DeviceInfo {
  std::string name;
  std::string kind;  // "discrete", "integrated", "virtual", "cpu", "other"
  uint32_t vendorId = 0;
  uint32_t deviceId = 0;
  std::string driver;
  std::string apiVersion;
  uint64_t memoryBytes = 0;  // device-local heap
  uint64_t maxAllocationBytes = 0;
  DeviceFeatures features;
};

struct MemoryStats {
  uint64_t liveBytes = 0;      // logical bytes of live buffers
  uint64_t reservedBytes = 0;  // device memory held, cache included
  uint64_t cachedBytes = 0;    // free blocks kept for reuse
  uint64_t limitBytes = 0;
};

// Called once when enqueued work finished; nullptr on success.
using Completion = std::function<void(std::exception_ptr error)>;

struct TensorView {
  TensorDesc desc;
  std::shared_ptr<Buffer> buffer;
};

// A host-visible region used for transfers. Slots are few and fixed in size;
// acquire one, fill it (upload) or have the device fill it (download), and
// release it once the transfer's completion ran.
struct StagingSlot {
  uint32_t index;
  std::byte* data;
  uint64_t capacity;
};

class Engine {
 public:
  explicit Engine(EngineOptions options);
  ~Engine();  // waits for enqueued work, then saves the pipeline cache
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  const DeviceInfo& device() const;
  const OpTable& ops() const;

  // Device memory for one tensor, charged to `owner`: a lease (buffer.h).
  // The memory may have belonged to a tensor dropped while its work is still
  // queued; work enqueued on the new tensor runs after that work. Keep a
  // lease until the work that uses it is enqueued. Throws
  // ComputeError(kOutOfMemory) when the limit or the device is exhausted.
  std::shared_ptr<Buffer> allocate(uint64_t bytes, const std::string& owner);
  // Host-visible memory that kernels reach like device memory and the host
  // through Buffer::hostData(): for bytes that cross the network. Not ordered
  // by the queue for the host: write it only while no queued work uses it,
  // read it only once the work that wrote it completed. Kept apart from
  // device memory and its statistics.
  std::shared_ptr<Buffer> allocateHost(uint64_t bytes, const std::string& owner);
  MemoryStats memoryStats() const;
  uint64_t ownerBytes(const std::string& owner) const;

  // Device work is queued per `owner` (a principal) and shared fairly between
  // owners (see FairQueue); each owner's work runs in the order it was
  // enqueued, and work on shared buffers in the order it was enqueued by anyone.

  // Runs `spec` on the device: inputs and outputs are already validated and
  // allocated (see inferOutputs).
  void enqueueOp(const std::string& owner, const OpSpec& spec, std::vector<TensorView> inputs, std::vector<TensorView> outputs, Attrs attrs,
                 Completion done);

  // One op of enqueueOps. `spec` and `attrs` must live until the job is
  // done (enqueueOps' `keep` may hold them).
  struct OpStep {
    const OpSpec* spec = nullptr;
    const Attrs* attrs = nullptr;
    std::vector<TensorView> inputs;
    std::vector<TensorView> outputs;
  };
  // Runs `steps` in order as one piece of device work (a captured graph):
  // each step as enqueueOp would run it, ordered after the steps before it.
  // `what` names the work in errors; `keep` is held until it is done.
  void enqueueOps(const std::string& owner, std::string what, std::vector<OpStep> steps,
                  std::shared_ptr<const void> keep, Completion done);

  // For ops whose output shapes depend on input values
  // (spec.kernel->shapeFromDevice()): runs the op's shape query after
  // everything enqueued before, fills *outputs, then calls `done`. The caller
  // then allocates the outputs and calls enqueueOp as for any op.
  void enqueueShapeQuery(const std::string& owner, const OpSpec& spec, std::vector<TensorView> inputs, Attrs attrs,
                         std::shared_ptr<std::vector<TensorDesc>> outputs, Completion done);

  // Compiles and checks a kernel a peer registers (user_kernels.h) and
  // creates its pipeline. Blocks; call it off the event loop. Throws
  // ComputeError naming what is wrong.
  std::shared_ptr<const UserKernel> buildUserKernel(UserKernelSource source);

  // Whether tensors of `dtype` can live on this device (see DeviceFeatures).
  bool dtypeSupported(DType dtype) const;

  // Device-to-device copy (a compute shader, not vkCmdCopyBuffer).
  // Copies bytes between two buffers at byte offsets with the device's copy
  // commands: the fast way to read host memory (allocateHost) on the device,
  // where kernels reading it go a word at a time.
  void enqueueTransfer(const std::string& owner, std::shared_ptr<Buffer> src, uint64_t srcOffset,
                       std::shared_ptr<Buffer> dst, uint64_t dstOffset, uint64_t bytes, Completion done);
  void enqueueCopy(const std::string& owner, std::shared_ptr<Buffer> src, std::shared_ptr<Buffer> dst, uint64_t bytes, Completion done);

  // Staging slots: tryAcquireStaging returns nullopt when all are in use.
  std::optional<StagingSlot> tryAcquireStaging();
  void releaseStaging(const StagingSlot& slot);
  uint64_t stagingSlotBytes() const;
  uint32_t stagingSlotCount() const;

  // slot[0, bytes) -> dst[dstOffset, +bytes)
  void enqueueUpload(const std::string& owner, const StagingSlot& slot, uint64_t bytes, std::shared_ptr<Buffer> dst, uint64_t dstOffset,
                     Completion done);
  // src[srcOffset, +bytes) -> slot[0, bytes)
  void enqueueDownload(const std::string& owner, std::shared_ptr<Buffer> src, uint64_t srcOffset, uint64_t bytes, const StagingSlot& slot,
                       Completion done);

  // Blocks until everything enqueued so far has completed.
  void waitIdle();

  // Batching a burst: between holdSubmits() and its releaseSubmits(), small
  // queued work is not taken into a batch, so the small ops enqueued in a
  // burst (one pass of an event loop) share one command buffer and one
  // submit. Work that would keep the device busy a while (32 MiB of cost,
  // docs/design.md "Submission") is taken at once anyway. Holds nest; each
  // must be released promptly, or queued work waits.
  void holdSubmits();
  void releaseSubmits();

  // Whether the compute queue writes timestamps, so jobs' device times reach
  // EngineOptions::deviceTimeObserver.
  bool measuresDeviceTime() const;
  // Pauses (false) or resumes (true, the default) timing batches for the
  // observer, so a benchmark can time the device without the timestamps'
  // cost in its other figures. Batches with a user kernel are timed anyway.
  void setDeviceTiming(bool on);
  // Jobs enqueued and not yet taken into a batch.
  uint64_t queuedJobs() const;

  // Since the engine started: jobs whose first command waited for
  // everything before it (a barrier), and jobs that ran alongside the jobs
  // before them instead, conflicting with none (docs/design.md, "Submission").
  struct JobOrdering {
    uint64_t barriers = 0;
    uint64_t overlapped = 0;
  };
  JobOrdering jobOrdering() const;

  // Since the engine started: the dispatches recorded of each built-in
  // kernel variant, by its name ("matmul|f32|fast128x128|bn|v4|in",
  // "conv_gemm|f16|64x256x32|v1|coop32x64|taps"). Which kernel an op took
  // on this device (an op may record several: a Winograd conv 4, a split-K
  // product 2): the daemon exports it as tensord_kernel_dispatches_total.
  // User kernels are not counted here.
  std::map<std::string, uint64_t> kernelDispatches() const;

 private:
  void checkDTypes(const OpSpec& spec, std::span<const TensorView> inputs, std::span<const TensorView> outputs) const;

  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tensord::compute
