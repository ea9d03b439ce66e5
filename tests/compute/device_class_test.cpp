// Tile shapes chosen per device class (DeviceFeatures::sharedMemoryBytes,
// computeUnits): which kernel variant the matmul and the implicit GEMM pick
// for a device with little shared memory or few or many compute units, and
// that the variants only such devices take compute the right products on
// this device too. The devices here are described to the templates through
// a recorder whose features() says what the test wants.

#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "compute/kernel_templates.h"
#include "compute/op_spec.h"
#include "tests/compute/conformance.h"

namespace tensord::compute::testing {
namespace {

using Ints = std::vector<int64_t>;
using AttrList = std::vector<std::pair<std::string, AttrValue>>;

// Forwards to `inner`, but describes another device class; optionally
// records nothing, keeping the kernel names only.
class DeviceClassRecorder final : public Recorder {
 public:
  DeviceClassRecorder(Recorder* inner, Engine& engine, DeviceFeatures features)
      : inner_(inner), engine_(engine), features_(features) {}
  void dispatch(const KernelSource& source, std::span<const std::byte> push, uint32_t gx, uint32_t gy,
                uint32_t gz) override {
    kernels.push_back(source.name);
    if (inner_) inner_->dispatch(source, push, gx, gy, gz);
  }
  using Recorder::dispatch;
  using Recorder::params;
  uint32_t maxGroups(int axis) const override { return inner_ ? inner_->maxGroups(axis) : 65'535u; }
  const DeviceFeatures* features() const override { return &features_; }
  uint64_t params(std::span<const std::byte> bytes) override { return inner_ ? inner_->params(bytes) : 0; }
  std::shared_ptr<Buffer> scratch(uint64_t bytes) override {
    return inner_ ? inner_->scratch(bytes) : engine_.allocate(bytes, "test");
  }
  uint64_t errorSlot(DeviceErrorDescriber describe) override {
    return inner_ ? inner_->errorSlot(std::move(describe)) : 0;
  }
  std::vector<std::string> kernels;

 private:
  Recorder* inner_;
  Engine& engine_;
  DeviceFeatures features_;
};

// A table op's template, recording for another device class; the kernels
// it dispatched go to `kernels`.
class DeviceClassTemplate final : public KernelTemplate {
 public:
  DeviceClassTemplate(std::shared_ptr<const KernelTemplate> inner, DeviceFeatures features, Engine& engine)
      : inner_(std::move(inner)), features_(features), engine_(engine) {}
  std::vector<TensorDesc> infer(const OpSpec& spec, std::span<const TensorDesc> inputs,
                                const Attrs& attrs) const override {
    return inner_->infer(spec, inputs, attrs);
  }
  void record(const OpSpec& spec, Recorder& recorder, std::span<const TensorView> inputs,
              std::span<const TensorView> outputs, const Attrs& attrs) const override {
    DeviceClassRecorder as(&recorder, engine_, features_);
    inner_->record(spec, as, inputs, outputs, attrs);
    kernels->insert(kernels->end(), as.kernels.begin(), as.kernels.end());
  }
  std::vector<const KernelSource*> variants(const OpSpec& spec, DType dtype) const override {
    return inner_->variants(spec, dtype);
  }
  uint64_t flops(const OpSpec& spec, std::span<const TensorView> inputs, std::span<const TensorView> outputs,
                 const Attrs& attrs) const override {
    return inner_->flops(spec, inputs, outputs, attrs);
  }
  std::shared_ptr<std::vector<std::string>> kernels = std::make_shared<std::vector<std::string>>();

 private:
  std::shared_ptr<const KernelTemplate> inner_;
  DeviceFeatures features_;
  Engine& engine_;
};

class DeviceClassTest : public ConformanceTest {
 protected:
  // An H100's class: 48 KiB of shared memory, 132 SMs.
  static DeviceFeatures h100() {
    DeviceFeatures f;
    f.sharedMemoryBytes = 48 << 10;
    f.computeUnits = 132;
    return f;
  }
  static DeviceFeatures with(uint32_t sharedBytes, uint32_t units) {
    DeviceFeatures f;
    f.sharedMemoryBytes = sharedBytes;
    f.computeUnits = units;
    return f;
  }

  // The kernels `op` records for a device of class `features`, without running them.
  static std::vector<std::string> kernelsFor(const DeviceFeatures& features, const std::string& op,
                                             const std::vector<TensorDesc>& inputs, const AttrList& attrs = {}) {
    const OpSpec& spec = *engine().ops().find(op);
    const Attrs a = validateAttrs(spec, attrs);
    std::vector<TensorView> in, out;
    for (const auto& d : inputs) in.push_back({d, engine().allocate(d.bytes(), "test")});
    for (const auto& d : inferOutputs(spec, inputs, a)) out.push_back({d, engine().allocate(d.bytes(), "test")});
    DeviceClassRecorder recorder(nullptr, engine(), features);
    spec.kernel->record(spec, recorder, in, out, a);
    return recorder.kernels;
  }

  // `op` run on this device as its template records it for class
  // `features`; `kernels`: the kernels that ran.
  static HostTensor runAs(const DeviceFeatures& features, const std::string& op, const std::vector<HostTensor>& inputs,
                          std::vector<std::string>& kernels, const AttrList& attrs = {}) {
    const OpSpec& table = *engine().ops().find(op);
    auto kernel = std::make_shared<DeviceClassTemplate>(table.kernel, features, engine());
    OpSpec spec = table;
    spec.kernel = kernel;
    std::vector<TensorView> in;
    for (const auto& t : inputs) in.push_back(put(t));
    HostTensor out = get(runSpec(spec, in, validateAttrs(table, attrs)).at(0));
    kernels = *kernel->kernels;
    return out;
  }
};

TEST_F(DeviceClassTest, MatmulTilesFitTheSharedMemory) {
  const std::vector<TensorDesc> big = {{DType::F32, {2048, 2048}}, {DType::F32, {2048, 2048}}};
  auto k = kernelsFor(h100(), "matmul", big);
  EXPECT_TRUE(anyContains(k, "|fast128x128|")) << namesStr(k);
  // 16 KiB (Vulkan's least): 128x128 tiles take 16.5 KiB, 64x64 ones in K
  // steps of 16 17 KiB; 64x64 in steps of 8 8.5 KiB.
  k = kernelsFor(with(16 << 10, 132), "matmul", big);
  EXPECT_TRUE(anyContains(k, "|fast64x64|") && anyContains(k, "|k8")) << namesStr(k);
  const std::vector<TensorDesc> small = {{DType::F32, {512, 256}}, {DType::F32, {256, 512}}};  // 64x64 tiles
  k = kernelsFor(h100(), "matmul", small);
  EXPECT_TRUE(anyContains(k, "|fast64x64|") && !anyContains(k, "|k8")) << namesStr(k);
  k = kernelsFor(with(16 << 10, 132), "matmul", small);
  EXPECT_TRUE(anyContains(k, "|fast64x64|") && anyContains(k, "|k8")) << namesStr(k);
}

TEST_F(DeviceClassTest, MatmulTilesFollowTheComputeUnits) {
  // 64 tiles of 128x128, K too short to split: 64-wide tiles to fill 132
  // SMs, 128-wide ones (half the loads) where 16 units fill up on them.
  const std::vector<TensorDesc> in = {{DType::F32, {1024, 256}}, {DType::F32, {256, 1024}}};
  auto k = kernelsFor(h100(), "matmul", in);
  EXPECT_TRUE(anyContains(k, "|fast64x64|")) << namesStr(k);
  k = kernelsFor(with(48 << 10, 16), "matmul", in);
  EXPECT_TRUE(anyContains(k, "|fast128x128|")) << namesStr(k);
  // Not reported: an H100's count.
  k = kernelsFor(with(48 << 10, 0), "matmul", in);
  EXPECT_TRUE(anyContains(k, "|fast64x64|")) << namesStr(k);
}

TEST_F(DeviceClassTest, ConvTilesFollowTheDeviceClass) {
  // A padded 3x3 of 32 channels (not Winograd): K steps of 16 where 17 KiB
  // of shared memory is to be had, else 8.
  const std::vector<TensorDesc> conv3 = {{DType::F32, {2, 32, 16, 16}}, {DType::F32, {64, 32, 3, 3}}};
  const AttrList pad = {{"padding", Ints{1, 1}}};
  auto k = kernelsFor(h100(), "conv2d", conv3, pad);
  EXPECT_TRUE(anyContains(k, "conv_gemm|f32|64x64x16|")) << namesStr(k);
  k = kernelsFor(with(16 << 10, 132), "conv2d", conv3, pad);
  EXPECT_TRUE(anyContains(k, "conv_gemm|f32|64x64x8|")) << namesStr(k);
  // A 1x1 with bias over 2048 pixels: 16 tiles of 128 pixels. 128-pixel
  // tiles need about three workgroups per unit, and at least 16: on 4 units
  // the floor of 16 decides; on 132, 384.
  const std::vector<TensorDesc> conv1 = {
      {DType::F32, {2, 64, 32, 32}}, {DType::F32, {64, 64, 1, 1}}, {DType::F32, {64}}};
  k = kernelsFor(h100(), "conv2d", conv1);
  EXPECT_TRUE(anyContains(k, "conv_gemm|f32|64x64x8|")) << namesStr(k);
  k = kernelsFor(with(48 << 10, 4), "conv2d", conv1);
  EXPECT_TRUE(anyContains(k, "conv_gemm|f32|64x128x8|")) << namesStr(k);
}

// The variants only small-memory devices take, run here: the matmul's 64x64
// tiles in K steps of 8 (whole tiles, edge tiles, linear's transposed
// weight) and the implicit GEMM's 3x3 in K steps of 8, against the same ops
// as this device's class runs them (covered against references elsewhere).
TEST_F(DeviceClassTest, SmallSharedMemoryVariantsComputeTheProducts) {
  const DeviceFeatures small = with(16 << 10, 0);
  std::vector<std::string> k;
  auto a = randomTensor(DType::F32, {256, 72}), b = randomTensor(DType::F32, {72, 192});
  expectClose(runAs(small, "matmul", {a, b}, k), call("matmul", {a, b})[0], "matmul 256x72 @ 72x192, K steps of 8", 72);
  EXPECT_TRUE(anyContains(k, "|fast64x64|") && anyContains(k, "|k8")) << namesStr(k);
  a = randomTensor(DType::F32, {130, 61}), b = randomTensor(DType::F32, {61, 70});
  expectClose(runAs(small, "matmul", {a, b}, k), call("matmul", {a, b})[0], "matmul 130x61 @ 61x70, K steps of 8", 61);
  EXPECT_TRUE(anyContains(k, "|fast64x64|") && anyContains(k, "|v1") && anyContains(k, "|k8")) << namesStr(k);
  auto x = randomTensor(DType::F32, {100, 40}), w = randomTensor(DType::F32, {96, 40});
  auto bias = randomTensor(DType::F32, {96});
  expectClose(runAs(small, "linear", {x, w, bias}, k), call("linear", {x, w, bias})[0], "linear, K steps of 8", 40);
  EXPECT_TRUE(anyContains(k, "|fast64x64|bt") && anyContains(k, "|k8")) << namesStr(k);
  auto cx = randomTensor(DType::F32, {2, 32, 9, 10}), cw = randomTensor(DType::F32, {64, 32, 3, 3});
  const AttrList pad = {{"padding", Ints{1, 1}}};
  expectClose(runAs(small, "conv2d", {cx, cw}, k, pad), call("conv2d", {cx, cw}, pad)[0], "conv2d 3x3, K steps of 8",
              32.0 * 9);
  EXPECT_TRUE(anyContains(k, "conv_gemm|f32|64x64x8|")) << namesStr(k);
}

}  // namespace
}  // namespace tensord::compute::testing
