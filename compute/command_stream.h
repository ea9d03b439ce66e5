#pragma once
// CommandStream: two threads. Jobs are queued from any thread; the submit
// thread takes a batch (FairQueue decides which jobs, sharing the device
// between owners), records it into one command buffer with a barrier before
// each job that touches memory the jobs since the last barrier touch (a read
// after a write, a write after any access; BatchRecorder::beginJob) and
// submits it; the completion thread waits for each batch's fence in
// submission order and runs its jobs' completions. Up to three batches are
// on the device at once, and while they run the next one collects, so many
// small ops share a submit and the device does not wait for the host.

#include <atomic>
#include <chrono>
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
  const DeviceFeatures* features() const override;
  uint64_t params(std::span<const std::byte> bytes) override;
  std::shared_ptr<Buffer> scratch(uint64_t bytes) override;
  uint64_t errorSlot(DeviceErrorDescriber describe) override;
  void recordCommands(const std::function<void(VkCommandBuffer_T* commandBuffer)>& record) override;

  void copy(vk::Buffer src, uint64_t srcOffset, vk::Buffer dst, uint64_t dstOffset, uint64_t bytes);

  // `count` zeroed words the device may write and the host read once the
  // batch finished (until the next batch starts): {host pointer, address}.
  std::pair<const uint32_t*, uint64_t> hostWords(uint32_t count);

  // Which job of the batch is being recorded (error slots and scratch
  // belong to it) and the memory it reads and writes (FairQueue::blocksOf:
  // sorted, each block once). With `mayOverlap`, its first command skips
  // the barrier when the job conflicts with none of the jobs recorded since
  // the last barrier (it writes nothing they touch, reads nothing they
  // write), so independent jobs may run at the same time. Its own later
  // commands are each behind a barrier, as without.
  void beginJob(size_t index, std::vector<const Block*> reads, std::vector<const Block*> writes, bool mayOverlap);
  // After the batch finished: the error a job's kernels reported, or nullptr.
  std::exception_ptr deviceError(size_t job) const;

  // Jobs of this batch whose first command came after a barrier, and jobs
  // whose first command skipped it.
  uint64_t jobsAfterBarrier() const { return jobsAfterBarrier_; }
  uint64_t jobsOverlapped() const { return jobsOverlapped_; }

 private:
  void barrier();
  bool conflictsWithUnordered() const;

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
  // The job being recorded: its memory, whether it may skip its first
  // barrier, and whether it recorded a command yet.
  std::vector<const Block*> jobReads_, jobWrites_;
  bool mayOverlap_ = false;
  bool jobStarted_ = false;
  // What the commands since the last barrier read and write (sorted): a
  // command recorded now without a barrier may run alongside all of them.
  std::vector<const Block*> unorderedReads_, unorderedWrites_;
  // Every job before this one finished before the last barrier's later
  // commands start (the jobs since may still run).
  size_t orderedBefore_ = 0;
  vk::Pipeline bound_;  // the pipeline bound last (null: none, or unknown)
  bool anyBarrier_ = false;  // in this batch
  uint64_t jobsAfterBarrier_ = 0;
  uint64_t jobsOverlapped_ = 0;
  struct Scratch {
    std::shared_ptr<Buffer> buffer;
    size_t job;  // the last job it was handed to
  };
  std::vector<Scratch> scratch_;  // freed with the recorder, after the batch
  std::vector<ErrorSlot> errorSlots_;
};

class CommandStream {
 public:
  // fairSharing: batches are shared between jobs' owners; false takes jobs
  // in arrival order. `deviceTimes` (may be empty: nothing is timed)
  // receives the per-job device times of the batches timed, where the queue
  // has timestamps: at most one batch per `timeInterval` (0: every batch).
  CommandStream(const Device& device, KernelCache& kernels, CachingAllocator& allocator, bool fairSharing,
                DeviceTimeObserver deviceTimes = {}, std::chrono::microseconds timeInterval = {});
  ~CommandStream();  // finishes every queued job, then joins

  void enqueue(Job job);
  void waitIdle();
  // While held, the submit thread leaves queued jobs alone, so a burst of
  // enqueues goes out as one batch (one command buffer, one submit) once the
  // last hold is released. Every hold must be released; destruction ignores them.
  // A hold only gathers small work: once the jobs queued under it would
  // keep the device busy a while (kHeldCostLimit), or jobs a batch's limits
  // left behind are waiting, they are taken at once, so a long burst of
  // large ops does not leave the device idle until its last op is queued.
  void hold();
  void release();
  bool measuresDeviceTime() const { return timestampBits_ != 0; }
  // Pauses (false) or resumes timing batches for the observer; batches with
  // a user kernel are timed either way (any thread).
  void setTiming(bool on) { timing_.store(on, std::memory_order_relaxed); }
  // Jobs waiting for a batch; read without the lock (stats, any thread).
  size_t queuedJobs() const { return queued_.load(std::memory_order_relaxed); }
  // Counted once each batch is recorded (any thread).
  Engine::JobOrdering jobOrdering() const {
    return {.barriers = barriers_.load(std::memory_order_relaxed),
            .overlapped = overlapped_.load(std::memory_order_relaxed)};
  }

 private:
  // One batch's command buffer, fence and parameter memory. Up to kFrames
  // batches are on the device at once, so the next batch is recorded and
  // submitted while the previous ones run: small batches keep the device busy.
  struct Frame {
    explicit Frame(const Device& device);
    ParamArena arena;
    vk::raii::CommandPool pool;
    vk::raii::CommandBuffer cmd;
    vk::raii::Fence fence;
    // Timestamps around the batch's jobs: query i is written after job i-1
    // finished (query 0 at the batch's start), so job i took t[i+1] - t[i].
    // Null where the queue has no timestamps.
    vk::raii::QueryPool timestamps{nullptr};
    // Set by record(), consumed by complete():
    std::deque<Job> jobs;
    std::unique_ptr<BatchRecorder> recorder;
    std::vector<std::exception_ptr> errors;  // per job, from recording
    std::exception_ptr batchError;           // recording or submit failed
    bool submitted = false;
    bool timed = false;  // the batch wrote its timestamps
  };
  static constexpr size_t kFrames = 3;
  // Work a hold gathers before the submit thread takes it anyway: about 10
  // us of an H100's memory bandwidth, thousands of tiny ops' worth.
  static constexpr uint64_t kHeldCostLimit = 32ull << 20;

  void submitLoop();    // takes batches, records and submits them
  void completeLoop();  // waits for each frame's fence in order, runs its completions
  // Polls, for up to submitSpin_, until `waiting` (queued_ or submitted_) is
  // nonzero or stopSpinning_ is set; a hint only, the caller then waits on mu_.
  void pollForWork(const std::atomic<size_t>& waiting);
  void record(Frame& frame);
  void complete(Frame& frame);
  void reportDeviceTimes(const Frame& frame);
  static std::exception_ptr inheritedFailure(const Job& job);

  const Device& device_;
  KernelCache& kernels_;
  CachingAllocator& allocator_;
  std::vector<std::unique_ptr<Frame>> frames_;
  const DeviceTimeObserver deviceTimes_;
  uint32_t timestampBits_ = 0;    // valid bits of the queue's timestamps; 0 = none
  double timestampPeriodNs_ = 0;  // nanoseconds per timestamp tick
  const std::chrono::microseconds timeInterval_;   // between timed batches
  std::chrono::steady_clock::time_point lastTimed_;  // submit thread only
  std::atomic<bool> timing_{true};                   // setTiming
  const std::chrono::nanoseconds completionSpin_;  // fence polling before a blocking wait
  const std::chrono::nanoseconds submitSpin_;      // polling for work before sleeping (both threads)
  // Jobs independent of the ones since the last barrier skip theirs
  // (BatchRecorder::beginJob); TENSORD_OVERLAP_JOBS=0 puts a barrier before every job.
  const bool overlapJobs_;
  // TENSORD_MAX_WORKGROUPS=N caps the workgroups of a dispatch on each axis
  // at N (at most the device's limit), so that tests can take the kernels'
  // grid-stride loops through several passes on small tensors.
  const uint32_t groupCap_;
  std::atomic<uint64_t> barriers_{0}, overlapped_{0};  // see jobOrdering()

  std::mutex mu_;
  std::condition_variable wake_;  // work queued, a frame freed, or stopping
  std::condition_variable done_;  // a frame submitted, or submitting ended
  const bool fairSharing_;
  // Jobs queued since the submit thread last looked: enqueue() only appends
  // here, so callers wait for the lock no longer than an append; the submit
  // thread moves them into queue_ and decides batches there, off the lock.
  std::vector<Job> inbox_;           // GUARDED_BY(mu_)
  FairQueue queue_;                  // the submit thread's only
  std::atomic<size_t> queued_{0};    // jobs in inbox_ and queue_
  std::atomic<bool> stopSpinning_{false};  // the threads' polling for work ends at once
  std::atomic<size_t> submitted_{0};  // frames in inFlight_, for the completion thread's polling
  std::vector<Frame*> freeFrames_;   // GUARDED_BY(mu_)
  std::deque<Frame*> inFlight_;      // GUARDED_BY(mu_); in submission order
  bool stopping_ = false;            // GUARDED_BY(mu_)
  uint32_t holds_ = 0;               // GUARDED_BY(mu_); see hold()
  uint64_t inboxCost_ = 0;           // GUARDED_BY(mu_); FairQueue::costOf of the jobs in inbox_
  bool submitterDone_ = false;       // GUARDED_BY(mu_)
  std::thread completer_;            // the threads last: they start after everything above exists
  std::thread submitter_;
};

}  // namespace tensord::compute
