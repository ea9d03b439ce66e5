// Stream-ordered reuse on a real engine: memory of a tensor dropped while
// its work is still queued serves later work at once, and that later work
// runs after the old work (results are checked against the CPU).
//
// To keep work queued for as long as a test needs, a CompletionGate holds
// the engine's completion thread: batches stop completing, so the buffers
// of every job queued after the gate stay pinned, as under a deep pipeline
// on a busy device.

#include <chrono>
#include <cstring>
#include <functional>
#include <future>
#include <map>
#include <optional>
#include <thread>

#include "compute/error.h"
#include "tests/compute/engine_fixture.h"

namespace tensord::compute::testing {
namespace {

class CompletionGate {
 public:
  explicit CompletionGate(Engine& engine) : engine_(engine) {
    src_ = engine.allocate(16, "gate");
    dst_ = engine.allocate(16, "gate");
    std::shared_future<void> opened = open_.get_future().share();
    engine.enqueueCopy("gate", src_, dst_, 16, [opened](std::exception_ptr) { opened.wait(); });
  }
  ~CompletionGate() { open(); }
  CompletionGate(const CompletionGate&) = delete;
  CompletionGate& operator=(const CompletionGate&) = delete;

  void open() {
    if (!opened_) open_.set_value();
    opened_ = true;
  }

 private:
  Engine& engine_;
  std::shared_ptr<Buffer> src_, dst_;
  std::promise<void> open_;
  bool opened_ = false;
};

class StreamReuseTest : public EngineTest {
 protected:
  static bool waitFor(const std::function<bool()>& done, std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (!done()) {
      if (std::chrono::steady_clock::now() >= deadline) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    return true;
  }
  static void enqueue(const std::string& op, const std::vector<TensorView>& inputs, const TensorView& out) {
    const OpSpec& spec = *engine().ops().find(op);
    engine().enqueueOp("test", spec, inputs, {out}, validateAttrs(spec, {}), nullptr);
  }
  static TensorView fresh(const TensorDesc& desc) { return {desc, engine().allocate(desc.bytes(), "test")}; }
};

TEST_F(StreamReuseTest, APipelinedChainAllocatesNothingAfterWarmUp) {
  // y <- y + x, 20 times, each output a new tensor and the previous one
  // dropped at once (as a client's chain of temporaries), all queued before
  // any of it completes. An odd size, so no block cached by other tests fits.
  const int64_t n = 786'433;  // about 3 MiB
  auto x = randomData(size_t(n));
  TensorView tx = upload({n}, x);
  engine().waitIdle();
  const MemoryStats before = engine().memoryStats();
  uint64_t reservedAfterWarmUp = 0;
  TensorView y = tx;
  {
    CompletionGate gate(engine());
    const uint64_t liveAtStart = engine().memoryStats().liveBytes;
    for (int i = 0; i < 20; ++i) {
      TensorView out = fresh(tx.desc);
      enqueue("add", {y, tx}, out);
      y = out;  // the previous output's lease goes; its work is still queued
      if (i == 2) reservedAfterWarmUp = engine().memoryStats().reservedBytes;
    }
    const MemoryStats queued = engine().memoryStats();
    EXPECT_EQ(queued.reservedBytes, reservedAfterWarmUp)
        << "20 queued calls should cycle through two blocks, not allocate one each";
    EXPECT_EQ(queued.liveBytes, liveAtStart + tx.desc.bytes()) << "only x's and y's leases are live";
  }
  auto got = download(y);
  std::vector<float> want = x;
  for (int i = 0; i < 20; ++i) {
    for (size_t e = 0; e < want.size(); ++e) want[e] += x[e];
  }
  for (size_t e = 0; e < want.size(); ++e) ASSERT_FLOAT_EQ(got[e], want[e]) << "element " << e;
  y = {};
  tx = {};
  engine().waitIdle();
  EXPECT_EQ(engine().memoryStats().liveBytes, before.liveBytes - uint64_t(n) * 4) << "x was live before";
}

TEST_F(StreamReuseTest, AQueuedDownloadSeesTheDataOfTheTensorItRead) {
  // The tensor is dropped right after its download is queued; its memory
  // goes to a new tensor that a later copy overwrites. The download (queued
  // first) must still read the old data.
  const int64_t n = 725'001;  // a block of its own, of a class no other test leaves cached
  auto a = randomData(size_t(n)), b = randomData(size_t(n));
  TensorView ta = upload({n}, a), tb = upload({n}, b);
  engine().waitIdle();
  const uint64_t bytes = ta.desc.bytes();
  auto slot = engine().tryAcquireStaging();
  ASSERT_TRUE(slot.has_value());
  ASSERT_GE(slot->capacity, bytes);
  std::promise<void> downloaded;
  TensorView tu;
  {
    CompletionGate gate(engine());
    engine().enqueueDownload("test", ta.buffer, 0, bytes, *slot, [&](std::exception_ptr e) {
      if (e)
        downloaded.set_exception(e);
      else
        downloaded.set_value();
    });
    const uint64_t address = ta.buffer->deviceAddress();
    ta = {};
    tu = fresh(tb.desc);
    EXPECT_EQ(tu.buffer->deviceAddress(), address) << "the dropped tensor's memory should serve the next one at once";
    engine().enqueueCopy("test", tb.buffer, tu.buffer, bytes, nullptr);
  }
  downloaded.get_future().get();
  std::vector<float> got(static_cast<size_t>(n));
  std::memcpy(got.data(), slot->data, bytes);
  engine().releaseStaging(*slot);
  EXPECT_EQ(got, a) << "the download read memory a later copy had overwritten";
  EXPECT_EQ(download(tu), b);
}

TEST_F(StreamReuseTest, AnotherOwnersWorkOnReusedMemoryWaitsForTheOldReads) {
  // As above, but the download sits behind a backlog of its owner's work and
  // the overwrite comes from another owner, whom fair sharing would let go
  // first: only the queue's ordering by memory keeps the download first.
  const int64_t n = 725'001;
  auto a = randomData(size_t(n)), b = randomData(size_t(n));
  TensorView ta = upload({n}, a), tb = upload({n}, b);
  TensorView small = upload({16}, randomData(16));
  auto heavySrc = engine().allocate(4 << 20, "test"), heavyDst = engine().allocate(4 << 20, "test");
  engine().waitIdle();
  const uint64_t bytes = ta.desc.bytes();
  auto slot = engine().tryAcquireStaging();
  ASSERT_TRUE(slot.has_value());
  std::promise<void> downloaded;
  TensorView tu;
  {
    CompletionGate gate(engine());
    // Fill the frames that may be on the device while completions are held,
    // so that what follows waits in the queue and is batched together.
    for (int i = 0; i < 8; ++i) {
      TensorView out = fresh(small.desc);
      enqueue("add", {small, small}, out);
      const bool taken = waitFor([] { return engine().queuedJobs() == 0; }, std::chrono::milliseconds(300));
      if (!taken) break;
    }
    ASSERT_GT(engine().queuedJobs(), 0u) << "the frames never filled up";
    for (int i = 0; i < 6; ++i) engine().enqueueCopy("reader", heavySrc, heavyDst, 4 << 20, nullptr);
    engine().enqueueDownload("reader", ta.buffer, 0, bytes, *slot, [&](std::exception_ptr e) {
      if (e)
        downloaded.set_exception(e);
      else
        downloaded.set_value();
    });
    const uint64_t address = ta.buffer->deviceAddress();
    ta = {};
    tu = fresh(tb.desc);
    EXPECT_EQ(tu.buffer->deviceAddress(), address) << "the dropped tensor's memory should serve the next one at once";
    engine().enqueueCopy("writer", tb.buffer, tu.buffer, bytes, nullptr);
  }
  downloaded.get_future().get();
  std::vector<float> got(static_cast<size_t>(n));
  std::memcpy(got.data(), slot->data, bytes);
  engine().releaseStaging(*slot);
  EXPECT_EQ(got, a) << "another owner's write to the reused memory ran before the download";
  EXPECT_EQ(download(tu), b);
}

// Random elementwise work over tensors of many sizes (slots of chunks and
// blocks of their own), pipelined, with tensors dropped while their work is
// queued; every live tensor is checked against the CPU after each round.
TEST_F(StreamReuseTest, RandomPipelinedWorkOnReusedMemoryMatchesTheCpu) {
  struct Live {
    TensorView t;
    std::vector<float> cpu;
  };
  const std::vector<int64_t> sizes = {1, 5, 64, 1000, 4097, 70'001, 300'013};
  std::mt19937 rng(99);
  engine().waitIdle();
  const uint64_t liveBefore = engine().memoryStats().liveBytes;
  std::map<int64_t, std::vector<Live>> pools;
  for (int64_t n : sizes) {
    for (int i = 0; i < 2; ++i) {
      auto data = randomData(size_t(n));
      pools[n].push_back({upload({n}, data), data});
    }
  }
  engine().waitIdle();
  const char* ops[] = {"add", "sub", "mul", "relu"};
  auto cpu = [](int op, float a, float b) {
    switch (op) {
      case 0:
        return a + b;
      case 1:
        return a - b;
      case 2:
        return a * b;
      default:
        return a < 0 ? 0.0f : a;
    }
  };
  for (int round = 0; round < 6; ++round) {
    {
      // Even rounds hold completions back (everything stays queued); odd
      // rounds let the device run as it goes.
      std::optional<CompletionGate> gate;
      if (round % 2 == 0) gate.emplace(engine());
      for (int step = 0; step < 80; ++step) {
        const int64_t n = sizes[rng() % sizes.size()];
        auto& pool = pools[n];
        const int op = int(rng() % 4);
        const Live& a = pool[rng() % pool.size()];
        const Live& b = pool[rng() % pool.size()];
        Live out{fresh(a.t.desc), std::vector<float>(size_t(n))};
        for (int64_t e = 0; e < n; ++e) out.cpu[size_t(e)] = cpu(op, a.cpu[size_t(e)], b.cpu[size_t(e)]);
        if (op == 3) {
          enqueue(ops[op], {a.t}, out.t);
        } else {
          enqueue(ops[op], {a.t, b.t}, out.t);
        }
        pool.push_back(std::move(out));
        // Drop a random tensor other than the two sources while its work is
        // queued; keep each pool small so memory cycles.
        while (pool.size() > 6 || (pool.size() > 2 && rng() % 2 == 0)) {
          pool.erase(pool.begin() + 2 + std::ptrdiff_t(rng() % (pool.size() - 2)));
        }
      }
    }
    for (auto& [n, pool] : pools) {
      for (size_t i = 0; i < pool.size(); ++i) {
        auto got = download(pool[i].t);
        for (int64_t e = 0; e < n; ++e) {
          ASSERT_FLOAT_EQ(got[size_t(e)], pool[i].cpu[size_t(e)])
              << "round " << round << ", size " << n << ", tensor " << i << ", element " << e;
        }
      }
    }
  }
  pools.clear();
  engine().waitIdle();
  const MemoryStats after = engine().memoryStats();
  EXPECT_EQ(after.liveBytes, liveBefore) << "every dropped tensor is accounted back";
  EXPECT_LE(after.cachedBytes, after.reservedBytes);
}

}  // namespace
}  // namespace tensord::compute::testing
