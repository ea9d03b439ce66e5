#include "tests/compute/engine_fixture.h"

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <cstring>
#include <filesystem>
#include <future>

#include "compute/error.h"

namespace tensord::compute::testing {

std::unique_ptr<Engine> EngineTest::engine_;

namespace {
// Destroys the shared engine once every test ran, while the process is still
// whole: left to static destruction, it would go after the Vulkan driver's
// own exit handlers.
class EngineEnvironment : public ::testing::Environment {
 public:
  void TearDown() override { EngineTest::destroyEngine(); }
};
const auto* const kEngineEnvironment = ::testing::AddGlobalTestEnvironment(new EngineEnvironment);
}  // namespace

void EngineTest::destroyEngine() {
  if (engine_) engine_->waitIdle();
  engine_.reset();
}

void EngineTest::SetUpTestSuite() {
  if (engine_) return;
  auto log = spdlog::stderr_color_mt("compute-test");
  log->set_level(spdlog::level::warn);
  EngineOptions options;
  if (const char* device = std::getenv("TENSORD_TEST_DEVICE")) options.device = device;
  options.cacheDir = std::filesystem::temp_directory_path() / "tensord-compute-test-cache";
  options.stagingSlotBytes = 4u << 20;
  options.stagingSlots = 4;
  options.logger = log;
  engine_ = std::make_unique<Engine>(options);
}

void EngineTest::TearDownTestSuite() {}

std::unique_ptr<Engine> EngineTest::limitedEngine(uint64_t limitBytes, const std::string& name) {
  EngineOptions options;
  if (const char* device = std::getenv("TENSORD_TEST_DEVICE")) options.device = device;
  options.memoryLimitBytes = limitBytes;
  options.stagingSlotBytes = 1 << 16;
  options.stagingSlots = 1;
  options.logger = spdlog::stderr_color_mt(name);
  options.logger->set_level(spdlog::level::warn);
  return std::make_unique<Engine>(options);
}

std::mt19937& EngineTest::rng() {
  // Reseeded when a new test draws: a test's inputs are the same whatever
  // ran before it in this process, as when ctest runs it alone.
  static std::mt19937 gen(1234);
  static const ::testing::TestInfo* drawing = nullptr;
  if (const auto* test = ::testing::UnitTest::GetInstance()->current_test_info(); test != drawing) {
    drawing = test;
    gen.seed(1234);
  }
  return gen;
}

std::vector<float> EngineTest::randomData(size_t n, float lo, float hi) {
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng());
  return v;
}

namespace {

// Runs one enqueue* call and waits for its completion, rethrowing its error.
template <typename Fn>
void blocking(Fn&& enqueue) {
  std::promise<void> done;
  enqueue([&](std::exception_ptr e) {
    if (e) done.set_exception(e);
    else done.set_value();
  });
  done.get_future().get();
}

StagingSlot acquire(Engine& engine) {
  auto slot = engine.tryAcquireStaging();
  if (!slot) throw std::runtime_error("no staging slot free in a single-threaded test");
  return *slot;
}

}  // namespace

TensorView EngineTest::uploadBytes(const TensorDesc& desc, const std::vector<std::byte>& data,
                                   const std::string& owner) {
  TensorView view{desc, nullptr};
  EXPECT_EQ(view.desc.bytes(), data.size());
  view.buffer = engine().allocate(view.desc.bytes(), owner);
  StagingSlot slot = acquire(engine());
  for (uint64_t off = 0; off < view.desc.bytes(); off += slot.capacity) {
    uint64_t n = std::min<uint64_t>(slot.capacity, view.desc.bytes() - off);
    std::memcpy(slot.data, data.data() + off, n);
    blocking([&](Completion c) { engine().enqueueUpload("test", slot, n, view.buffer, off, std::move(c)); });
  }
  engine().releaseStaging(slot);
  return view;
}

std::vector<std::byte> EngineTest::downloadBytes(const TensorView& tensor, Engine* on) {
  Engine& e = on ? *on : engine();
  std::vector<std::byte> out(tensor.desc.bytes());
  StagingSlot slot = acquire(e);
  for (uint64_t off = 0; off < tensor.desc.bytes(); off += slot.capacity) {
    uint64_t n = std::min<uint64_t>(slot.capacity, tensor.desc.bytes() - off);
    blocking([&](Completion c) { e.enqueueDownload("test", tensor.buffer, off, n, slot, std::move(c)); });
    std::memcpy(out.data() + off, slot.data, n);
  }
  e.releaseStaging(slot);
  return out;
}

TensorView EngineTest::upload(const Shape& shape, const std::vector<float>& data, const std::string& owner) {
  std::vector<std::byte> bytes(data.size() * 4);
  std::memcpy(bytes.data(), data.data(), bytes.size());
  return uploadBytes(TensorDesc{DType::F32, shape}, bytes, owner);
}

std::vector<float> EngineTest::download(const TensorView& tensor, Engine* on) {
  auto bytes = downloadBytes(tensor, on);
  std::vector<float> out(bytes.size() / 4);
  std::memcpy(out.data(), bytes.data(), bytes.size());
  return out;
}

std::vector<TensorView> EngineTest::run(const std::string& op, std::vector<TensorView> inputs,
                                        const std::vector<std::pair<std::string, AttrValue>>& given, Engine* on) {
  const OpSpec* spec = (on ? *on : engine()).ops().find(op);
  if (!spec) throw ComputeError(ComputeError::Kind::kUnsupported, "unknown op '" + op + "'");
  return runSpec(*spec, std::move(inputs), validateAttrs(*spec, given), on);
}

std::vector<TensorView> EngineTest::runSpec(const OpSpec& spec, std::vector<TensorView> inputs, const Attrs& attrs,
                                            Engine* on) {
  Engine& e = on ? *on : engine();
  std::vector<TensorDesc> descs;
  for (const auto& in : inputs) descs.push_back(in.desc);
  std::vector<TensorView> outputs;
  std::vector<TensorDesc> outDescs = inferOutputs(spec, descs, attrs);
  if (spec.shapeFromDevice()) {
    // As the daemon does it: ask the device for the output shapes first.
    auto shapes = std::make_shared<std::vector<TensorDesc>>();
    blocking([&](Completion c) { e.enqueueShapeQuery("test", spec, inputs, attrs, shapes, std::move(c)); });
    outDescs = *shapes;
  }
  for (auto& desc : outDescs) {
    // A view op's output shares its input's memory, as the daemon does it.
    auto buffer = spec.view ? inputs[0].buffer : e.allocate(desc.bytes(), "test");
    outputs.push_back({std::move(desc), std::move(buffer)});
  }
  if (spec.view) return outputs;
  blocking([&](Completion c) { e.enqueueOp("test", spec, inputs, outputs, attrs, std::move(c)); });
  return outputs;
}

}  // namespace tensord::compute::testing
