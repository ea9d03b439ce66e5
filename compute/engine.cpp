#include "compute/engine.h"

#include <algorithm>
#include <unordered_set>

#include <spdlog/spdlog.h>

#include "compute/allocator.h"
#include "compute/command_stream.h"
#include "compute/device.h"
#include "compute/kernel_cache.h"
#include "compute/kernel_templates.h"
#include "compute/op_table.h"
#include "compute/staging.h"
#include "compute/user_kernels.h"

namespace tensord::compute {
namespace {

// Roughly a GPU's f32 arithmetic rate over its memory bandwidth (an H100:
// ~50 TFLOP/s over ~3 TB/s; lavapipe on a CPU is not far off), to put
// compute-bound work on the same scale as memory-bound work.
constexpr uint64_t kFlopsPerByte = 16;

// Queued work holds pins, not leases (buffer.h): a tensor dropped while its
// work is queued gives its memory back at once, to work queued later. The
// callers' leases (the by-value arguments below) outlive the enqueue call:
// `views` keep theirs; only their descriptions move (no copy of each shape),
// so they are used no further but for their buffers.
std::vector<TensorView> pinned(std::vector<TensorView>& views) {
  std::vector<TensorView> out;
  out.reserve(views.size());
  for (auto& v : views) out.push_back({std::move(v.desc), v.buffer->pin()});
  return out;
}

// User kernels' ops are named "user.<name>" (server/session_kernels.cpp).
bool isUserKernel(const OpSpec& spec) { return spec.name.starts_with("user."); }

}  // namespace

// Declaration order is teardown order, reversed: the stream finishes its jobs
// (returning their buffers to the allocator) before anything else goes.
struct Engine::Impl {
  explicit Impl(EngineOptions options)
      : log(options.logger),
        device(options.device, *log, options.f32ProductsOnTensorCores),
        allocator(device, options.memoryLimitBytes),
        hostAllocator(device, options.memoryLimitBytes, CachingAllocator::Placement::kHost),
        staging(device, options.stagingSlotBytes, options.stagingSlots),
        kernels(device, options.cacheDir, *log),
        stream(device, kernels, allocator, options.fairSharing, std::move(options.deviceTimeObserver),
               options.deviceTimeInterval) {}

  std::shared_ptr<spdlog::logger> log;
  Device device;
  CachingAllocator allocator;
  CachingAllocator hostAllocator;
  StagingPool staging;
  OpTable ops;
  KernelCache kernels;
  CommandStream stream;
};

Engine::Engine(EngineOptions options) : impl_(std::make_unique<Impl>(std::move(options))) {}

// Impl's members go in reverse order: the stream first finishes every queued
// job, then the kernel cache saves itself.
Engine::~Engine() = default;

const DeviceInfo& Engine::device() const { return impl_->device.info(); }
const OpTable& Engine::ops() const { return impl_->ops; }

std::shared_ptr<Buffer> Engine::allocate(uint64_t bytes, const std::string& owner) {
  return impl_->allocator.allocate(bytes, owner);
}

std::shared_ptr<Buffer> Engine::allocateHost(uint64_t bytes, const std::string& owner) {
  return impl_->hostAllocator.allocate(bytes, owner, CachingAllocator::Reuse::kIdleOnly);
}

MemoryStats Engine::memoryStats() const { return impl_->allocator.stats(); }
bool Engine::measuresDeviceTime() const { return impl_->stream.measuresDeviceTime(); }
void Engine::setDeviceTiming(bool on) { impl_->stream.setTiming(on); }
uint64_t Engine::queuedJobs() const { return impl_->stream.queuedJobs(); }
uint64_t Engine::ownerBytes(const std::string& owner) const { return impl_->allocator.ownerBytes(owner); }

void Engine::enqueueOp(const std::string& owner, const OpSpec& spec, std::vector<TensorView> inputs, std::vector<TensorView> outputs,
                       Attrs attrs, Completion done) {
  checkDTypes(spec, inputs, outputs);
  Job job{.done = std::move(done), .what = spec.name, .owner = owner, .userKernel = isUserKernel(spec)};
  if (uint64_t flops = spec.kernel->flops(spec, inputs, outputs, attrs)) {
    // Compute-bound: about as long as moving flops / kFlopsPerByte bytes.
    job.cost = flops / kFlopsPerByte;
    for (const auto& v : inputs) job.cost += v.buffer->bytes();
    for (const auto& v : outputs) job.cost += v.buffer->bytes();
  }
  std::vector<TensorView> pinnedIn = pinned(inputs), pinnedOut = pinned(outputs);
  for (size_t i = 0; i < pinnedIn.size(); ++i) {
    job.reads.emplace_back(spec.inputs.empty() ? std::to_string(i) : spec.inputName(i), pinnedIn[i].buffer);
    if (std::find(spec.mutates.begin(), spec.mutates.end(), spec.inputName(i)) != spec.mutates.end()) {
      job.writes.push_back(pinnedIn[i].buffer);
    }
  }
  for (const auto& out : pinnedOut) job.writes.push_back(out.buffer);
  job.record = [&spec, inputs = std::move(pinnedIn), outputs = std::move(pinnedOut),
                attrs = std::move(attrs)](BatchRecorder& r) { spec.kernel->record(spec, r, inputs, outputs, attrs); };
  impl_->stream.enqueue(std::move(job));
}

void Engine::enqueueOps(const std::string& owner, std::string what, std::vector<OpStep> steps,
                        std::shared_ptr<const void> keep, Completion done) {
  Job job{.done = std::move(done), .what = std::move(what), .owner = owner};
  // The leases stay here until the job is queued (see Buffer::pin).
  std::vector<std::shared_ptr<Buffer>> leases;
  // Results of earlier steps: the job writes them, so reading them needs
  // no entry of its own (reads carry failures in from earlier jobs).
  std::unordered_set<const Buffer*> produced;
  for (auto& step : steps) {
    const OpSpec& spec = *step.spec;
    checkDTypes(spec, step.inputs, step.outputs);
    job.userKernel = job.userKernel || isUserKernel(spec);
    if (uint64_t flops = spec.kernel->flops(spec, step.inputs, step.outputs, *step.attrs)) {
      job.cost += flops / kFlopsPerByte;
      for (const auto& v : step.inputs) job.cost += v.buffer->bytes();
      for (const auto& v : step.outputs) job.cost += v.buffer->bytes();
    }
    for (const auto& v : step.outputs) leases.push_back(v.buffer);
    step.inputs = pinned(step.inputs);
    step.outputs = pinned(step.outputs);
    for (size_t i = 0; i < step.inputs.size(); ++i) {
      if (!produced.contains(step.inputs[i].buffer.get())) {
        job.reads.emplace_back(spec.inputs.empty() ? std::to_string(i) : spec.inputName(i), step.inputs[i].buffer);
      }
      if (std::find(spec.mutates.begin(), spec.mutates.end(), spec.inputName(i)) != spec.mutates.end()) {
        job.writes.push_back(step.inputs[i].buffer);
      }
    }
    for (const auto& out : step.outputs) {
      job.writes.push_back(out.buffer);
      produced.insert(out.buffer.get());
    }
  }
  // Every dispatch is ordered after everything recorded before it, so the
  // steps see each other's results.
  job.record = [steps = std::move(steps), keep = std::move(keep)](BatchRecorder& r) {
    for (const auto& step : steps) step.spec->kernel->record(*step.spec, r, step.inputs, step.outputs, *step.attrs);
  };
  impl_->stream.enqueue(std::move(job));
}

void Engine::checkDTypes(const OpSpec& spec, std::span<const TensorView> inputs,
                         std::span<const TensorView> outputs) const {
  auto check = [&](DType d) {
    if (!dtypeSupported(d)) {
      throw ComputeError(ComputeError::Kind::kUnsupported,
                         spec.name + ": dtype " + std::string(dtypeName(d)) + " is not supported on " +
                             device().name + " (it lacks the Vulkan feature " +
                             (d == DType::I64 ? "shaderInt64" : d == DType::U8 || d == DType::Bool ? "storageBuffer8BitAccess" : "storageBuffer16BitAccess") +
                             ")");
    }
  };
  for (const auto& v : inputs) check(v.desc.dtype);
  for (const auto& v : outputs) check(v.desc.dtype);
}

void Engine::enqueueShapeQuery(const std::string& owner, const OpSpec& spec, std::vector<TensorView> inputs, Attrs attrs,
                               std::shared_ptr<std::vector<TensorDesc>> outputs, Completion done) {
  checkDTypes(spec, inputs, {});
  std::vector<TensorView> pinnedIn = pinned(inputs);
  // The words live in the batch's parameter memory, which stays valid until
  // the completions of the batch have run.
  auto words = std::make_shared<const uint32_t*>(nullptr);
  std::vector<TensorDesc> descs;
  std::vector<std::pair<std::string, std::shared_ptr<Buffer>>> reads;
  for (size_t i = 0; i < pinnedIn.size(); ++i) {
    descs.push_back(pinnedIn[i].desc);
    reads.emplace_back(spec.inputName(i), pinnedIn[i].buffer);
  }
  impl_->stream.enqueue(
      {.record =
           [&spec, inputs = std::move(pinnedIn), attrs, words](BatchRecorder& r) {
             auto slot = r.hostWords(8);
             *words = slot.first;
             spec.kernel->recordShapeQuery(spec, r, inputs, attrs, slot.second);
           },
       .done = [&spec, descs = std::move(descs), attrs, words, outputs,
                done = std::move(done)](std::exception_ptr error) {
         if (!error) {
           try {
             *outputs = spec.kernel->outputsFromDevice(spec, descs, attrs, *words);
           } catch (...) {
             error = std::current_exception();
           }
         }
         done(error);
       },
       .what = spec.name,
       .reads = std::move(reads),
       .owner = owner});
}

std::shared_ptr<const UserKernel> Engine::buildUserKernel(UserKernelSource source) {
  return compute::buildUserKernel(impl_->device, impl_->kernels, std::move(source), *impl_->log);
}

bool Engine::dtypeSupported(DType d) const {
  const DeviceFeatures& f = device().features;
  switch (d) {
    case DType::I64: return f.int64;
    case DType::F16:
    case DType::BF16: return f.storage16;
    case DType::U8:
    case DType::Bool: return f.storage8;
    default: return true;
  }
}

void Engine::enqueueCopy(const std::string& owner, std::shared_ptr<Buffer> src, std::shared_ptr<Buffer> dst, uint64_t bytes, Completion done) {
  if (bytes > src->bytes() || bytes > dst->bytes()) {
    throwInvalid("copy of " + std::to_string(bytes) + " bytes exceeds a buffer (" + std::to_string(src->bytes()) +
                 " -> " + std::to_string(dst->bytes()) + ")");
  }
  std::shared_ptr<Buffer> from = src->pin(), to = dst->pin();  // the leases outlive the call
  impl_->stream.enqueue({.record =
                             [src = from, dst = to, bytes](BatchRecorder& r) {
                               // Capacities are multiples of 256, so whole 16-byte words are in bounds.
                               CopyPush push{src->deviceAddress(), dst->deviceAddress(), uint32_t((bytes + 15) / 16)};
                               uint32_t groups = uint32_t(std::min<uint64_t>((push.count16 + 255) / 256, r.maxGroups(0)));
                               r.dispatch(copyKernel(), push, groups);
                             },
                         .done = std::move(done),
                         .what = "copy",
                         .reads = {{"source", from}},
                         .writes = {to},
                         .owner = owner,
                         .cost = 2 * bytes});
}

std::optional<StagingSlot> Engine::tryAcquireStaging() { return impl_->staging.tryAcquire(); }
void Engine::releaseStaging(const StagingSlot& slot) { impl_->staging.release(slot); }
uint64_t Engine::stagingSlotBytes() const { return impl_->staging.slotBytes(); }
uint32_t Engine::stagingSlotCount() const { return impl_->staging.slotCount(); }

void Engine::enqueueUpload(const std::string& owner, const StagingSlot& slot, uint64_t bytes, std::shared_ptr<Buffer> dst, uint64_t dstOffset,
                           Completion done) {
  if (bytes > slot.capacity || dstOffset + bytes > dst->bytes()) {
    throwInvalid("upload of " + std::to_string(bytes) + " bytes at offset " + std::to_string(dstOffset) +
                 " exceeds the tensor's " + std::to_string(dst->bytes()) + " bytes");
  }
  StagingPool& staging = impl_->staging;
  std::shared_ptr<Buffer> to = dst->pin();  // the lease outlives the call
  impl_->stream.enqueue({.record =
                             [&staging, slot, bytes, dst = to, dstOffset](BatchRecorder& r) {
                               r.copy(staging.buffer(), staging.offsetOf(slot), dst->block().buffer,
                                      dst->offset() + dstOffset, bytes);
                             },
                         .done = std::move(done),
                         .what = "upload",
                         .writes = {to},
                         .owner = owner,
                         .cost = bytes});
}

void Engine::enqueueDownload(const std::string& owner, std::shared_ptr<Buffer> src, uint64_t srcOffset, uint64_t bytes, const StagingSlot& slot,
                             Completion done) {
  if (bytes > slot.capacity || srcOffset + bytes > src->bytes()) {
    throwInvalid("download of " + std::to_string(bytes) + " bytes at offset " + std::to_string(srcOffset) +
                 " exceeds the tensor's " + std::to_string(src->bytes()) + " bytes");
  }
  StagingPool& staging = impl_->staging;
  std::shared_ptr<Buffer> from = src->pin();  // the lease outlives the call
  impl_->stream.enqueue({.record =
                             [&staging, slot, bytes, src = from, srcOffset](BatchRecorder& r) {
                               r.copy(src->block().buffer, src->offset() + srcOffset, staging.buffer(),
                                      staging.offsetOf(slot), bytes);
                             },
                         .done = std::move(done),
                         .what = "download",
                         .reads = {{"tensor", from}},
                         .owner = owner,
                         .cost = bytes});
}

void Engine::enqueueTransfer(const std::string& owner, std::shared_ptr<Buffer> src, uint64_t srcOffset,
                             std::shared_ptr<Buffer> dst, uint64_t dstOffset, uint64_t bytes, Completion done) {
  if (srcOffset + bytes > src->bytes() || dstOffset + bytes > dst->bytes()) {
    throwInvalid("transfer of " + std::to_string(bytes) + " bytes at offsets " + std::to_string(srcOffset) + " -> " +
                 std::to_string(dstOffset) + " exceeds a buffer (" + std::to_string(src->bytes()) + " -> " +
                 std::to_string(dst->bytes()) + " bytes)");
  }
  std::shared_ptr<Buffer> from = src->pin(), to = dst->pin();  // the leases outlive the call
  impl_->stream.enqueue({.record =
                             [src = from, srcOffset, dst = to, dstOffset, bytes](BatchRecorder& r) {
                               r.copy(src->block().buffer, src->offset() + srcOffset, dst->block().buffer,
                                      dst->offset() + dstOffset, bytes);
                             },
                         .done = std::move(done),
                         .what = "transfer",
                         .reads = {{"source", from}},
                         .writes = {to},
                         .owner = owner,
                         .cost = bytes});
}

void Engine::waitIdle() { impl_->stream.waitIdle(); }
Engine::JobOrdering Engine::jobOrdering() const { return impl_->stream.jobOrdering(); }

std::map<std::string, uint64_t> Engine::kernelDispatches() const { return impl_->kernels.dispatches(); }
void Engine::holdSubmits() { impl_->stream.hold(); }
void Engine::releaseSubmits() { impl_->stream.release(); }

}  // namespace tensord::compute
