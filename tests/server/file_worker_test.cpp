// FileWorker::copy: copies on a worker thread whose memory need live only as
// long as the copy's promise (collectives copy chunks off their messages
// with it).

#include "server/file_worker.h"

#include <gtest/gtest.h>
#include <kj/async.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <future>
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
  // The one thread is busy until `release` is set.
  std::promise<void> release;
  auto busy = worker.run([gate = release.get_future().share()] { gate.wait(); });
  std::vector<unsigned char> from(1 << 20, 1), to(from.size(), 0);
  {
    auto dropped = worker.copy(to.data(), from.data(), from.size());
  }
  std::fill(from.begin(), from.end(), 2);
  release.set_value();
  busy.wait(ws);
  // A copy queued after the dropped one runs after it would have.
  std::vector<unsigned char> probe(1, 0), one(1, 3);
  worker.copy(probe.data(), one.data(), 1).wait(ws);
  EXPECT_EQ(probe[0], 3);
  EXPECT_TRUE(std::all_of(to.begin(), to.end(), [](unsigned char b) { return b == 0; }))
      << "the dropped copy wrote into its destination";
}

// Dropping the promise at any point leaves the destination either untouched
// or wholly copied: a copy under way is waited for, so the source may be
// reused (here overwritten) the moment the promise is gone.
TEST(FileWorkerCopy, DroppingTheCopyWaitsForACopyUnderWay) {
  kj::EventLoop loop;
  kj::WaitScope ws(loop);
  FileWorker worker(1, /*nice=*/0);
  std::vector<unsigned char> from(32 << 20), to(from.size());
  for (int attempt = 0; attempt < 24; ++attempt) {
    std::fill(from.begin(), from.end(), 1);
    std::fill(to.begin(), to.end(), 0);
    {
      auto copy = worker.copy(to.data(), from.data(), from.size());
      std::this_thread::sleep_for(std::chrono::microseconds(250 * attempt));
    }
    std::fill(from.begin(), from.end(), 2);  // what a freed message's memory may become
    const unsigned char first = to[0];
    EXPECT_TRUE(first == 0 || first == 1) << "attempt " << attempt;
    EXPECT_TRUE(std::all_of(to.begin(), to.end(), [first](unsigned char b) { return b == first; }))
        << "attempt " << attempt << ": the copy went on after its promise was dropped";
  }
}

}  // namespace
}  // namespace tensord::server
