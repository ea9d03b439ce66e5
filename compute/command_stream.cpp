#include "compute/command_stream.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <future>
#include <string_view>

#include "compute/allocator.h"
#include "compute/device.h"
#include "compute/kernel_cache.h"

namespace tensord::compute {
namespace {

// Large enough to amortize a submit, small enough that completions of the
// first jobs in a busy stream are not held back for long: a batch's jobs
// complete together, at its fence (up to 2 GiB of work, about 0.7 ms on an
// H100, for an owner alone; see FairQueue::BatchLimits).
constexpr FairQueue::BatchLimits kBatchLimits{.maxJobs = 256,
                                              .sharedCost = 64ull << 20,
                                              .soloCost = 512ull << 20,
                                              .aloneCost = 2ull << 30,
                                              .aloneAfter = std::chrono::milliseconds(20)};
// One timestamp before the batch's first job and one after each job.
constexpr uint32_t kTimestampQueries = uint32_t(kBatchLimits.maxJobs) + 1;

constexpr auto kWorkStages = vk::PipelineStageFlagBits::eComputeShader | vk::PipelineStageFlagBits::eTransfer;
constexpr auto kWriteAccess = vk::AccessFlagBits::eShaderWrite | vk::AccessFlagBits::eTransferWrite;
constexpr auto kAllAccess = vk::AccessFlagBits::eShaderRead | vk::AccessFlagBits::eShaderWrite |
                            vk::AccessFlagBits::eTransferRead | vk::AccessFlagBits::eTransferWrite;

// A polling time: `variable`'s value in microseconds where it is set (0: no
// polling; at most 10 ms; anything else is ignored), else `onGpu` on a GPU
// of a host with at least 4 hardware threads. None on CPU devices, where the
// polling thread would take a core from the work it waits for, nor on small
// hosts, where it would take one from the daemon's other threads.
std::chrono::nanoseconds spinFor(const Device& device, const char* variable, std::chrono::microseconds onGpu) {
  constexpr long kMaxMicros = 10'000;
  if (const char* env = std::getenv(variable)) {
    char* end = nullptr;
    const long us = std::strtol(env, &end, 10);
    if (end != env && *end == '\0' && us >= 0 && us <= kMaxMicros) return std::chrono::microseconds(us);
  }
  const bool bigHost = std::thread::hardware_concurrency() >= 4;
  return device.info().kind == "cpu" || !bigHost ? std::chrono::nanoseconds(0) : std::chrono::nanoseconds(onGpu);
}

// TENSORD_MAX_WORKGROUPS: a cap on each axis of a dispatch's grid (0: the
// device's limits alone), for tests.
uint32_t groupCap() {
  const char* env = std::getenv("TENSORD_MAX_WORKGROUPS");
  if (env == nullptr) return 0;
  char* end = nullptr;
  const unsigned long n = std::strtoul(env, &end, 10);
  return end != env && *end == '\0' && n <= 0xffffffffUL ? uint32_t(n) : 0;
}

// How long the completion thread polls a batch's fence before it blocks in
// vkWaitForFences: a tiny op's batch is done within microseconds, and a
// blocking wait adds the driver's wake-up (an interrupt and a scheduler
// round) to every such round trip.
std::chrono::nanoseconds completionSpin(const Device& device) {
  return spinFor(device, "TENSORD_COMPLETION_SPIN_US", std::chrono::microseconds(100));
}

// How long the submit thread, done with a batch, polls for the next job
// before it sleeps, and the completion thread, done with its last batch,
// for the next one (TENSORD_SUBMIT_SPIN_US sets both): a client
// waiting for each call sends its next one a round trip later, and waking a
// sleeping thread costs the call a futex wake and a scheduler round.
std::chrono::nanoseconds submitSpin(const Device& device) {
  return spinFor(device, "TENSORD_SUBMIT_SPIN_US", std::chrono::microseconds(200));
}

// Whether independent jobs may run alongside each other (TENSORD_OVERLAP_JOBS,
// default 1): 0 orders every job after everything before it, to rule the
// hazard tracking out when a result looks wrong.
bool overlapJobs() {
  const char* env = std::getenv("TENSORD_OVERLAP_JOBS");
  return env == nullptr || std::string_view(env) != "0";
}

// A polling loop's pause: kinder to the other hyperthread and to the bus.
inline void cpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

}  // namespace

BatchRecorder::BatchRecorder(const vk::raii::CommandBuffer& cmd, KernelCache& kernels, ParamArena& arena,
                             CachingAllocator& allocator, const uint32_t (&maxGroups)[3])
    : cmd_(cmd),
      kernels_(kernels),
      arena_(arena),
      allocator_(allocator),
      maxGroups_{maxGroups[0], maxGroups[1], maxGroups[2]} {}

const DeviceFeatures* BatchRecorder::features() const { return &kernels_.device().info().features; }

uint64_t BatchRecorder::params(std::span<const std::byte> bytes) { return arena_.copy(bytes).address; }

std::shared_ptr<Buffer> BatchRecorder::scratch(uint64_t bytes) {
  bytes = std::max<uint64_t>(bytes, 16);
  // An earlier job's scratch will do (the smallest that fits) once that job
  // is done with it: it finished before a barrier this job's commands come
  // after, or this job's first command is still to come and will wait for
  // everything before it.
  Scratch* reuse = nullptr;
  for (Scratch& s : scratch_) {
    const bool ordered = s.job < orderedBefore_ || !jobStarted_;
    if (s.job != job_ && ordered && s.buffer->bytes() >= bytes && (!reuse || s.buffer->bytes() < reuse->buffer->bytes())) {
      reuse = &s;
    }
  }
  if (reuse) {
    if (reuse->job >= orderedBefore_) mayOverlap_ = false;
    reuse->job = job_;
    return reuse->buffer;
  }
  // Recorded now, ahead of queued work that may still use ordered blocks:
  // only idle memory will do.
  scratch_.push_back({allocator_.allocate(bytes, "(scratch)", CachingAllocator::Reuse::kIdleOnly), job_});
  return scratch_.back().buffer;
}

uint64_t BatchRecorder::errorSlot(DeviceErrorDescriber describe) {
  auto slot = arena_.allocate(8 * sizeof(uint32_t));
  errorSlots_.push_back({job_, reinterpret_cast<const uint32_t*>(slot.host), std::move(describe)});
  return slot.address;
}

std::pair<const uint32_t*, uint64_t> BatchRecorder::hostWords(uint32_t count) {
  auto slot = arena_.allocate(count * sizeof(uint32_t));
  return {reinterpret_cast<const uint32_t*>(slot.host), slot.address};
}

std::exception_ptr BatchRecorder::deviceError(size_t job) const {
  for (const auto& slot : errorSlots_) {
    if (slot.job != job || slot.words[0] == 0) continue;
    return std::make_exception_ptr(ComputeError(ComputeError::Kind::kInvalid, slot.describe(slot.words)));
  }
  return nullptr;
}

void BatchRecorder::beginJob(size_t index, std::vector<const Block*> reads, std::vector<const Block*> writes,
                             bool mayOverlap) {
  job_ = index;
  jobReads_ = std::move(reads);
  jobWrites_ = std::move(writes);
  // The batch's first command waits for the batches before it.
  mayOverlap_ = mayOverlap && anyBarrier_;
  jobStarted_ = false;
}

namespace {

bool intersect(const std::vector<const Block*>& a, const std::vector<const Block*>& b) {
  auto i = a.begin(), j = b.begin();
  while (i != a.end() && j != b.end()) {
    if (*i == *j) return true;
    *i < *j ? ++i : ++j;
  }
  return false;
}

void mergeInto(std::vector<const Block*>& into, const std::vector<const Block*>& more) {
  const auto middle = into.insert(into.end(), more.begin(), more.end());
  std::inplace_merge(into.begin(), middle, into.end());
  into.erase(std::unique(into.begin(), into.end()), into.end());
}

}  // namespace

bool BatchRecorder::conflictsWithUnordered() const {
  return intersect(jobWrites_, unorderedWrites_) || intersect(jobWrites_, unorderedReads_) ||
         intersect(jobReads_, unorderedWrites_);
}

void BatchRecorder::barrier() {
  const bool first = !jobStarted_;
  jobStarted_ = true;
  if (first && mayOverlap_ && !conflictsWithUnordered()) {
    // Independent of everything since the last barrier: may run alongside it.
    ++jobsOverlapped_;
    mergeInto(unorderedReads_, jobReads_);
    mergeInto(unorderedWrites_, jobWrites_);
    return;
  }
  // One global barrier orders this command after everything before it,
  // earlier batches included (a fence wait makes nothing visible to the
  // device).
  vk::MemoryBarrier mb{.srcAccessMask = kWriteAccess, .dstAccessMask = kAllAccess};
  cmd_.pipelineBarrier(kWorkStages, kWorkStages, {}, mb, nullptr, nullptr);
  anyBarrier_ = true;
  if (first) ++jobsAfterBarrier_;
  orderedBefore_ = job_;
  unorderedReads_ = jobReads_;
  unorderedWrites_ = jobWrites_;
}

void BatchRecorder::dispatch(const KernelSource& source, std::span<const std::byte> push, uint32_t gx, uint32_t gy,
                             uint32_t gz) {
  if (gx == 0 || gy == 0 || gz == 0) return;
  const auto& pipeline = kernels_.pipeline(source);  // may compile; throws before recording
  barrier();
  // Runs of one kernel (a chain of adds, an optimizer's step) bind it once.
  if (*pipeline != bound_) {
    cmd_.bindPipeline(vk::PipelineBindPoint::eCompute, *pipeline);
    bound_ = *pipeline;
  }
  cmd_.pushConstants<std::byte>(*kernels_.layout(), vk::ShaderStageFlagBits::eCompute, 0, push);
  cmd_.dispatch(gx, gy, gz);
}

void BatchRecorder::recordCommands(const std::function<void(VkCommandBuffer_T* commandBuffer)>& record) {
  barrier();
  record(static_cast<VkCommandBuffer>(*cmd_));
  bound_ = nullptr;  // `record` binds a pipeline of its own
}

void BatchRecorder::copy(vk::Buffer src, uint64_t srcOffset, vk::Buffer dst, uint64_t dstOffset, uint64_t bytes) {
  if (bytes == 0) return;
  barrier();
  cmd_.copyBuffer(src, dst, vk::BufferCopy{.srcOffset = srcOffset, .dstOffset = dstOffset, .size = bytes});
}

CommandStream::Frame::Frame(const Device& device)
    : arena(device),
      pool(device.device(), {.flags = vk::CommandPoolCreateFlagBits::eTransient,
                             .queueFamilyIndex = device.queueFamily()}),
      cmd(std::move(vk::raii::CommandBuffers(device.device(), {.commandPool = *pool,
                                                               .level = vk::CommandBufferLevel::ePrimary,
                                                               .commandBufferCount = 1})
                        .front())),
      fence(device.device(), vk::FenceCreateInfo{}) {}

CommandStream::CommandStream(const Device& device, KernelCache& kernels, CachingAllocator& allocator, bool fairSharing,
                             DeviceTimeObserver deviceTimes, std::chrono::microseconds timeInterval)
    : device_(device),
      kernels_(kernels),
      allocator_(allocator),
      deviceTimes_(std::move(deviceTimes)),
      timeInterval_(timeInterval),
      completionSpin_(completionSpin(device)),
      submitSpin_(submitSpin(device)),
      overlapJobs_(overlapJobs()),
      groupCap_(groupCap()),
      fairSharing_(fairSharing),
      queue_(kBatchLimits) {
  // timestampComputeAndGraphics promises timestamps on every compute queue;
  // without it the queue family's timestampValidBits says (0: none).
  const auto families = device.physical().getQueueFamilyProperties();
  if (device.limits().timestampPeriod > 0 && device.queueFamily() < families.size()) {
    timestampBits_ = families[device.queueFamily()].timestampValidBits;
    timestampPeriodNs_ = device.limits().timestampPeriod;
  }
  for (size_t i = 0; i < kFrames; ++i) {
    frames_.push_back(std::make_unique<Frame>(device));
    if (timestampBits_ != 0) {
      frames_.back()->timestamps = vkCall("vkCreateQueryPool", [&] {
        return vk::raii::QueryPool(device.device(),
                                   {.queryType = vk::QueryType::eTimestamp, .queryCount = kTimestampQueries});
      });
    }
    freeFrames_.push_back(frames_.back().get());
  }
  completer_ = std::thread([this] { completeLoop(); });
  submitter_ = std::thread([this] { submitLoop(); });
}

CommandStream::~CommandStream() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  stopSpinning_.store(true, std::memory_order_relaxed);
  wake_.notify_all();
  submitter_.join();  // after it has submitted everything queued
  completer_.join();  // after it has completed everything submitted
}

void CommandStream::enqueue(Job job) {
  if (!fairSharing_) job.owner.clear();  // one owner: arrival order
  const uint64_t cost = FairQueue::costOf(job);
  bool wake;
  {
    std::lock_guard lock(mu_);
    // Only an empty inbox can have the submit thread asleep for want of
    // work, or a held one whose work has just outgrown the hold (release()
    // wakes a held stream).
    wake = (inbox_.empty() && holds_ == 0) ||
           (holds_ > 0 && inboxCost_ < kHeldCostLimit && inboxCost_ + cost >= kHeldCostLimit);
    inbox_.push_back(std::move(job));
    inboxCost_ += cost;
    queued_.fetch_add(1, std::memory_order_relaxed);
  }
  // The submit thread sleeps for want of work with nothing queued, or with
  // held work below the limit (else on no free frame, which the completion
  // thread wakes it for): one wake per burst of calls rather than a futex
  // call per call.
  if (wake) wake_.notify_all();
}

void CommandStream::hold() {
  std::lock_guard lock(mu_);
  ++holds_;
}

void CommandStream::release() {
  {
    std::lock_guard lock(mu_);
    if (holds_ == 0 || --holds_ > 0 || queued_.load(std::memory_order_relaxed) == 0) return;
  }
  wake_.notify_all();
}

void CommandStream::waitIdle() {
  std::promise<void> idle;
  enqueue({.record = {}, .done = [&](std::exception_ptr) { idle.set_value(); }, .barrier = true});
  idle.get_future().wait();
}

void CommandStream::pollForWork(const std::atomic<size_t>& waiting) {
  if (submitSpin_.count() == 0 || waiting.load(std::memory_order_relaxed) != 0) return;
  const auto until = std::chrono::steady_clock::now() + submitSpin_;
  while (waiting.load(std::memory_order_relaxed) == 0 && !stopSpinning_.load(std::memory_order_relaxed) &&
         std::chrono::steady_clock::now() < until) {
    cpuRelax();
  }
}

void CommandStream::submitLoop() {
  std::vector<Job> arrived;
  for (;;) {
    Frame* frame = nullptr;
    pollForWork(queued_);
    {
      std::unique_lock lock(mu_);
      wake_.wait(lock, [&] {
        const bool work = !inbox_.empty() || !queue_.empty();
        // A hold waits for small work only (see hold()); queue_ holds jobs
        // only when a batch's limits cut it short.
        const bool take = holds_ == 0 || stopping_ || !queue_.empty() || inboxCost_ >= kHeldCostLimit;
        return (work && !freeFrames_.empty() && take) || (stopping_ && !work);
      });
      if (inbox_.empty() && queue_.empty()) break;  // stopping and drained
      frame = freeFrames_.back();
      freeFrames_.pop_back();
      arrived.swap(inbox_);
      inboxCost_ = 0;
    }
    // In arrival order, as FairQueue's ordering between owners needs.
    for (Job& job : arrived) queue_.push(std::move(job));
    arrived.clear();
    queue_.takeBatch(frame->jobs);
    queued_.fetch_sub(frame->jobs.size(), std::memory_order_relaxed);
    record(*frame);
    {
      std::lock_guard lock(mu_);
      inFlight_.push_back(frame);
      submitted_.fetch_add(1, std::memory_order_relaxed);
    }
    done_.notify_all();
  }
  {
    std::lock_guard lock(mu_);
    submitterDone_ = true;
  }
  done_.notify_all();
}

void CommandStream::completeLoop() {
  for (;;) {
    Frame* frame = nullptr;
    // Idle, it polls for the next batch for up to submitSpin_ after its last
    // completion (the submit thread's polling time for the next job): a
    // client that reads a result back queues the copy about a round trip
    // after the op, and the copy's completion would otherwise wait for this
    // thread's wake-up (a futex wake and a scheduler round) before its own.
    pollForWork(submitted_);
    {
      std::unique_lock lock(mu_);
      done_.wait(lock, [&] { return !inFlight_.empty() || submitterDone_; });
      if (inFlight_.empty()) return;  // the submitter ended and everything is complete
      frame = inFlight_.front();
      inFlight_.pop_front();
      submitted_.fetch_sub(1, std::memory_order_relaxed);
    }
    complete(*frame);
    {
      std::lock_guard lock(mu_);
      freeFrames_.push_back(frame);
    }
    wake_.notify_all();
  }
}

// The failure of an input's producer, as this job's error.
std::exception_ptr CommandStream::inheritedFailure(const Job& job) {
  for (const auto& [name, buffer] : job.reads) {
    if (!buffer->failure) continue;
    std::string cause = "an earlier call failed";
    ComputeError::Kind kind = ComputeError::Kind::kInvalid;
    try {
      std::rethrow_exception(buffer->failure);
    } catch (const ComputeError& e) {
      cause = e.what();
      kind = e.kind();
    } catch (const std::exception& e) {
      cause = e.what();
    }
    return std::make_exception_ptr(
        ComputeError(kind, job.what + ": input '" + name + "' is the result of a call that failed: " + cause));
  }
  return nullptr;
}

void CommandStream::record(Frame& frame) {
  std::deque<Job>& batch = frame.jobs;
  frame.errors.assign(batch.size(), nullptr);
  frame.batchError = nullptr;
  frame.submitted = false;
  frame.timed = false;
  frame.arena.reset();
  uint32_t maxGroups[3];
  std::copy_n(device_.limits().maxComputeWorkGroupCount.begin(), 3, maxGroups);
  if (groupCap_ > 0) {
    for (uint32_t& m : maxGroups) m = std::min(m, groupCap_);
  }
  frame.recorder = std::make_unique<BatchRecorder>(frame.cmd, kernels_, frame.arena, allocator_, maxGroups);
  BatchRecorder& recorder = *frame.recorder;
  try {
    frame.pool.reset();
    frame.cmd.begin({.flags = vk::CommandBufferUsageFlagBits::eOneTimeSubmit});
    // Bottom-of-pipe timestamps are written once everything before them in
    // the queue finished, so the difference of two neighbours is the time
    // the job between them added: all of its time where a barrier came
    // before it, only what it ran past the jobs before where it ran
    // alongside them (the times still add up to the batch's).
    // Timed only for an observer, at most once per interval (a timestamp
    // costs the device a few microseconds: on the H100, 5-7% of a 64 MiB
    // elementwise op's time), and always with a user kernel in it, whose
    // run time the daemon checks against kernels.max_dispatch_ms: there
    // every job waits for the one before, so each time is a job's own.
    const auto now = std::chrono::steady_clock::now();
    const bool userKernel = std::any_of(batch.begin(), batch.end(), [](const Job& job) { return job.userKernel; });
    const bool timed = *frame.timestamps && deviceTimes_ &&
                       ((timing_.load(std::memory_order_relaxed) && now - lastTimed_ >= timeInterval_) || userKernel);
    frame.timed = timed;
    if (timed) {
      lastTimed_ = now;
      frame.cmd.resetQueryPool(*frame.timestamps, 0, uint32_t(batch.size()) + 1);
      frame.cmd.writeTimestamp(vk::PipelineStageFlagBits::eBottomOfPipe, *frame.timestamps, 0);
    }
    for (size_t i = 0; i < batch.size(); ++i) {
      if (batch[i].record) {
        try {
          recorder.beginJob(i, std::move(batch[i].readBlocks), std::move(batch[i].writeBlocks),
                            overlapJobs_ && !userKernel);
          batch[i].record(recorder);
        } catch (...) {
          frame.errors[i] = std::current_exception();
        }
      }
      if (timed) frame.cmd.writeTimestamp(vk::PipelineStageFlagBits::eBottomOfPipe, *frame.timestamps, uint32_t(i) + 1);
    }
    // Make every write visible to the host (downloads read staging memory).
    vk::MemoryBarrier toHost{.srcAccessMask = kWriteAccess, .dstAccessMask = vk::AccessFlagBits::eHostRead};
    frame.cmd.pipelineBarrier(kWorkStages, vk::PipelineStageFlagBits::eHost, {}, toHost, nullptr, nullptr);
    frame.cmd.end();
    barriers_.fetch_add(recorder.jobsAfterBarrier(), std::memory_order_relaxed);
    overlapped_.fetch_add(recorder.jobsOverlapped(), std::memory_order_relaxed);
    vkCall("vkQueueSubmit", [&] {
      device_.queue().submit(vk::SubmitInfo{.commandBufferCount = 1, .pCommandBuffers = &*frame.cmd}, *frame.fence);
    });
    frame.submitted = true;
  } catch (...) {
    frame.batchError = std::current_exception();
  }
}

void CommandStream::complete(Frame& frame) {
  if (frame.submitted) {
    try {
      const auto until = std::chrono::steady_clock::now() + completionSpin_;
      while (completionSpin_.count() > 0 && frame.fence.getStatus() == vk::Result::eNotReady &&
             std::chrono::steady_clock::now() < until) {
        cpuRelax();
      }
      checkVk(device_.device().waitForFences(*frame.fence, true, UINT64_MAX), "vkWaitForFences");
      device_.device().resetFences(*frame.fence);
    } catch (...) {
      frame.batchError = std::current_exception();
    }
  }
  if (frame.submitted && !frame.batchError && frame.timed) reportDeviceTimes(frame);
  std::deque<Job>& batch = frame.jobs;
  for (size_t i = 0; i < batch.size(); ++i) {
    // The job (and the buffers it holds) goes at the end of this iteration,
    // before later completions run: waitIdle's completion finds the memory
    // of everything before it released.
    Job job = std::move(batch[i]);
    std::exception_ptr error = frame.errors[i];
    if (!error && !frame.batchError) error = frame.recorder->deviceError(i);
    if (!error && !frame.batchError) error = inheritedFailure(job);
    if (!error) error = frame.batchError;
    // A failure sticks: a later partial write (an upload's next piece) must
    // not make a buffer look valid again.
    if (error) {
      for (auto& buffer : job.writes) buffer->failure = error;
    }
    if (job.done) job.done(error);
  }
  batch.clear();
  frame.recorder.reset();  // frees the batch's scratch buffers
}

void CommandStream::reportDeviceTimes(const Frame& frame) {
  const std::deque<Job>& batch = frame.jobs;
  const uint32_t count = uint32_t(batch.size()) + 1;
  std::vector<uint64_t> ticks;
  try {
    // The fence has signalled, so the results are available without waiting.
    auto [result, values] = frame.timestamps.getResults<uint64_t>(0, count, count * sizeof(uint64_t), sizeof(uint64_t),
                                                                  vk::QueryResultFlagBits::e64);
    if (result != vk::Result::eSuccess) return;
    ticks = std::move(values);
  } catch (const vk::SystemError&) {
    return;  // a lost measurement is not worth failing the batch for
  }
  const uint64_t mask = timestampBits_ >= 64 ? ~uint64_t(0) : (uint64_t(1) << timestampBits_) - 1;
  std::vector<DeviceTime> times;
  times.reserve(batch.size());
  for (size_t i = 0; i < batch.size(); ++i) {
    if (!batch[i].record || batch[i].what.empty() || frame.errors[i]) continue;
    uint64_t elapsed = (ticks[i + 1] - ticks[i]) & mask;  // the mask also undoes a wrap-around
    // Neighbours never run backwards; were a driver to write them out of
    // order, the job would read as taking nearly the counter's whole range.
    if (elapsed > mask / 2) elapsed = 0;
    times.push_back({batch[i].what, uint64_t(double(elapsed) * timestampPeriodNs_ + 0.5)});
  }
  if (!times.empty()) deviceTimes_(times);
}

}  // namespace tensord::compute
