// FairQueue: how device work of several owners is batched. The jobs here are
// never recorded; only the order in which batches take them is checked.
// Buffers come from the real engine because the queue tracks them by address.

#include "compute/fair_queue.h"

#include <algorithm>

#include "tests/compute/engine_fixture.h"

namespace tensord::compute::testing {
namespace {

class FairQueueTest : public EngineTest {
 protected:
  static std::shared_ptr<Buffer> buffer() { return engine().allocate(256, "test"); }

  // A job named `what` of `owner` with an explicit cost (bytes it moves).
  static Job job(const std::string& owner, const std::string& what, uint64_t cost,
                 std::vector<std::shared_ptr<Buffer>> reads = {}, std::vector<std::shared_ptr<Buffer>> writes = {}) {
    Job j{.what = what, .writes = std::move(writes), .owner = owner, .cost = cost};
    for (auto& b : reads) j.reads.emplace_back("input", std::move(b));
    return j;
  }

  // Every batch until the queue is empty, as the jobs' names.
  static std::vector<std::vector<std::string>> drain(FairQueue& queue) {
    std::vector<std::vector<std::string>> batches;
    while (!queue.empty()) {
      std::deque<Job> batch;
      queue.takeBatch(batch);
      EXPECT_FALSE(batch.empty()) << "a batch took nothing while " << queue.size() << " jobs wait";
      if (batch.empty()) break;
      batches.emplace_back();
      for (const Job& j : batch) batches.back().push_back(j.what);
    }
    return batches;
  }

  static std::vector<std::string> flat(const std::vector<std::vector<std::string>>& batches) {
    std::vector<std::string> out;
    for (const auto& b : batches) out.insert(out.end(), b.begin(), b.end());
    return out;
  }

  static size_t indexOf(const std::vector<std::string>& order, const std::string& what) {
    return size_t(std::find(order.begin(), order.end(), what) - order.begin());
  }
};

constexpr uint64_t kMiB = 1ull << 20;

// Batches of 64 MiB / 512 MiB / 2 GiB (shared / solo / alone for 20 ms),
// on a clock the test moves.
FairQueue clockedQueue(const std::chrono::steady_clock::time_point& now) {
  return FairQueue({.maxJobs = 256,
                    .sharedCost = 64 * kMiB,
                    .soloCost = 512 * kMiB,
                    .aloneCost = 2048 * kMiB,
                    .aloneAfter = std::chrono::milliseconds(20)},
                   [&now] { return now; });
}

TEST_F(FairQueueTest, ALightOwnersOpDoesNotWaitBehindAHeavyBacklog) {
  FairQueue queue({.maxJobs = 256, .sharedCost = 64 * kMiB, .soloCost = 1024 * kMiB});
  for (int i = 0; i < 100; ++i) queue.push(job("heavy", "h" + std::to_string(i), 256 * kMiB));
  queue.push(job("light", "tiny", 4096));
  auto batches = drain(queue);
  // The tiny op goes in the first batch, ahead of any heavy job (one heavy
  // job alone exceeds the shared budget).
  ASSERT_FALSE(batches.empty());
  EXPECT_EQ(batches[0], std::vector<std::string>{"tiny"});
  // The heavy owner's jobs then run in its order, one per batch.
  auto order = flat(batches);
  ASSERT_EQ(order.size(), 101u);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(order[size_t(i) + 1], "h" + std::to_string(i));
}

TEST_F(FairQueueTest, EachOwnersJobsKeepTheirOrderAndOwnersAlternate) {
  FairQueue queue({.maxJobs = 4, .sharedCost = 64 * kMiB, .soloCost = 1024 * kMiB});
  for (int i = 0; i < 8; ++i) queue.push(job("a", "a" + std::to_string(i), 3 * kMiB));
  for (int i = 0; i < 8; ++i) queue.push(job("b", "b" + std::to_string(i), 3 * kMiB));
  auto order = flat(drain(queue));
  ASSERT_EQ(order.size(), 16u);
  for (int i = 0; i + 1 < 8; ++i) {
    EXPECT_LT(indexOf(order, "a" + std::to_string(i)), indexOf(order, "a" + std::to_string(i + 1)));
    EXPECT_LT(indexOf(order, "b" + std::to_string(i)), indexOf(order, "b" + std::to_string(i + 1)));
  }
  // Equal costs, equal turns: b's first job comes long before a's last.
  EXPECT_LT(indexOf(order, "b0"), 3u);
  EXPECT_LT(indexOf(order, "b6"), indexOf(order, "a7"));
}

TEST_F(FairQueueTest, ASoloOwnerFillsWholeBatches) {
  FairQueue queue({.maxJobs = 256, .sharedCost = 64 * kMiB, .soloCost = 1024 * kMiB});
  for (int i = 0; i < 300; ++i) queue.push(job("a", "a" + std::to_string(i), 4096));
  auto batches = drain(queue);
  ASSERT_EQ(batches.size(), 2u);
  EXPECT_EQ(batches[0].size(), 256u);
  EXPECT_EQ(batches[0].front(), "a0");
  EXPECT_EQ(batches[1].back(), "a299");
}

// Once one owner alone has queued work for a while, its batches grow (fewer
// submits); another owner's job ends that, and while owners take turns the
// batches stay at the usual bounds.
TEST_F(FairQueueTest, AnOwnerAloneForAWhileGetsLargerBatches) {
  auto t = std::chrono::steady_clock::time_point{} + std::chrono::hours(1);
  FairQueue queue = clockedQueue(t);
  std::deque<Job> batch;
  auto take = [&] {
    batch.clear();
    queue.takeBatch(batch);
    return batch.size();
  };
  for (int i = 0; i < 40; ++i) queue.push(job("a", "a" + std::to_string(i), 200 * kMiB));
  EXPECT_EQ(take(), 2u);  // a has queued alone for no time: 512 MiB
  t += std::chrono::milliseconds(19);
  EXPECT_EQ(take(), 2u);
  t += std::chrono::milliseconds(1);
  EXPECT_EQ(take(), 10u);  // 20 ms: 2 GiB
  queue.push(job("b", "b0", 200 * kMiB));
  for (int i = 0;; ++i) {  // while two owners wait: one job per 64 MiB batch
    ASSERT_LT(i, 4) << "b0 was not taken";
    ASSERT_EQ(take(), 1u);
    if (batch.front().what == "b0") break;
  }
  t += std::chrono::milliseconds(10);
  EXPECT_EQ(take(), 2u);  // a alone again, but b queued 10 ms ago
  queue.push(job("a", "a40", 200 * kMiB));
  t += std::chrono::milliseconds(15);
  EXPECT_EQ(take(), 2u);  // a took over from b 15 ms ago
  t += std::chrono::milliseconds(5);
  EXPECT_EQ(take(), 10u);
  // a's backlog runs while b keeps queueing (each of b's jobs taken at
  // once): b queued within 20 ms, so a's batches stay at 512 MiB.
  for (int i = 0; i < 30; ++i) queue.push(job("a", "x" + std::to_string(i), 200 * kMiB));
  for (int i = 0; i < 5; ++i) {
    t += std::chrono::milliseconds(10);
    queue.push(job("b", "b" + std::to_string(i + 1), 4096));
    for (int k = 0;; ++k) {  // b's job goes first, in a batch of its own
      ASSERT_LT(k, 4) << "b's job was not taken";
      ASSERT_EQ(take(), 1u);
      if (batch.front().what.starts_with("b")) break;
    }
    t += std::chrono::milliseconds(1);
    EXPECT_EQ(take(), 2u) << "b queued 1 ms ago";
  }
  t += std::chrono::milliseconds(20);
  EXPECT_EQ(take(), 10u);  // b quiet for 21 ms
}

// Jobs without an owner (a device shared in arrival order, where every job
// has none, and barriers) never get the larger batches: that owner may be
// many clients.
TEST_F(FairQueueTest, JobsWithoutAnOwnerKeepTheSoloBound) {
  auto t = std::chrono::steady_clock::time_point{} + std::chrono::hours(1);
  FairQueue queue = clockedQueue(t);
  for (int i = 0; i < 20; ++i) queue.push(job("", "j" + std::to_string(i), 200 * kMiB));
  std::deque<Job> batch;
  queue.takeBatch(batch);
  EXPECT_EQ(batch.size(), 2u);
  t += std::chrono::seconds(1);
  batch.clear();
  queue.takeBatch(batch);
  EXPECT_EQ(batch.size(), 2u);
}

TEST_F(FairQueueTest, AReadOfAnotherOwnersWriteWaitsForIt) {
  FairQueue queue({.maxJobs = 256, .sharedCost = 64 * kMiB, .soloCost = 1024 * kMiB});
  auto shared = buffer();
  // The writer's job sits behind a backlog of its own owner; the reader's
  // owner has nothing else queued, so only the dependency holds it back.
  for (int i = 0; i < 5; ++i) queue.push(job("writer", "w" + std::to_string(i), 100 * kMiB));
  queue.push(job("writer", "write-shared", 4096, {}, {shared}));
  queue.push(job("reader", "read-shared", 4096, {shared}, {}));
  queue.push(job("other", "unrelated", 4096));
  auto batches = drain(queue);
  auto order = flat(batches);
  EXPECT_LT(indexOf(order, "write-shared"), indexOf(order, "read-shared"));
  EXPECT_EQ(batches[0].front(), "unrelated") << "unrelated work is not held back";
}

TEST_F(FairQueueTest, AWriteWaitsForEarlierReadsOfOtherOwners) {
  FairQueue queue({.maxJobs = 256, .sharedCost = 64 * kMiB, .soloCost = 1024 * kMiB});
  auto shared = buffer();
  for (int i = 0; i < 3; ++i) queue.push(job("r1", "r1-" + std::to_string(i), 100 * kMiB));
  queue.push(job("r1", "r1-read", 4096, {shared}, {}));
  for (int i = 0; i < 3; ++i) queue.push(job("r2", "r2-" + std::to_string(i), 100 * kMiB));
  queue.push(job("r2", "r2-read", 4096, {shared}, {}));
  queue.push(job("w", "overwrite", 4096, {}, {shared}));
  queue.push(job("w", "then-read", 4096, {shared}, {}));
  auto order = flat(drain(queue));
  ASSERT_EQ(order.size(), 10u);
  EXPECT_LT(indexOf(order, "r1-read"), indexOf(order, "overwrite"));
  EXPECT_LT(indexOf(order, "r2-read"), indexOf(order, "overwrite"));
  EXPECT_LT(indexOf(order, "overwrite"), indexOf(order, "then-read"));
}

TEST_F(FairQueueTest, AWriteQueuedLaterWaitsForTheReadsNotYetTaken) {
  // Readers of one buffer are taken out of the order they were queued in:
  // the first waits behind its owner's backlog while another owner's 50
  // later reads go at once. A write queued after that still waits for the
  // read left behind, and for nothing that was taken.
  FairQueue queue({.maxJobs = 256, .sharedCost = 64 * kMiB, .soloCost = 1024 * kMiB});
  auto shared = buffer();
  for (int i = 0; i < 3; ++i) queue.push(job("slow", "s" + std::to_string(i), 100 * kMiB));
  queue.push(job("slow", "slow-read", 4096, {shared}, {}));
  for (int i = 0; i < 50; ++i) queue.push(job("fast", "fast-read" + std::to_string(i), 4096, {shared}, {}));
  std::deque<Job> first;
  queue.takeBatch(first);
  auto taken = [&first](const std::string& what) {
    return std::any_of(first.begin(), first.end(), [&](const Job& j) { return j.what == what; });
  };
  ASSERT_FALSE(taken("slow-read")) << "the test needs the first read left behind";
  ASSERT_TRUE(taken("fast-read0") && taken("fast-read49")) << "and later reads of the buffer taken";
  queue.push(job("w", "overwrite", 4096, {}, {shared}));
  auto order = flat(drain(queue));
  ASSERT_EQ(order.size(), 5u + 50u - first.size());
  EXPECT_LT(indexOf(order, "slow-read"), indexOf(order, "overwrite"));
}

TEST_F(FairQueueTest, AWriteWaitsForTheReadsLeftAfterManyWereTaken) {
  // 200 queued reads of one buffer; the last 50 also read a buffer that
  // another owner writes behind a heavy backlog, so only the first 150 go
  // in the first batch, taken in order. A write queued then must still
  // wait for the 50 left, which it would otherwise pass.
  FairQueue queue({.maxJobs = 256, .sharedCost = 64 * kMiB, .soloCost = 1024 * kMiB});
  auto shared = buffer(), gate = buffer();
  for (int i = 0; i < 3; ++i) queue.push(job("slow", "heavy" + std::to_string(i), 100 * kMiB));
  queue.push(job("slow", "write-gate", 4096, {}, {gate}));
  for (int i = 0; i < 200; ++i) {
    queue.push(
        job("reader", "read" + std::to_string(i), 4096, i < 150 ? std::vector{shared} : std::vector{shared, gate}, {}));
  }
  std::deque<Job> first;
  queue.takeBatch(first);
  ASSERT_EQ(first.size(), 150u) << "the test needs the first 150 reads taken, and only them";
  ASSERT_EQ(first.back().what, "read149");
  queue.push(job("writer", "overwrite", 4096, {}, {shared}));
  auto order = flat(drain(queue));
  ASSERT_EQ(order.size(), 55u);
  size_t lastRead = 0;
  for (int i = 150; i < 200; ++i) lastRead = std::max(lastRead, indexOf(order, "read" + std::to_string(i)));
  EXPECT_LT(lastRead, indexOf(order, "overwrite")) << "the write passed a read queued before it";
}

TEST_F(FairQueueTest, WorkOnReusedMemoryWaitsForTheOldTensorsWork) {
  // A tensor is dropped while a job that reads it is queued behind a
  // backlog; its memory at once serves a new tensor, written by another
  // owner who would otherwise go first. Conflicts are by memory, not by
  // Buffer object: the write waits for the old read.
  FairQueue queue({.maxJobs = 256, .sharedCost = 64 * kMiB, .soloCost = 1024 * kMiB});
  const uint64_t bytes = 7 * kMiB + 3;  // a size class no other test leaves cached
  auto old = engine().allocate(bytes, "test");
  const uint64_t address = old->deviceAddress();
  for (int i = 0; i < 5; ++i) queue.push(job("heavy", "h" + std::to_string(i), 100 * kMiB));
  queue.push(job("heavy", "read-old", 4096, {old->pin()}, {}));
  old.reset();
  auto fresh = engine().allocate(bytes, "test");
  ASSERT_EQ(fresh->deviceAddress(), address) << "the dropped tensor's memory should serve the next one at once";
  queue.push(job("light", "write-new", 4096, {}, {fresh->pin()}));
  queue.push(job("other", "unrelated", 4096));
  auto order = flat(drain(queue));
  ASSERT_EQ(order.size(), 8u);
  EXPECT_LT(indexOf(order, "read-old"), indexOf(order, "write-new"));
  EXPECT_EQ(order.front(), "unrelated") << "only the conflicting job waits";
}

TEST_F(FairQueueTest, AJobThatReadsAndWritesOneBufferDoesNotWaitOnItself) {
  FairQueue queue({.maxJobs = 256, .sharedCost = 64 * kMiB, .soloCost = 1024 * kMiB});
  auto x = buffer();
  queue.push(job("a", "add_", 4096, {x}, {x}));
  queue.push(job("b", "read", 4096, {x}, {}));
  queue.push(job("a", "mul_", 4096, {x}, {x}));
  auto order = flat(drain(queue));
  EXPECT_EQ(order, (std::vector<std::string>{"add_", "read", "mul_"}));
}

TEST_F(FairQueueTest, ABarrierRunsAfterEverythingQueuedBeforeIt) {
  FairQueue queue({.maxJobs = 256, .sharedCost = 64 * kMiB, .soloCost = 1024 * kMiB});
  for (int i = 0; i < 4; ++i) queue.push(job("a", "a" + std::to_string(i), 100 * kMiB));
  for (int i = 0; i < 4; ++i) queue.push(job("b", "b" + std::to_string(i), 100 * kMiB));
  Job idle{.what = "idle", .owner = "", .barrier = true};
  queue.push(std::move(idle));
  queue.push(job("c", "after", 4096));
  auto order = flat(drain(queue));
  ASSERT_EQ(order.size(), 10u);
  for (int i = 0; i < 4; ++i) {
    EXPECT_LT(indexOf(order, "a" + std::to_string(i)), indexOf(order, "idle"));
    EXPECT_LT(indexOf(order, "b" + std::to_string(i)), indexOf(order, "idle"));
  }
}

TEST_F(FairQueueTest, CostIsTheBytesTouchedUnlessGiven) {
  auto x = engine().allocate(1000, "test");
  auto y = engine().allocate(3000, "test");
  Job j{.what = "op", .writes = {y}};
  j.reads.emplace_back("input", x);
  const uint64_t dispatch = FairQueue::costOf(Job{});
  EXPECT_EQ(FairQueue::costOf(j), 4000 + dispatch);
  j.cost = 10;
  EXPECT_EQ(FairQueue::costOf(j), 10 + dispatch);
}

}  // namespace
}  // namespace tensord::compute::testing
