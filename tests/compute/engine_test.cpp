// Engine behaviour beyond single ops: ordering, shader copies, transfers.

#include <cstring>
#include <future>

#include "compute/error.h"
#include "compute/kernel_templates.h"
#include "tests/compute/engine_fixture.h"

namespace tensord::compute::testing {
namespace {

TEST_F(EngineTest, ChainedOpsSeeEachOthersResultsWithoutWaiting) {
  // Enqueue a chain without waiting in between: the in-order stream must
  // order each op after the one that produced its input.
  auto x = randomData(4096);
  TensorView t = upload({4096}, x);
  const OpSpec& add = *engine().ops().find("add");
  std::vector<TensorView> chain{t};
  for (int i = 0; i < 50; ++i) {
    TensorView out{t.desc, engine().allocate(t.desc.bytes(), "test")};
    engine().enqueueOp("test", add, {chain.back(), t}, {out}, validateAttrs(add, {}), nullptr);
    chain.push_back(out);
  }
  auto y = download(chain.back());
  // 50 rounded adds: within 1e-5 relative of the exact 51x.
  for (size_t i = 0; i < x.size(); ++i) ASSERT_NEAR(y[i], 51 * x[i], 1e-5 * std::abs(51 * x[i])) << i;
}

TEST_F(EngineTest, ShaderCopyCopiesOddSizes) {
  for (uint64_t n : {1ull, 3ull, 1000ull, 1'000'003ull}) {
    auto x = randomData(n);
    TensorView src = upload({int64_t(n)}, x);
    TensorView dst{src.desc, engine().allocate(src.desc.bytes(), "test")};
    std::promise<void> done;
    engine().enqueueCopy("test", src.buffer, dst.buffer, src.desc.bytes(), [&](std::exception_ptr e) {
      if (e) done.set_exception(e);
      else done.set_value();
    });
    done.get_future().get();
    EXPECT_EQ(download(dst), x) << n;
  }
}

TEST_F(EngineTest, TransfersLargerThanStagingRoundTrip) {
  // 10 MiB through 4 MiB staging slots.
  auto x = randomData(10 * 262'144 + 7);
  EXPECT_EQ(download(upload({int64_t(x.size())}, x)), x);
}

TEST_F(EngineTest, TransferPastTheEndIsRejected) {
  TensorView t{TensorDesc{DType::F32, {4}}, engine().allocate(16, "test")};
  auto slot = engine().tryAcquireStaging();
  ASSERT_TRUE(slot);
  EXPECT_THROW(engine().enqueueUpload("test", *slot, 32, t.buffer, 0, nullptr), ComputeError);
  EXPECT_THROW(engine().enqueueDownload("test", t.buffer, 8, 16, *slot, nullptr), ComputeError);
  engine().releaseStaging(*slot);
}

// Records dispatches instead of running them, with a GPU's uneven limits.
class LimitCheckingRecorder final : public Recorder {
 public:
  explicit LimitCheckingRecorder(Engine& engine) : engine_(engine) {}
  void dispatch(const KernelSource& source, std::span<const std::byte>, uint32_t gx, uint32_t gy,
                uint32_t gz) override {
    ++dispatches;
    EXPECT_LE(gx, maxGroups(0)) << source.name;
    EXPECT_LE(gy, maxGroups(1)) << source.name;
    EXPECT_LE(gz, maxGroups(2)) << source.name;
  }
  using Recorder::dispatch;
  using Recorder::params;
  uint32_t maxGroups(int axis) const override { return axis == 0 ? 2'147'483'647u : 65'535u; }
  uint64_t params(std::span<const std::byte>) override { return 0; }
  std::shared_ptr<Buffer> scratch(uint64_t bytes) override { return engine_.allocate(bytes, "test"); }
  uint64_t errorSlot(DeviceErrorDescriber) override { return 0; }
  int dispatches = 0;

 private:
  Engine& engine_;
};

TEST_F(EngineTest, DispatchesRespectEachAxisLimit) {
  // Shapes whose natural grid exceeds 65535 on y (rows) or z (batches).
  struct Case {
    const char* op;
    Shape a, b;
  };
  for (const Case& c : {Case{"matmul", {5'000'000, 4}, {4, 4}}, Case{"matmul", {70'000, 2, 2}, {70'000, 2, 2}},
                        Case{"add", {40'000'000}, {1}}, Case{"sum", {300'000, 2}, {}}}) {
    const OpSpec& spec = *engine().ops().find(c.op);
    std::vector<TensorView> in;
    std::vector<TensorDesc> descs;
    std::vector<Shape> shapes{c.a};
    if (!c.b.empty()) shapes.push_back(c.b);
    for (const Shape& s : shapes) {
      TensorDesc desc{DType::F32, s};
      descs.push_back(desc);
      in.push_back({desc, engine().allocate(4, "test")});  // never run: size is irrelevant
    }
    Attrs attrs = validateAttrs(spec, c.op == std::string("sum") ? std::vector<std::pair<std::string, AttrValue>>{
                                                                       {"dim", int64_t(0)}}
                                                                 : std::vector<std::pair<std::string, AttrValue>>{});
    std::vector<TensorView> out;
    for (auto& desc : inferOutputs(spec, descs, attrs)) out.push_back({desc, engine().allocate(4, "test")});
    LimitCheckingRecorder recorder(engine());
    spec.kernel->record(spec, recorder, in, out, attrs);
    EXPECT_GE(recorder.dispatches, 1) << c.op;
  }
}

TEST_F(EngineTest, DeviceIsNamed) {
  EXPECT_FALSE(engine().device().name.empty());
  EXPECT_GT(engine().device().memoryBytes, 0u);
}

}  // namespace
}  // namespace tensord::compute::testing

namespace tensord::compute::testing {
namespace {

TEST_F(EngineTest, DroppedOutputsGiveTheirMemoryBack) {
  // Buffers live as long as the tensors and the queued work that use them:
  // once both are gone, liveBytes is back where it was.
  TensorView t = upload({1024}, randomData(1024));
  const OpSpec& add = *engine().ops().find("add");
  engine().waitIdle();
  const uint64_t before = engine().memoryStats().liveBytes;
  for (int i = 0; i < 100; ++i) {
    TensorView out{t.desc, engine().allocate(t.desc.bytes(), "test")};
    engine().enqueueOp("test", add, {t, t}, {out}, validateAttrs(add, {}), nullptr);
  }
  engine().waitIdle();
  EXPECT_EQ(engine().memoryStats().liveBytes, before);
}

}  // namespace
}  // namespace tensord::compute::testing
