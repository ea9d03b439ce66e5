// What environment variables change in the engine, each on a device or
// engine of its own (they are read when one is made, so compute_test's shared
// engine cannot show them):
//   - TENSORD_PIPELINE_STATS: each kernel's pipeline logs the driver's
//     statistics (for tuning kernels), and writes its internal
//     representations into the directory the variable names;
//   - TENSORD_COMPLETION_SPIN_US / TENSORD_SUBMIT_SPIN_US: the command
//     stream's threads poll before they sleep (the completion thread a
//     batch's fence, both threads for work; on by default on GPUs, off on
//     CPU devices such as lavapipe, so forced on here);
//   - TENSORD_OVERLAP_JOBS=0: every job waits for everything before it.

#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <future>
#include <sstream>
#include <thread>

#include "compute/device.h"
#include "compute/engine.h"
#include "compute/kernel_cache.h"
#include "compute/op_spec.h"
#include "compute/op_table.h"

namespace tensord::compute {
namespace {

namespace fs = std::filesystem;

// A kernel small enough to read, with a loop the driver has to keep.
const KernelSource kProbe{"stats_probe",
                          "#version 460\n"
                          "layout(local_size_x = 64) in;\n"
                          "layout(push_constant) uniform Push { uint n; } p;\n"
                          "shared float s[64];\n"
                          "void main() {\n"
                          "  float x = float(gl_LocalInvocationIndex);\n"
                          "  for (uint i = 0u; i < p.n; ++i) x = x * 1.5 + 1.0;\n"
                          "  s[gl_LocalInvocationIndex] = x;\n"
                          "  barrier();\n"
                          "}\n"};

struct Logged {
  std::ostringstream text;
  std::shared_ptr<spdlog::logger> log =
      std::make_shared<spdlog::logger>("stats-test", std::make_shared<spdlog::sinks::ostream_sink_mt>(text));
};

std::string deviceSelector() {
  const char* selector = std::getenv("TENSORD_TEST_DEVICE");
  return selector != nullptr ? selector : "";
}

TEST(PipelineStats, LoggedAndWrittenWhenAsked) {
  const fs::path dir = fs::temp_directory_path() / ("tensord-pipeline-stats-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  ::setenv("TENSORD_PIPELINE_STATS", dir.c_str(), 1);
  Logged out;
  {
    Device device(deviceSelector(), *out.log);
    KernelCache cache(device, "", *out.log);
    cache.pipeline(kProbe);
    if (!device.info().features.pipelineStats) {
      // A device without the extension says so instead.
      EXPECT_NE(out.text.str().find("no VK_KHR_pipeline_executable_properties"), std::string::npos) << out.text.str();
    } else {
      const std::string logged = out.text.str();
      auto at = logged.find("kernel stats_probe (");
      ASSERT_NE(at, std::string::npos) << logged;
      // At least one statistic: a name and a value after the executable's name.
      const auto stats = logged.find("): ", at);
      ASSERT_NE(stats, std::string::npos) << logged;
      EXPECT_TRUE(std::isalpha(static_cast<unsigned char>(logged[stats + 3]))) << logged;
      bool written = false;
      for (const auto& entry : fs::directory_iterator(dir)) {
        written = written ||
                  (entry.path().filename().string().starts_with("stats_probe-") && fs::file_size(entry.path()) > 0);
      }
      // lavapipe offers its NIR; other drivers may offer none.
      if (device.info().kind == "cpu") EXPECT_TRUE(written) << "no internal representation in " << dir;
    }
  }
  ::unsetenv("TENSORD_PIPELINE_STATS");
  fs::remove_all(dir);
}

TEST(PipelineStats, QuietByDefault) {
  ::unsetenv("TENSORD_PIPELINE_STATS");
  Logged out;
  Device device(deviceSelector(), *out.log);
  EXPECT_FALSE(device.info().features.pipelineStats);
  KernelCache cache(device, "", *out.log);
  cache.pipeline(kProbe);
  EXPECT_EQ(out.text.str().find("kernel stats_probe"), std::string::npos) << out.text.str();
}

// Runs one enqueue* call and waits for its completion, rethrowing its error.
template <typename Fn>
void blocking(Fn&& enqueue) {
  std::promise<void> done;
  enqueue([&](std::exception_ptr e) {
    if (e)
      done.set_exception(e);
    else
      done.set_value();
  });
  done.get_future().get();
}

TEST(CommandStreamSpin, PollingThreadsLoseNothing) {
  // Short spins, so that calls land both while a thread polls and after it
  // went to sleep: single calls each waited for (as a client waiting for
  // each call sends them), and bursts of 8 ops queued at once.
  ::setenv("TENSORD_COMPLETION_SPIN_US", "20", 1);
  ::setenv("TENSORD_SUBMIT_SPIN_US", "50", 1);
  Logged out;
  EngineOptions options;
  options.device = deviceSelector();
  options.stagingSlotBytes = 1 << 16;
  options.stagingSlots = 2;
  options.logger = out.log;
  {
    Engine engine(options);
    ::unsetenv("TENSORD_COMPLETION_SPIN_US");
    ::unsetenv("TENSORD_SUBMIT_SPIN_US");
    const OpSpec* add = engine.ops().find("add");
    ASSERT_NE(add, nullptr);
    const Attrs plusOne = validateAttrs(*add, {{"other", 1.0}});
    auto slot = engine.tryAcquireStaging();
    ASSERT_TRUE(slot.has_value());
    constexpr int64_t kElems = 1024;
    const TensorDesc desc{DType::F32, Shape{kElems}};
    std::vector<TensorView> x, y;
    for (int i = 0; i < 8; ++i) {
      x.push_back({desc, engine.allocate(desc.bytes(), "test")});
      y.push_back({desc, engine.allocate(desc.bytes(), "test")});
    }
    auto fill = [&](float value) {
      auto* f = reinterpret_cast<float*>(slot->data);
      std::fill(f, f + kElems, value);
    };
    for (int round = 0; round < 40; ++round) {
      // Every fifth round, the first call comes after the spins ended.
      if (round % 5 == 4) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      const int n = round % 3 == 0 ? 8 : 1;  // a burst, or a single call
      for (int i = 0; i < n; ++i) {
        fill(float(round * 8 + i));
        blocking([&](Completion c) { engine.enqueueUpload("test", *slot, desc.bytes(), x[i].buffer, 0, std::move(c)); });
      }
      std::vector<std::promise<void>> done(static_cast<size_t>(n));
      for (int i = 0; i < n; ++i) {
        engine.enqueueOp("test", *add, {x[i]}, {y[i]}, plusOne, [&done, i](std::exception_ptr e) {
          if (e) done[size_t(i)].set_exception(e);
          else done[size_t(i)].set_value();
        });
      }
      for (auto& d : done) d.get_future().get();
      for (int i = 0; i < n; ++i) {
        fill(-1.0f);
        blocking([&](Completion c) { engine.enqueueDownload("test", y[i].buffer, 0, desc.bytes(), *slot, std::move(c)); });
        const auto* f = reinterpret_cast<const float*>(slot->data);
        ASSERT_EQ(f[0], float(round * 8 + i + 1)) << "round " << round << " op " << i;
        ASSERT_EQ(f[kElems - 1], float(round * 8 + i + 1)) << "round " << round << " op " << i;
      }
    }
    engine.releaseStaging(*slot);
  }  // destruction finishes and joins the polling threads
}

TEST(OverlapJobs, OffPutsABarrierBeforeEveryJob) {
  ::setenv("TENSORD_OVERLAP_JOBS", "0", 1);
  EngineOptions options;
  options.device = deviceSelector();
  options.stagingSlotBytes = 1 << 16;
  options.stagingSlots = 1;
  Logged out;
  options.logger = out.log;
  Engine engine(options);
  ::unsetenv("TENSORD_OVERLAP_JOBS");
  const OpSpec* add = engine.ops().find("add");
  ASSERT_NE(add, nullptr);
  const TensorDesc desc{DType::F32, Shape{1024}};
  std::vector<TensorView> x, y;
  for (int i = 0; i < 4; ++i) {
    x.push_back({desc, engine.allocate(desc.bytes(), "test")});
    y.push_back({desc, engine.allocate(desc.bytes(), "test")});
  }
  engine.waitIdle();
  const Engine::JobOrdering before = engine.jobOrdering();
  engine.holdSubmits();
  for (int i = 0; i < 4; ++i) engine.enqueueOp("test", *add, {x[i], x[i]}, {y[i]}, validateAttrs(*add, {}), nullptr);
  engine.releaseSubmits();
  engine.waitIdle();
  // Independent as they are, each job waited (with the default, three of
  // the four skip their barrier: job_ordering_test.cpp).
  EXPECT_EQ(engine.jobOrdering().barriers - before.barriers, 4u);
  EXPECT_EQ(engine.jobOrdering().overlapped, before.overlapped);
}

}  // namespace
}  // namespace tensord::compute
