// Which kernel each fast path's cases take. The conformance suites check
// the results of every path; these tests check that a case meant for a path
// still takes it, through Engine::kernelDispatches(), so a routing rule that
// silently stopped choosing a path fails here rather than only in a
// benchmark. f16's and bf16's routing depends on whether the device has
// tensor cores (cooperative matrices), and so does that of f32 products
// with K of 256 or more (split into bf16 parts where bf16 tensor cores
// exist); the rest of f32's is the same on every device.

#include <map>
#include <string>
#include <vector>

#include "tests/compute/conformance.h"

namespace tensord::compute::testing {
namespace {

using Ints = std::vector<int64_t>;
using AttrList = std::vector<std::pair<std::string, AttrValue>>;

class KernelRoutingTest : public ConformanceTest {
 protected:
  // The names of the kernel variants one call of `op` dispatched.
  static std::vector<std::string> kernelsOf(const std::string& op, const std::vector<HostTensor>& inputs,
                                            const AttrList& attrs = {}) {
    std::vector<TensorView> views;
    for (const auto& t : inputs) views.push_back(put(t));
    engine().waitIdle();
    const std::map<std::string, uint64_t> before = engine().kernelDispatches();
    run(op, views, attrs);
    std::vector<std::string> ran;
    for (const auto& [name, count] : engine().kernelDispatches()) {
      auto it = before.find(name);
      if (count > (it == before.end() ? 0 : it->second)) ran.push_back(name);
    }
    return ran;
  }

  static bool anyStartsWith(const std::vector<std::string>& names, const std::string& prefix) {
    for (const auto& n : names) {
      if (n.rfind(prefix, 0) == 0) return true;
    }
    return false;
  }

  static bool tensorCores(DType dtype) {
    const DeviceFeatures& f = engine().device().features;
    return dtype == DType::F16 ? f.coopMatrixF16 : dtype == DType::BF16 && f.coopMatrixBf16;
  }

  // The kernel of a long-K f32 product: bf16 tensor cores or the fast kernel.
  static std::string longF32Product() {
    return engine().device().features.f32SplitBf16 ? "matmul|f32|coop" : "matmul|f32|fast";
  }
};

TEST_F(KernelRoutingTest, EveryDispatchIsCountedUnderItsVariant) {
  const HostTensor a = randomTensor(DType::F32, {130, 70}), b = randomTensor(DType::F32, {70, 67});
  const auto first = engine().kernelDispatches();
  auto ran = kernelsOf("matmul", {a, b});
  ASSERT_EQ(ran.size(), 1u) << namesStr(ran);
  const auto after = engine().kernelDispatches();
  const uint64_t before = first.count(ran[0]) ? first.at(ran[0]) : 0;
  EXPECT_EQ(after.at(ran[0]), before + 1) << ran[0];
  kernelsOf("matmul", {a, b});
  EXPECT_EQ(engine().kernelDispatches().at(ran[0]), before + 2) << ran[0];
}

TEST_F(KernelRoutingTest, MatmulF32) {
  // Whole tiles, aligned rows: the fast kernel with vector loads and no edge tiles.
  auto ran = kernelsOf("matmul", {randomTensor(DType::F32, {256, 128}), randomTensor(DType::F32, {128, 256})});
  EXPECT_TRUE(anyStartsWith(ran, "matmul|f32|fast") && anyContains(ran, "|v4|in")) << namesStr(ran);
  // Rows of odd length: the fast kernel's element-wise loads, with edge tiles.
  ran = kernelsOf("matmul", {randomTensor(DType::F32, {130, 67}), randomTensor(DType::F32, {67, 70})});
  EXPECT_TRUE(anyStartsWith(ran, "matmul|f32|fast") && anyContains(ran, "|v1")) << namesStr(ran);
  EXPECT_FALSE(anyContains(ran, "|in")) << namesStr(ran);
  // linear's weight is [N, K]: the fast kernel reads b transposed.
  ran = kernelsOf("linear", {randomTensor(DType::F32, {128, 64}), randomTensor(DType::F32, {96, 64})});
  EXPECT_TRUE(anyStartsWith(ran, "matmul|f32|fast") && anyContains(ran, "|bt")) << namesStr(ran);
  // A product with fewer than 16 rows: one invocation per output.
  ran = kernelsOf("matmul", {randomTensor(DType::F32, {8, 64}), randomTensor(DType::F32, {64, 96})});
  EXPECT_EQ(ran, std::vector<std::string>{"matmul|f32|small"});
  // One output tile and a long K: split into slices, summed by a second pass.
  ran = kernelsOf("matmul", {randomTensor(DType::F32, {64, 4096}), randomTensor(DType::F32, {4096, 64})});
  EXPECT_TRUE(anyStartsWith(ran, longF32Product()) && anyStartsWith(ran, "matmul|f32|splitsum")) << namesStr(ran);
  // K of 256: split into bf16 parts on tensor cores where the device has
  // them (F32_SPLIT), b either way round; else the fast kernel.
  ran = kernelsOf("matmul", {randomTensor(DType::F32, {128, 256}), randomTensor(DType::F32, {256, 128})});
  EXPECT_TRUE(anyStartsWith(ran, longF32Product()) && !anyContains(ran, "|bt")) << namesStr(ran);
  ran = kernelsOf("linear", {randomTensor(DType::F32, {128, 256}), randomTensor(DType::F32, {96, 256})});
  EXPECT_TRUE(anyStartsWith(ran, longF32Product()) && anyContains(ran, "|bt")) << namesStr(ran);
  ASSERT_EQ(ran.size(), 1u) << namesStr(ran);
  EXPECT_EQ(ran[0].find("|coop") != std::string::npos, engine().device().features.f32SplitBf16) << ran[0];
}

TEST_F(KernelRoutingTest, MatmulHalfOnTensorCores) {
  for (DType dtype : {DType::F16, DType::BF16}) {
    if (!engine().dtypeSupported(dtype)) continue;
    const std::string d(dtypeName(dtype));
    auto ran = kernelsOf("matmul", {randomTensor(dtype, {128, 64}), randomTensor(dtype, {64, 128})});
    EXPECT_EQ(anyStartsWith(ran, "matmul|" + d + "|coop"), tensorCores(dtype)) << d << " " << namesStr(ran);
    if (!tensorCores(dtype)) {
      EXPECT_TRUE(anyStartsWith(ran, "matmul|" + d + "|fast")) << d << " " << namesStr(ran);
    }
  }
}

// Products whose K or N is not a multiple of 8: small ones whose a or b is
// unaligned take the FMA kernel; bigger ones (unalignedPays) stay on tensor
// cores, a and b copied with their rows padded to a multiple of 8; y, where
// its rows are unaligned, is stored one element at a time. Aligned products
// take none of that.
TEST_F(KernelRoutingTest, UnalignedProductsOnTensorCores) {
  for (DType dtype : {DType::F16, DType::BF16, DType::F32}) {
    if (!engine().dtypeSupported(dtype)) continue;
    const std::string d(dtypeName(dtype));
    const bool cores = dtype == DType::F32 ? engine().device().features.f32SplitBf16 : tensorCores(dtype);
    const int64_t k = dtype == DType::F32 ? 257 : 63;
    auto ran = kernelsOf("matmul", {randomTensor(dtype, {128, k}), randomTensor(dtype, {k, 130})});
    ASSERT_EQ(ran.size(), 1u) << d << " " << namesStr(ran);
    EXPECT_EQ(ran[0].rfind("matmul|" + d + "|fast", 0), 0u) << d << " " << ran[0];
    if (cores) {  // big enough; on the FMA kernel elsewhere, at length
      ran = kernelsOf("matmul", {randomTensor(dtype, {1024, 1023}), randomTensor(dtype, {1023, 521})});
      EXPECT_EQ(ran.size(), 2u) << d << " " << namesStr(ran);
      EXPECT_TRUE(anyStartsWith(ran, "matmul|" + d + "|pad") && anyContains(ran, "|bn|uy"))
          << d << " " << namesStr(ran);
      // b as [N, K] (y aligned): both padded, the product aligned.
      ran = kernelsOf("linear", {randomTensor(dtype, {1024, 1023}), randomTensor(dtype, {520, 1023})});
      EXPECT_TRUE(anyStartsWith(ran, "matmul|" + d + "|pad") && anyContains(ran, "|bt") && !anyContains(ran, "|u"))
          << d << " " << namesStr(ran);
      // Batched, b broadcast: padded matrix by matrix.
      ran = kernelsOf("matmul", {randomTensor(dtype, {2, 520, 1023}), randomTensor(dtype, {1, 1023, 521})});
      EXPECT_EQ(ran.size(), 2u) << d << " " << namesStr(ran);
      EXPECT_TRUE(anyStartsWith(ran, "matmul|" + d + "|pad") && anyContains(ran, "|bn|uy"))
          << d << " " << namesStr(ran);
    }
    const int64_t aligned = dtype == DType::F32 ? 264 : 64;
    ran = kernelsOf("matmul", {randomTensor(dtype, {128, aligned}), randomTensor(dtype, {aligned, 128})});
    ASSERT_EQ(ran.size(), 1u) << d << " " << namesStr(ran);
    EXPECT_EQ(ran[0].find("|u"), std::string::npos) << d << " " << ran[0];
    // A language model's output layer: only N (the vocabulary) is odd, so
    // only y's stores go one at a time.
    ran = kernelsOf("linear", {randomTensor(dtype, {128, aligned}), randomTensor(dtype, {131, aligned})});
    ASSERT_EQ(ran.size(), 1u) << d << " " << namesStr(ran);
    EXPECT_EQ(ran[0].size() > 3 && ran[0].compare(ran[0].size() - 3, 3, "|uy") == 0, cores) << d << " " << ran[0];
  }
}

// Reductions split over workgroups (long rows, whole tensors) finish in the
// last workgroup of each output, without a second pass; columns split over
// threads keep one.
TEST_F(KernelRoutingTest, SplitReductions) {
  const DType f = DType::F32;
  auto ran = kernelsOf("sum", {randomTensor(f, {300000})});
  EXPECT_EQ(ran, std::vector<std::string>{"sum|f32|1|p1|GROUP"}) << namesStr(ran);
  ran = kernelsOf("amax", {randomTensor(f, {3, 100000})}, {{"dim", Ints{1}}});
  EXPECT_EQ(ran, std::vector<std::string>{"amax|f32|1|p1|GROUP"}) << namesStr(ran);
  ran = kernelsOf("sum", {randomTensor(f, {20000, 3})}, {{"dim", Ints{0}}});
  EXPECT_TRUE(anyStartsWith(ran, "sum|f32|1|p1|THREAD") && anyStartsWith(ran, "sum|f32|1|p2|")) << namesStr(ran);
}

TEST_F(KernelRoutingTest, Conv2dF32) {
  const DType f = DType::F32;
  // 1x1, stride 1, no padding, groups or bias, 256 pixels per image: a product on the fast matmul kernel.
  auto ran = kernelsOf("conv2d", {randomTensor(f, {2, 64, 16, 16}), randomTensor(f, {128, 64, 1, 1})});
  EXPECT_TRUE(anyStartsWith(ran, "matmul|f32|fast")) << namesStr(ran);
  EXPECT_FALSE(anyStartsWith(ran, "conv_gemm")) << namesStr(ran);
  // The same at 14x14 (196 pixels): the implicit GEMM, without padding branches.
  ran = kernelsOf("conv2d", {randomTensor(f, {2, 64, 14, 14}), randomTensor(f, {128, 64, 1, 1})});
  EXPECT_TRUE(anyStartsWith(ran, "conv_gemm|f32|") && anyContains(ran, "|inside")) << namesStr(ran);
  EXPECT_FALSE(anyStartsWith(ran, "matmul")) << namesStr(ran);
  // 256 input channels at 14x14: a product on tensor cores where f32 products
  // run there (196 columns per image, a multiple of 4), else the implicit GEMM.
  ran = kernelsOf("conv2d", {randomTensor(f, {2, 256, 14, 14}), randomTensor(f, {64, 256, 1, 1})});
  if (engine().device().features.f32SplitBf16) {
    EXPECT_EQ(ran, std::vector<std::string>{"matmul|f32|coop64x128x32|w32x64|g8|s1|bn"});
  } else {
    EXPECT_TRUE(anyStartsWith(ran, "conv_gemm|f32|") && anyContains(ran, "|inside")) << namesStr(ran);
  }
  // The same at 7x7 with 4 images (196 pixels in all): one product over all
  // images from a channel-major copy where f32 products run on tensor cores.
  ran = kernelsOf("conv2d", {randomTensor(f, {4, 256, 7, 7}), randomTensor(f, {64, 256, 1, 1})});
  if (engine().device().features.f32SplitBf16) {
    EXPECT_TRUE(anyStartsWith(ran, "remap|f32") && anyStartsWith(ran, "matmul|f32|coop")) << namesStr(ran);
    EXPECT_FALSE(anyStartsWith(ran, "conv_gemm")) << namesStr(ran);
  } else {
    EXPECT_TRUE(anyStartsWith(ran, "conv_gemm|f32|") && anyContains(ran, "|inside")) << namesStr(ran);
  }
  // With bias: the implicit GEMM, which adds it.
  ran =
      kernelsOf("conv2d", {randomTensor(f, {2, 64, 16, 16}), randomTensor(f, {128, 64, 1, 1}), randomTensor(f, {128})});
  EXPECT_TRUE(anyStartsWith(ran, "conv_gemm|f32|")) << namesStr(ran);
  // Padded 3x3 with few channels: the implicit GEMM with its bounds tests.
  ran = kernelsOf("conv2d", {randomTensor(f, {2, 16, 10, 10}), randomTensor(f, {32, 16, 3, 3})},
                  {{"padding", Ints{1, 1}}});
  EXPECT_TRUE(anyStartsWith(ran, "conv_gemm|f32|")) << namesStr(ran);
  EXPECT_FALSE(anyContains(ran, "|inside")) << namesStr(ran);
  // 3x3, stride 1, 64 channels in and out: Winograd F(4x4, 3x3), its products on the fast matmul kernel.
  // 75 tiles of 4x4 outputs: the products' columns, 64 or more for the fast kernel.
  ran = kernelsOf("conv2d", {randomTensor(f, {3, 64, 20, 18}), randomTensor(f, {64, 64, 3, 3})},
                  {{"padding", Ints{1, 1}}});
  for (const char* pass : {"conv_winograd|WG_WEIGHT|f32|F4", "conv_winograd|WG_INPUT|f32|F4",
                           "conv_winograd|WG_OUTPUT|f32|F4", "matmul|f32|fast"}) {
    EXPECT_TRUE(anyStartsWith(ran, pass)) << pass << " " << namesStr(ran);
  }
  EXPECT_FALSE(anyStartsWith(ran, "conv_gemm")) << namesStr(ran);
  // 48 channels: not Winograd in f32.
  ran = kernelsOf("conv2d", {randomTensor(f, {2, 48, 10, 9}), randomTensor(f, {64, 48, 3, 3})},
                  {{"padding", Ints{1, 1}}});
  EXPECT_TRUE(anyStartsWith(ran, "conv_gemm|f32|")) << namesStr(ran);
  // K = 2 input channels x 1 tap: too short for the GEMM, the direct kernel.
  ran = kernelsOf("conv2d", {randomTensor(f, {1, 2, 5, 5}), randomTensor(f, {3, 2, 1, 1})});
  EXPECT_EQ(ran, std::vector<std::string>{"conv2d|f32"});
}

TEST_F(KernelRoutingTest, Conv2dHalf) {
  for (DType dtype : {DType::F16, DType::BF16}) {
    if (!engine().dtypeSupported(dtype)) continue;
    const std::string d(dtypeName(dtype));
    const bool cores = tensorCores(dtype);
    // 1x1 products run on tensor cores where there are any; else the implicit GEMM.
    auto ran = kernelsOf("conv2d", {randomTensor(dtype, {2, 16, 80, 80}), randomTensor(dtype, {256, 16, 1, 1})});
    EXPECT_EQ(anyStartsWith(ran, "matmul|" + d + "|coop"), cores) << d << " " << namesStr(ran);
    if (!cores) {
      EXPECT_TRUE(anyStartsWith(ran, "conv_gemm|" + d + "|")) << d << " " << namesStr(ran);
    }
    // A padded 3x3 of 32 input channels: the implicit GEMM, on tensor cores over taps first where there are any.
    ran = kernelsOf("conv2d", {randomTensor(dtype, {2, 32, 12, 12}), randomTensor(dtype, {64, 32, 3, 3})},
                    {{"padding", Ints{1, 1}}});
    EXPECT_TRUE(anyStartsWith(ran, "conv_gemm|" + d + "|")) << d << " " << namesStr(ran);
    EXPECT_EQ(anyContains(ran, "|coop"), cores) << d << " " << namesStr(ran);
    EXPECT_EQ(anyContains(ran, "|taps"), cores) << d << " " << namesStr(ran);
    // 128 channels in and out: Winograd on tensor cores; else the implicit GEMM.
    ran = kernelsOf("conv2d", {randomTensor(dtype, {2, 128, 16, 15}), randomTensor(dtype, {128, 128, 3, 3})},
                    {{"padding", Ints{1, 1}}});
    EXPECT_EQ(anyStartsWith(ran, "conv_winograd|WG_INPUT|" + d + "|F2"), cores) << d << " " << namesStr(ran);
    EXPECT_EQ(anyStartsWith(ran, "conv_gemm"), !cores) << d << " " << namesStr(ran);
  }
}

}  // namespace
}  // namespace tensord::compute::testing
