// FileWorker::copy: copies on a worker thread whose memory need live only as
// long as the copy's promise (collectives copy chunks off their messages
// with it).

#include "server/file_worker.h"

#include <gtest/gtest.h>
#include <kj/async.h>
#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <future>
#include <mutex>
#include <thread>
#include <vector>

namespace tensord::server {
namespace {

TEST(FileWorkerCopy, CopiesOnAWorkerAndResolvesOnTheLoop) {
  kj::EventLoop loop;
  kj::WaitScope ws(loop);
  FileWorker worker(2, /*nice=*/0);
  std::vector<unsigned char> from(3 << 20), to(from.size(), 0);
  for (size_t i = 0; i < from.size(); ++i) from[i] = static_cast<unsigned char>(i * 7 + 1);
  worker.copy(to.data(), from.data(), from.size()).wait(ws);
  EXPECT_EQ(to, from);
}

TEST(FileWorkerCopy, ACopyDroppedBeforeItStartsNeverRuns) {
  kj::EventLoop loop;
  kj::WaitScope ws(loop);
  FileWorker worker(1, /*nice=*/0);
  // The one thread is busy until `release` is set: after the drop, or by a
  // watchdog should the drop wait for the queued copy (then the copy runs
  // and the test fails instead of hanging).
  std::promise<void> release;
  std::once_flag released;
  auto busy = worker.run([gate = release.get_future().share()] { gate.wait(); });
  std::atomic<bool> droppedIt{false};
  std::thread watchdog([&] {
    for (int i = 0; i < 500 && !droppedIt; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    std::call_once(released, [&] { release.set_value(); });
  });
  std::vector<unsigned char> from(1 << 20, 1), to(from.size(), 0);
  {
    auto dropped = worker.copy(to.data(), from.data(), from.size());
  }
  droppedIt = true;
  std::fill(from.begin(), from.end(), 2);
  std::call_once(released, [&] { release.set_value(); });
  watchdog.join();
  busy.wait(ws);
  // A copy queued after the dropped one runs after it would have.
  std::vector<unsigned char> probe(1, 0), one(1, 3);
  worker.copy(probe.data(), one.data(), 1).wait(ws);
  EXPECT_EQ(probe[0], 3);
  EXPECT_TRUE(std::all_of(to.begin(), to.end(), [](unsigned char b) { return b == 0; }))
      << "the dropped copy wrote into its destination";
}

// Dropping the promise at any point ends every access to the copy's memory:
// a copy under way stops after its piece and is waited for. Here both
// buffers are unmapped the moment the promise is gone, as a message's
// memory may be freed; a worker still copying would crash the test.
TEST(FileWorkerCopy, DroppingTheCopyEndsItsAccessToTheMemory) {
  kj::EventLoop loop;
  kj::WaitScope ws(loop);
  FileWorker worker(1, /*nice=*/0);
  constexpr size_t kBytes = size_t(32) << 20;
  int stopped = 0;
  for (int attempt = 0; attempt < 24; ++attempt) {
    auto map = [] {
      void* p = mmap(nullptr, kBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      EXPECT_NE(p, MAP_FAILED);
      return static_cast<unsigned char*>(p);
    };
    unsigned char* from = map();
    unsigned char* to = map();
    std::memset(from, 1, kBytes);
    {
      auto copy = worker.copy(to, from, kBytes);
      std::this_thread::sleep_for(std::chrono::microseconds(250 * attempt));
    }
    const size_t copied = size_t(std::count(to, to + kBytes, 1));
    EXPECT_EQ(size_t(std::count(to, to + kBytes, 0)), kBytes - copied) << "attempt " << attempt;
    if (copied > 0 && copied < kBytes) ++stopped;
    munmap(from, kBytes);
    munmap(to, kBytes);
    std::this_thread::sleep_for(std::chrono::milliseconds(2));  // time for a copy left running to touch them
  }
  std::printf("copies stopped part way: %d of 24\n", stopped);
}

}  // namespace
}  // namespace tensord::server
