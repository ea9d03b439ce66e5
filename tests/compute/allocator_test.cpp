// The caching allocator: size classes, reuse, exact accounting, limits,
// chunks for small tensors, and stream-ordered reuse of memory that queued
// work still pins.

#include "compute/allocator.h"

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <set>

#include "compute/device.h"
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

TEST(SizeClass, SmallBlocksAreWholeMultiplesOf256) {
  EXPECT_EQ(CachingAllocator::blockSize(1), 256u);
  EXPECT_EQ(CachingAllocator::blockSize(257), 512u);  // class 320, a slot of 512
  EXPECT_EQ(CachingAllocator::blockSize(1000), 1024u);
  for (uint64_t bytes = 1; bytes <= CachingAllocator::kSlotMaxBytes; bytes = bytes * 3 + 1) {
    EXPECT_EQ(CachingAllocator::blockSize(bytes) % 256, 0u) << bytes;
    EXPECT_GE(CachingAllocator::blockSize(bytes), CachingAllocator::sizeClass(bytes)) << bytes;
  }
  const uint64_t big = CachingAllocator::kSlotMaxBytes + 1;
  EXPECT_EQ(CachingAllocator::blockSize(big), CachingAllocator::sizeClass(big)) << "large blocks are not slots";
}

// NVIDIA's largest allocation is 4 GiB - 2 MiB: a tensor that fits it gets a
// block that fits it too, though its size class (4 GiB) would not.
TEST(SizeClass, TensorsThatFitTheLargestAllocationGetABlockThatFits) {
  const uint64_t gib = 1ull << 30, mib = 1ull << 20;
  const uint64_t nvidia = 4 * gib - 2 * mib;
  EXPECT_EQ(CachingAllocator::sizeClass(4000 * mib), 4 * gib);
  EXPECT_EQ(CachingAllocator::blockSize(4000 * mib, nvidia), 4000 * mib);
  EXPECT_EQ(CachingAllocator::blockSize(nvidia, nvidia), nvidia);
  EXPECT_EQ(CachingAllocator::blockSize(4000 * mib + 1, nvidia), 4000 * mib + 64 * 1024) << "rounded up to 64 KiB";
  // Below the last class, and with no limit, blocks are the size classes.
  EXPECT_EQ(CachingAllocator::blockSize(3 * gib + 1, nvidia), CachingAllocator::sizeClass(3 * gib + 1));
  EXPECT_EQ(CachingAllocator::blockSize(4000 * mib, 0), 4 * gib);
  // A tensor larger than the limit keeps its class, which the allocator refuses.
  EXPECT_GT(CachingAllocator::blockSize(nvidia + 1, nvidia), nvidia);
}

// A CachingAllocator of its own on the test device, so device allocations
// and reuse can be counted without the engine's other users.
class AllocatorTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    log_ = spdlog::stderr_color_mt("allocator-test");
    log_->set_level(spdlog::level::warn);
    const char* selector = std::getenv("TENSORD_TEST_DEVICE");
    device_ = std::make_unique<Device>(selector ? selector : "", *log_);
  }
  static void TearDownTestSuite() {
    device_.reset();
    spdlog::drop("allocator-test");
  }
  static const Device& device() { return *device_; }

  // The invariant every state must keep: cached is what is held but not leased.
  static void expectConsistent(const CachingAllocator& a) {
    MemoryStats s = a.stats();
    EXPECT_LE(s.cachedBytes, s.reservedBytes);
    EXPECT_LE(s.liveBytes, s.reservedBytes - s.cachedBytes) << "live bytes fit in the leased blocks";
  }

 private:
  static inline std::shared_ptr<spdlog::logger> log_;
  static inline std::unique_ptr<Device> device_;
};

TEST_F(AllocatorTest, SmallTensorsShareOneDeviceAllocation) {
  CachingAllocator a(device(), 0);
  std::vector<std::shared_ptr<Buffer>> held;
  std::set<uint64_t> addresses;
  for (int i = 0; i < 16; ++i) {
    held.push_back(a.allocate(1000, "t"));
    const Buffer& b = *held.back();
    EXPECT_EQ(b.capacity(), 1024u);
    EXPECT_EQ(b.offset() % 256, 0u) << "slots start at multiples of 256";
    EXPECT_EQ(b.deviceAddress() - b.offset(), held.front()->deviceAddress() - held.front()->offset())
        << "one VkBuffer under all of them";
    addresses.insert(b.deviceAddress());
  }
  EXPECT_EQ(addresses.size(), held.size()) << "every tensor has its own slot";
  EXPECT_EQ(a.deviceAllocations(), 1u) << "16 small tensors should come from one chunk";
  EXPECT_EQ(a.stats().liveBytes, 16'000u);
  expectConsistent(a);
  // A large tensor gets an allocation of its own.
  auto large = a.allocate(CachingAllocator::kSlotMaxBytes + 1, "t");
  EXPECT_EQ(large->offset(), 0u);
  EXPECT_EQ(a.deviceAllocations(), 2u);
  held.clear();
  large.reset();
  EXPECT_EQ(a.stats().liveBytes, 0u);
  EXPECT_EQ(a.stats().cachedBytes, a.stats().reservedBytes) << "everything freed is cached";
}

TEST_F(AllocatorTest, ChunksGrowAndManySmallTensorsNeedFewAllocations) {
  CachingAllocator a(device(), 0);
  std::vector<std::shared_ptr<Buffer>> held;
  for (int i = 0; i < 5000; ++i) held.push_back(a.allocate(256, "t"));
  // 256-byte slots: the first chunk holds 256 of them, each later one twice
  // as many (up to 4 MiB): 5000 tensors in a handful of allocations.
  EXPECT_LE(a.deviceAllocations(), 6u);
  EXPECT_EQ(a.stats().liveBytes, 5000u * 256);
  expectConsistent(a);
}

TEST_F(AllocatorTest, APinnedBlockServesTheSameOwnerAtOnce) {
  CachingAllocator a(device(), 0);
  auto lease = a.allocate(3 << 20, "alice");
  const uint64_t address = lease->deviceAddress();
  std::shared_ptr<Buffer> pin = lease->pin();  // what a queued job holds
  lease.reset();
  EXPECT_EQ(a.stats().liveBytes, 0u) << "the lease is gone: the tensor no longer counts";
  EXPECT_EQ(a.ownerBytes("alice"), 0u);
  const uint64_t reserved = a.stats().reservedBytes;

  // Work queued from now on may use the memory: same owner, same block.
  auto next = a.allocate(3 << 20, "alice");
  EXPECT_EQ(next->deviceAddress(), address);
  EXPECT_EQ(a.stats().reservedBytes, reserved) << "nothing new was allocated";
  EXPECT_EQ(pin->deviceAddress(), address) << "the pinned Buffer still names its memory";
  next.reset();

  // Memory needed while recording takes only blocks nothing pins.
  auto scratch = a.allocate(3 << 20, "(scratch)", CachingAllocator::Reuse::kIdleOnly);
  EXPECT_NE(scratch->deviceAddress(), address);
  scratch.reset();
  // Another owner does not get it while it is pinned (and the limit is far).
  auto bob = a.allocate(3 << 20, "bob");
  EXPECT_NE(bob->deviceAddress(), address);
  bob.reset();

  pin.reset();  // the queued work completed: the block is idle
  auto idle = a.allocate(3 << 20, "(scratch)", CachingAllocator::Reuse::kIdleOnly);
  auto other = a.allocate(3 << 20, "bob");
  EXPECT_TRUE(idle->deviceAddress() == address || other->deviceAddress() == address) << "an idle block serves anyone";
  expectConsistent(a);
}

TEST_F(AllocatorTest, UnderTheLimitAnotherOwnersPinnedBlockIsReused) {
  CachingAllocator a(device(), 5 << 20);
  auto lease = a.allocate(4 << 20, "alice");
  const uint64_t address = lease->deviceAddress();
  auto pin = lease->pin();
  lease.reset();
  // No room for a second 4 MiB block: bob gets alice's (the queue orders
  // bob's work after the work that pins it).
  auto bob = a.allocate(4 << 20, "bob");
  EXPECT_EQ(bob->deviceAddress(), address);
  EXPECT_EQ(a.ownerBytes("bob"), 4u << 20);
  expectConsistent(a);
}

TEST_F(AllocatorTest, DroppingTheCacheNeverFreesPinnedMemory) {
  CachingAllocator a(device(), 6 << 20);
  auto lease = a.allocate(4 << 20, "alice");
  auto pin = lease->pin();
  lease.reset();
  EXPECT_EQ(a.stats().cachedBytes, 4u << 20);
  // 3 MiB does not fit next to the pinned 4 MiB, and the pinned block may
  // not be freed: out of memory, with the pinned block still held.
  try {
    a.allocate(3 << 20, "alice", CachingAllocator::Reuse::kIdleOnly);
    FAIL() << "expected out of memory";
  } catch (const ComputeError& e) {
    EXPECT_EQ(e.kind(), ComputeError::Kind::kOutOfMemory) << e.what();
  }
  EXPECT_EQ(a.stats().reservedBytes, 4u << 20);
  EXPECT_EQ(pin->deviceAddress(), pin->block().address);
  pin.reset();  // now idle: the cache drop frees it and makes room
  auto fits = a.allocate(3 << 20, "alice", CachingAllocator::Reuse::kIdleOnly);
  EXPECT_EQ(a.stats().reservedBytes, CachingAllocator::sizeClass(3 << 20));
  EXPECT_EQ(a.stats().cachedBytes, 0u);
}

TEST_F(AllocatorTest, ASmallLimitGetsBlocksOfTheirOwnInsteadOfChunks) {
  // A chunk of 16 slots of 256 KiB would exceed a 1 MiB limit.
  CachingAllocator a(device(), 1 << 20);
  auto x = a.allocate(200'000, "t");
  EXPECT_EQ(a.stats().reservedBytes, CachingAllocator::blockSize(200'000));
  auto y = a.allocate(200'000, "t");
  EXPECT_EQ(a.stats().liveBytes, 400'000u);
  expectConsistent(a);
}

}  // namespace
}  // namespace tensord::compute::testing
