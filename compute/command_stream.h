#pragma once
// CommandStream: the submit thread. Jobs are queued from any thread; the
// thread takes a batch (FairQueue decides which jobs, sharing the device
// between owners), records it into one command buffer with a barrier between
// jobs, submits it, waits for its fence and then runs each job's completion.
// While one batch runs on the device the next one collects, so many small ops
// share a submit.

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

#include "compute/engine.h"
#include "compute/fair_queue.h"
#include "compute/param_arena.h"
#include "compute/recorder.h"
#include "compute/vk.h"

namespace tensord::compute {

class CachingAllocator;
class Device;
class KernelCache;
class StagingPool;

// Records device work; lives for one batch. Adds transfer commands to Recorder.
class BatchRecorder final : public Recorder {
 public:
  BatchRecorder(const vk::raii::CommandBuffer& cmd, KernelCache& kernels, ParamArena& arena,
                CachingAllocator& allocator, const uint32_t (&maxGroups)[3]);

  void dispatch(const KernelSource& source, std::span<const std::byte> push, uint32_t gx, uint32_t gy,
                uint32_t gz) override;
  using Recorder::dispatch;
  using Recorder::params;
  uint32_t maxGroups(int axis) const override { return maxGroups_[axis]; }
  uint64_t params(std::span<const std::byte> bytes) override;
  std::shared_ptr<Buffer> scratch(uint64_t bytes) override;
  uint64_t errorSlot(DeviceErrorDescriber describe) override;

  void copy(vk::Buffer src, uint64_t srcOffset, vk::Buffer dst, uint64_t dstOffset, uint64_t bytes);

  // `count` zeroed words the device may write and the host read once the
  // batch finished (until the next batch starts): {host pointer, address}.
  std::pair<const uint32_t*, uint64_t> hostWords(uint32_t count);

  // Which job of the batch is being recorded; error slots belong to it.
  void beginJob(size_t index) { job_ = index; }
  // After the batch finished: the error a job's kernels reported, or nullptr.
  std::exception_ptr deviceError(size_t job) const;

 private:
  void barrier();

  struct ErrorSlot {
    size_t job;
    const uint32_t* words;
    DeviceErrorDescriber describe;
  };

  const vk::raii::CommandBuffer& cmd_;
  KernelCache& kernels_;
  ParamArena& arena_;
  CachingAllocator& allocator_;
  uint32_t maxGroups_[3];
  size_t job_ = 0;
  std::vector<std::shared_ptr<Buffer>> scratch_;  // freed with the recorder, after the batch
  std::vector<ErrorSlot> errorSlots_;
};

class CommandStream {
 public:
  // fairSharing: batches are shared between jobs' owners; false takes jobs
  // in arrival order.
  CommandStream(const Device& device, KernelCache& kernels, CachingAllocator& allocator, bool fairSharing);
  ~CommandStream();  // finishes every queued job, then joins

  void enqueue(Job job);
  void waitIdle();

 private:
  void run();
  void runBatch(std::deque<Job>& batch);
  static std::exception_ptr inheritedFailure(const Job& job);

  const Device& device_;
  KernelCache& kernels_;
  CachingAllocator& allocator_;
  ParamArena arena_;
  vk::raii::CommandPool pool_;
  vk::raii::CommandBuffer cmd_;
  vk::raii::Fence fence_;

  std::mutex mu_;
  std::condition_variable wake_;
  const bool fairSharing_;
  FairQueue queue_;        // GUARDED_BY(mu_)
  bool stopping_ = false;  // GUARDED_BY(mu_)
  std::thread thread_;     // last: starts after everything above exists
};

}  // namespace tensord::compute
