// Which jobs of a batch wait for the ones before them: a job that conflicts
// with none of the jobs since the last barrier skips its own (it may run
// alongside them); every other keeps it. Engine::jobOrdering() counts both
// kinds, and the results show that the ordering kept held.

#include <chrono>
#include <future>
#include <thread>

#include "tests/compute/engine_fixture.h"

namespace tensord::compute::testing {
namespace {

class JobOrderingTest : public EngineTest {
 protected:
  // Runs `enqueue` with submits held, so that what it queues is one batch,
  // and returns how the batch's jobs were ordered.
  static Engine::JobOrdering inOneBatch(const std::function<void()>& enqueue) {
    engine().waitIdle();
    const Engine::JobOrdering before = engine().jobOrdering();
    engine().holdSubmits();
    enqueue();
    engine().releaseSubmits();
    engine().waitIdle();
    const Engine::JobOrdering after = engine().jobOrdering();
    return {.barriers = after.barriers - before.barriers, .overlapped = after.overlapped - before.overlapped};
  }
  static TensorView like(const TensorView& t) { return {t.desc, engine().allocate(t.desc.bytes(), "test")}; }
  static void enqueue(const std::string& op, std::vector<TensorView> in, std::vector<TensorView> out,
                      const std::vector<std::pair<std::string, AttrValue>>& attrs = {}) {
    const OpSpec& spec = *engine().ops().find(op);
    engine().enqueueOp("test", spec, std::move(in), std::move(out), validateAttrs(spec, attrs), nullptr);
  }
};

TEST_F(JobOrderingTest, IndependentJobsSkipTheirBarriers) {
  constexpr int kJobs = 8;
  std::vector<std::vector<float>> a, b;
  std::vector<TensorView> ta, tb, sums;
  for (int i = 0; i < kJobs; ++i) {
    a.push_back(randomData(5000));
    b.push_back(randomData(5000));
    ta.push_back(upload({5000}, a.back()));
    tb.push_back(upload({5000}, b.back()));
    sums.push_back(like(ta.back()));
  }
  const auto ordering = inOneBatch([&] {
    for (int i = 0; i < kJobs; ++i) enqueue("add", {ta[i], tb[i]}, {sums[i]});
  });
  // The batch's first job waits for the batches before it; the others touch
  // memory of their own.
  EXPECT_EQ(ordering.barriers, 1u);
  EXPECT_EQ(ordering.overlapped, uint64_t(kJobs - 1));
  for (int i = 0; i < kJobs; ++i) {
    auto got = download(sums[i]);
    for (size_t j = 0; j < got.size(); ++j) ASSERT_EQ(got[j], a[i][j] + b[i][j]) << i << " " << j;
  }
}

TEST_F(JobOrderingTest, JobsThatShareMemoryKeepTheirOrder) {
  // Each batch: c = a + b, then one job that touches what it touched.
  auto x = randomData(5000), y = randomData(5000);
  struct Case {
    const char* what;
    std::function<void(TensorView& a, TensorView& b, TensorView& c, TensorView& d)> second;
    std::function<void(TensorView& a, TensorView& c, TensorView& d)> check;
  };
  const std::vector<Case> cases = {
      {"a read after the write",
       [](TensorView& a, TensorView& b, TensorView& c, TensorView& d) { enqueue("add", {c, b}, {d}); },
       [&](TensorView&, TensorView&, TensorView& d) {
         auto got = download(d);
         for (size_t j = 0; j < got.size(); ++j) ASSERT_EQ(got[j], (x[j] + y[j]) + y[j]) << j;
       }},
      {"a write after the read",
       [](TensorView& a, TensorView& b, TensorView& c, TensorView& d) { enqueue("neg", {b}, {a}); },
       [&](TensorView& a, TensorView& c, TensorView&) {
         auto gotA = download(a), gotC = download(c);
         for (size_t j = 0; j < gotA.size(); ++j) ASSERT_EQ(gotA[j], -y[j]) << j;
         for (size_t j = 0; j < gotC.size(); ++j) ASSERT_EQ(gotC[j], x[j] + y[j]) << j;
       }},
      {"a write after the write",
       [](TensorView& a, TensorView& b, TensorView& c, TensorView& d) { enqueue("mul", {b, b}, {c}); },
       [&](TensorView&, TensorView& c, TensorView&) {
         auto got = download(c);
         for (size_t j = 0; j < got.size(); ++j) ASSERT_EQ(got[j], y[j] * y[j]) << j;
       }},
  };
  for (const Case& k : cases) {
    SCOPED_TRACE(k.what);
    TensorView a = upload({5000}, x), b = upload({5000}, y);
    TensorView c = like(a), d = like(a);
    const auto ordering = inOneBatch([&] {
      enqueue("add", {a, b}, {c});
      k.second(a, b, c, d);
    });
    EXPECT_EQ(ordering.barriers, 2u);
    EXPECT_EQ(ordering.overlapped, 0u);
    k.check(a, c, d);
  }
}

TEST_F(JobOrderingTest, ABarrierOrdersEverythingBeforeIt) {
  // After job 2's barrier, job 1 is done: job 3 reads what job 1 wrote and
  // writes what it read without one; job 4 reads what job 3 wrote.
  auto x = randomData(5000), y = randomData(5000);
  TensorView a = upload({5000}, x), b = upload({5000}, y);
  TensorView c = like(a), d = like(a), e = like(a);
  const auto ordering = inOneBatch([&] {
    enqueue("add", {a, b}, {c});  // the batch's first job: a barrier
    enqueue("mul", {c, c}, {d});  // reads c: a barrier
    enqueue("add", {c, b}, {a});  // reads c, writes a, both job 1's, before that barrier: none
    enqueue("neg", {a}, {e});     // reads a: a barrier
  });
  EXPECT_EQ(ordering.barriers, 3u);
  EXPECT_EQ(ordering.overlapped, 1u);
  auto gotD = download(d), gotE = download(e);
  for (size_t j = 0; j < x.size(); ++j) {
    const float cj = x[j] + y[j];
    ASSERT_EQ(gotD[j], cj * cj) << j;
    ASSERT_EQ(gotE[j], -(cj + y[j])) << j;
  }
}

TEST_F(JobOrderingTest, ReadersOfOneTensorRunTogether) {
  // Reads do not conflict with reads: several ops on one input, each into
  // an output of its own, need no barrier between them.
  auto x = randomData(5000);
  TensorView a = upload({5000}, x);
  TensorView r = like(a), n = like(a), s = like(a);
  const auto ordering = inOneBatch([&] {
    enqueue("relu", {a}, {r});
    enqueue("neg", {a}, {n});
    enqueue("add", {a, a}, {s});
  });
  EXPECT_EQ(ordering.barriers, 1u);
  EXPECT_EQ(ordering.overlapped, 2u);
  auto gotR = download(r), gotN = download(n), gotS = download(s);
  for (size_t j = 0; j < x.size(); ++j) {
    ASSERT_EQ(gotR[j], std::max(x[j], 0.0f)) << j;
    ASSERT_EQ(gotN[j], -x[j]) << j;
    ASSERT_EQ(gotS[j], x[j] + x[j]) << j;
  }
}

TEST_F(JobOrderingTest, ScratchPassedOnWaitsForItsLastUser) {
  // Whole-tensor sums keep their partial results in a batch's scratch
  // memory, which a later job of the batch may be handed: that job then
  // waits for the one before it, independent as their tensors are.
  constexpr int kJobs = 4;
  constexpr int64_t kElems = 1 << 20;
  std::vector<std::vector<float>> x;
  std::vector<TensorView> in, out;
  for (int i = 0; i < kJobs; ++i) {
    x.push_back(randomData(kElems, 0.0f, 1.0f));
    in.push_back(upload({kElems}, x.back()));
    out.push_back({TensorDesc{DType::F32, {}}, engine().allocate(4, "test")});
  }
  const auto ordering = inOneBatch([&] {
    for (int i = 0; i < kJobs; ++i) enqueue("sum", {in[i]}, {out[i]});
  });
  EXPECT_EQ(ordering.barriers, uint64_t(kJobs));
  EXPECT_EQ(ordering.overlapped, 0u);
  for (int i = 0; i < kJobs; ++i) {
    double want = 0;
    for (float v : x[i]) want += v;
    EXPECT_NEAR(download(out[i])[0], want, 1e-4 * want) << i;
  }
}

// A hold gathers small work into one batch: nothing of it runs until the
// hold ends. A batch in flight when the work is held wakes the submit thread
// (its frame comes free), which must still leave the held work alone.
TEST_F(JobOrderingTest, AHoldKeepsSmallWorkBack) {
  const OpSpec& add = *engine().ops().find("add");
  const Attrs none = validateAttrs(add, {});
  TensorView x = upload({256}, randomData(256)), y = like(x);
  constexpr size_t kLong = 4u << 20;  // 16 MiB tensors: milliseconds on a CPU device
  TensorView big = upload({int64_t(kLong)}, randomData(kLong)), bigSum = like(big);
  engine().enqueueOp("test", add, {x, x}, {y}, none, nullptr);  // compiles the kernel
  engine().waitIdle();
  engine().enqueueOp("test", add, {big, big}, {bigSum}, none, nullptr);
  while (engine().queuedJobs() > 0) std::this_thread::yield();  // taken into a batch
  std::promise<void> ran;
  engine().holdSubmits();
  engine().enqueueOp("test", add, {x, x}, {y}, none, [&](std::exception_ptr) { ran.set_value(); });
  auto done = ran.get_future();
  const auto status = done.wait_for(std::chrono::milliseconds(200));
  engine().releaseSubmits();
  done.get();
  EXPECT_EQ(status, std::future_status::timeout) << "a held job ran before the hold ended";
}

// ... but not large work: once what is held would keep the device busy a
// while, it runs without waiting for the hold's end, so a long burst of
// large ops (a pipelined client's calls, queued in one pass of the daemon's
// loop) does not leave the device idle until the last one is queued.
TEST_F(JobOrderingTest, AHoldLetsLargeWorkRun) {
  constexpr size_t kElements = 3u << 20;  // 12 MiB each: 36 MiB read and written
  std::vector<float> a = randomData(kElements), b = randomData(kElements);
  TensorView x = upload({int64_t(kElements)}, a), y = upload({int64_t(kElements)}, b), sum = like(x);
  engine().waitIdle();
  std::promise<void> ran;
  const OpSpec& add = *engine().ops().find("add");
  engine().holdSubmits();
  engine().enqueueOp("test", add, {x, y}, {sum}, validateAttrs(add, {}), [&](std::exception_ptr) { ran.set_value(); });
  auto done = ran.get_future();
  const auto status = done.wait_for(std::chrono::seconds(60));
  engine().releaseSubmits();
  done.get();  // `ran` must outlive the job either way
  ASSERT_EQ(status, std::future_status::ready) << "a large held job waited for the hold's end";
  const std::vector<float> got = download(sum);
  for (size_t i = 0; i < kElements; i += 4099) ASSERT_EQ(got[i], a[i] + b[i]) << "element " << i;
}

}  // namespace
}  // namespace tensord::compute::testing
