// The caching allocator: size classes, reuse, exact accounting, limits.

#include <spdlog/sinks/stdout_color_sinks.h>

#include "compute/allocator.h"
#include "compute/error.h"
#include "tests/compute/engine_fixture.h"

namespace tensord::compute::testing {
namespace {

TEST(SizeClass, RoundsUpByAtMostAQuarter) {
  EXPECT_EQ(CachingAllocator::sizeClass(0), 256u);
  EXPECT_EQ(CachingAllocator::sizeClass(256), 256u);
  EXPECT_EQ(CachingAllocator::sizeClass(257), 320u);
  EXPECT_EQ(CachingAllocator::sizeClass(1000), 1024u);
  EXPECT_EQ(CachingAllocator::sizeClass(1025), 1280u);
  for (uint64_t bytes : {300ull, 4097ull, 1000000ull, 123456789ull, 1ull << 30}) {
    uint64_t c = CachingAllocator::sizeClass(bytes);
    EXPECT_GE(c, bytes);
    EXPECT_LE(c, bytes + bytes / 4 + 1) << bytes;
    EXPECT_EQ(CachingAllocator::sizeClass(c), c) << "a class is its own class";
  }
}

TEST_F(EngineTest, AccountingIsExactPerOwner) {
  auto before = engine().memoryStats();
  {
    auto a = engine().allocate(1000, "alice");
    auto b = engine().allocate(3, "alice");
    auto c = engine().allocate(5000, "bob");
    EXPECT_EQ(engine().ownerBytes("alice"), 1003u);
    EXPECT_EQ(engine().ownerBytes("bob"), 5000u);
    EXPECT_EQ(engine().memoryStats().liveBytes, before.liveBytes + 6003);
  }
  EXPECT_EQ(engine().ownerBytes("alice"), 0u);
  EXPECT_EQ(engine().ownerBytes("bob"), 0u);
  auto after = engine().memoryStats();
  EXPECT_EQ(after.liveBytes, before.liveBytes);
  EXPECT_GE(after.cachedBytes, 1024u + 256u + 5120u) << "freed blocks stay cached";
}

TEST_F(EngineTest, FreedBlocksAreReused) {
  uint64_t address;
  {
    auto a = engine().allocate(777'777, "t");
    address = a->deviceAddress();
  }
  auto reserved = engine().memoryStats().reservedBytes;
  auto b = engine().allocate(777'000, "t");  // same size class
  EXPECT_EQ(b->deviceAddress(), address);
  EXPECT_EQ(engine().memoryStats().reservedBytes, reserved);
}

TEST(AllocatorLimit, OutOfMemoryIsAnErrorNotACrash) {
  EngineOptions options;
  options.memoryLimitBytes = 1 << 20;
  options.stagingSlotBytes = 1 << 16;
  options.stagingSlots = 1;
  options.logger = spdlog::stderr_color_mt("limit-test");
  Engine engine(options);
  auto kept = engine.allocate(600'000, "a");
  try {
    engine.allocate(600'000, "a");
    FAIL() << "expected out of memory";
  } catch (const ComputeError& e) {
    EXPECT_EQ(e.kind(), ComputeError::Kind::kOutOfMemory);
    EXPECT_NE(std::string(e.what()).find("out of device memory"), std::string::npos) << e.what();
  }
  // Freeing makes room again: the cache is dropped before giving up.
  kept.reset();
  auto small = engine.allocate(200'000, "a");
  EXPECT_EQ(engine.memoryStats().liveBytes, 200'000u);
}

}  // namespace
}  // namespace tensord::compute::testing
