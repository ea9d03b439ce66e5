// Gradcheck cases of the conv family (see gradcheck.h): convolutions,
// pooling and interpolate, plus the backward ops' own checks and PyTorch's
// tie rule of max pooling.

#include <cmath>

#include "tests/compute/gradcheck.h"

namespace tensord::compute::testing {
namespace {

using Ints = std::vector<int64_t>;

std::vector<GradCase> convCases() {
  std::vector<GradCase> c;
  // The small CNN's layer: 3x3, padding 1, bias.
  c.push_back({"conv2d", {uniform({2, 3, 5, 5}), uniform({4, 3, 3, 3}), uniform({4})}, {{"padding", Ints{1}}}});
  // Stride 2 drops the last row and column (output_padding 1 in the input
  // gradient); no bias.
  c.push_back({"conv2d", {uniform({2, 2, 6, 6}), uniform({6, 2, 3, 3})}, {{"stride", Ints{2}}, {"padding", Ints{1}}}});
  // Groups, dilation, per-dim stride and padding.
  c.push_back({"conv2d",
               {uniform({2, 4, 6, 7}), uniform({6, 2, 2, 3}), uniform({6})},
               {{"stride", Ints{1, 2}}, {"padding", Ints{2, 1}}, {"dilation", Ints{2, 1}}, {"groups", int64_t(2)}}});
  // At stride 1 the input gradient is a conv with the taps reversed, unless
  // the padding is wider than the dilated kernel.
  c.push_back({"conv2d",
               {uniform({2, 4, 5, 6}), uniform({6, 2, 2, 3})},
               {{"padding", Ints{2, 1}}, {"dilation", Ints{2, 1}}, {"groups", int64_t(2)}}});
  c.push_back({"conv2d", {uniform({1, 2, 4, 4}), uniform({3, 2, 2, 2})}, {{"padding", Ints{2}}}});
  c.push_back({"conv2d", {uniform({3, 5, 4}), uniform({2, 3, 2, 2}), uniform({2})}});  // unbatched
  c.push_back(
      {"conv1d", {uniform({2, 3, 7}), uniform({4, 3, 3}), uniform({4})}, {{"stride", Ints{2}}, {"padding", Ints{1}}}});
  c.push_back({"conv1d", {uniform({2, 3, 9}), uniform({6, 1, 2})}, {{"dilation", Ints{3}}, {"groups", int64_t(3)}}});
  c.push_back({"conv1d", {uniform({3, 6}), uniform({2, 3, 3})}});  // unbatched
  // Enough positions that the weight gradient's sum splits into chunks, one
  // boundary inside a row.
  c.push_back({"conv2d", {uniform({3, 1, 19, 22}), uniform({2, 1, 3, 3})}, {{"padding", Ints{1}}}});
  c.push_back({"conv1d", {uniform({3, 1, 500}), uniform({2, 1, 3})}});

  c.push_back({"conv_transpose2d",
               {uniform({2, 3, 3, 4}), uniform({3, 2, 3, 3}), uniform({2})},
               {{"stride", Ints{2}}, {"padding", Ints{1}}, {"output_padding", Ints{1, 0}}}});
  c.push_back({"conv_transpose2d",
               {uniform({2, 4, 3, 3}), uniform({4, 3, 2, 3}), uniform({6})},
               {{"stride", Ints{1, 2}}, {"dilation", Ints{2, 1}}, {"groups", int64_t(2)}}});
  // output_padding 1 >= stride 1 (allowed below the dilation): the input
  // gradient's conv sees a row past the input.
  c.push_back({"conv_transpose2d",
               {uniform({1, 2, 3, 4}), uniform({2, 2, 2, 2})},
               {{"dilation", Ints{2}}, {"output_padding", Ints{1}}}});
  c.push_back({"conv_transpose1d",
               {uniform({2, 3, 4}), uniform({3, 2, 3}), uniform({2})},
               {{"stride", Ints{2}}, {"padding", Ints{1}}, {"output_padding", Ints{1}}}});
  c.push_back({"conv_transpose1d", {uniform({4, 5}), uniform({4, 1, 2}), uniform({2})}, {{"groups", int64_t(2)}}});
  c.push_back({"conv_transpose1d", {uniform({3, 1, 450}), uniform({1, 2, 3})}, {{"stride", Ints{2}}}});  // chunks
  // 16 or more channels per group: the forward and the input gradient run as
  // implicit GEMMs (conv at stride 1, conv_transpose at stride 2 and back).
  c.push_back({"conv2d", {uniform({2, 16, 5, 5}), uniform({16, 16, 3, 3}), uniform({16})}, {{"padding", Ints{1}}}});
  c.push_back({"conv2d",
               {uniform({1, 32, 6, 5}), uniform({32, 16, 3, 3})},
               {{"stride", Ints{2}}, {"padding", Ints{1}}, {"groups", int64_t(2)}}});
  c.push_back({"conv_transpose2d",
               {uniform({1, 16, 3, 4}), uniform({16, 16, 3, 3}), uniform({16})},
               {{"stride", Ints{2}}, {"padding", Ints{1}}, {"output_padding", Ints{1}}}});
  c.push_back({"conv1d", {uniform({2, 16, 9}), uniform({16, 16, 3})}, {{"padding", Ints{1}}}});
  return c;
}

std::vector<GradCase> poolCases() {
  std::vector<GradCase> c;
  // Max pooling on distinct inputs (no ties under the perturbation).
  c.push_back({"max_pool2d", {distinct({2, 2, 6, 6})}, {{"kernel_size", Ints{2}}}});
  // Overlapping windows add up.
  c.push_back(
      {"max_pool2d", {distinct({2, 2, 5, 5})}, {{"kernel_size", Ints{3}}, {"stride", Ints{1}}, {"padding", Ints{1}}}});
  c.push_back({"max_pool2d",
               {distinct({1, 2, 7, 6})},
               {{"kernel_size", Ints{3, 2}},
                {"stride", Ints{2, 1}},
                {"padding", Ints{1, 0}},
                {"dilation", Ints{1, 2}},
                {"ceil_mode", true}}});
  c.push_back({"max_pool2d", {distinct({2, 5, 5})}, {{"kernel_size", Ints{2}}, {"ceil_mode", true}}});  // unbatched
  c.push_back(
      {"max_pool1d", {distinct({2, 3, 9})}, {{"kernel_size", Ints{3}}, {"stride", Ints{2}}, {"padding", Ints{1}}}});
  c.push_back(
      {"max_pool1d", {distinct({2, 8})}, {{"kernel_size", Ints{2}}, {"dilation", Ints{2}}, {"ceil_mode", true}}});

  c.push_back({"avg_pool2d", {uniform({2, 2, 6, 6})}, {{"kernel_size", Ints{2}}}});
  c.push_back(
      {"avg_pool2d", {uniform({2, 2, 6, 5})}, {{"kernel_size", Ints{3}}, {"stride", Ints{2}}, {"padding", Ints{1}}}});
  c.push_back({"avg_pool2d",
               {uniform({1, 2, 6, 5})},
               {{"kernel_size", Ints{3}},
                {"stride", Ints{2}},
                {"padding", Ints{1}},
                {"count_include_pad", false},
                {"ceil_mode", true}}});
  c.push_back({"avg_pool2d",
               {uniform({1, 2, 5, 5})},
               {{"kernel_size", Ints{2, 3}}, {"stride", Ints{1}}, {"divisor_override", int64_t(5)}}});
  c.push_back({"avg_pool1d",
               {uniform({2, 3, 7})},
               {{"kernel_size", Ints{3}},
                {"stride", Ints{2}},
                {"padding", Ints{1}},
                {"count_include_pad", false},
                {"ceil_mode", true}}});
  c.push_back({"avg_pool1d", {uniform({3, 6})}, {{"kernel_size", Ints{2}}}});

  c.push_back({"adaptive_avg_pool2d", {uniform({2, 2, 7, 5})}, {{"output_size", Ints{3, 4}}}});
  c.push_back({"adaptive_avg_pool2d", {uniform({1, 2, 3, 4})}, {{"output_size", Ints{5, 7}}}});  // windows overlap
  c.push_back({"adaptive_avg_pool1d", {uniform({2, 3, 7})}, {{"output_size", Ints{3}}}});
  c.push_back({"adaptive_avg_pool1d", {uniform({3, 5})}, {{"output_size", Ints{8}}}});
  return c;
}

std::vector<GradCase> interpolateCases() {
  std::vector<GradCase> c;
  const Shape s = {2, 2, 4, 5};
  c.push_back({"interpolate", {uniform(s)}, {{"size", Ints{7, 3}}}});
  c.push_back({"interpolate", {uniform(s)}, {{"scale_factor", std::vector<double>{2.0}}}});
  c.push_back({"interpolate", {uniform(s)}, {{"size", Ints{6, 9}}, {"mode", std::string("nearest-exact")}}});
  c.push_back({"interpolate",
               {uniform(s)},
               {{"scale_factor", std::vector<double>{1.5, 0.6}}, {"mode", std::string("nearest-exact")}}});
  c.push_back({"interpolate", {uniform(s)}, {{"size", Ints{7, 8}}, {"mode", std::string("bilinear")}}});
  c.push_back({"interpolate", {uniform(s)}, {{"size", Ints{3, 2}}, {"mode", std::string("bilinear")}}});
  c.push_back({"interpolate",
               {uniform(s)},
               {{"size", Ints{7, 8}}, {"mode", std::string("bilinear")}, {"align_corners", true}}});
  c.push_back({"interpolate",
               {uniform(s)},
               {{"size", Ints{1, 3}}, {"mode", std::string("bilinear")}, {"align_corners", true}}});
  c.push_back(
      {"interpolate", {uniform(s)}, {{"scale_factor", std::vector<double>{1.7}}, {"mode", std::string("bilinear")}}});
  return c;
}

const std::vector<GradCase> kConv = convCases();
const std::vector<GradCase> kPool = poolCases();
const std::vector<GradCase> kInterpolate = interpolateCases();
TENSORD_GRAD_CASES(conv, kConv);
TENSORD_GRAD_CASES(pool, kPool);
TENSORD_GRAD_CASES(interpolate, kInterpolate);

TEST_F(GradcheckTest, ConvConvolution) { checkAll(kConv); }
TEST_F(GradcheckTest, ConvPooling) { checkAll(kPool); }
TEST_F(GradcheckTest, ConvInterpolate) { checkAll(kInterpolate); }

HostTensor t(const Shape& s) { return randomTensor(DType::F32, s); }

// Ties go to the first maximum in window order, as PyTorch's max_pool2d
// (and, within one window, its NaN: the last one).
TEST_F(GradcheckTest, ConvMaxPoolTies) {
  const double nan = std::nan("");
  HostTensor x = makeTensor(DType::F32, {1, 1, 2, 4},
                            {1, 3, 5, nan,  //
                             3, 2, 5, nan});
  HostTensor grad = makeTensor(DType::F32, {1, 1, 1, 2}, {10, 20});
  auto out = call("max_pool2d_backward", {grad, x}, {{"kernel_size", Ints{2}}});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].values, (std::vector<double>{0, 10, 0, 0, 0, 0, 0, 20}));
  // Overlapping windows that pick the same element add up.
  x = makeTensor(DType::F32, {1, 4}, {1, 2, 9, 3});
  grad = makeTensor(DType::F32, {1, 3}, {1, 2, 4});
  out = call("max_pool1d_backward", {grad, x}, {{"kernel_size", Ints{2}}, {"stride", Ints{1}}});
  EXPECT_EQ(out[0].values, (std::vector<double>{0, 1, 6, 0}));
}

// f16 gradients come back in f16 and agree with f32 ones.
TEST_F(GradcheckTest, ConvHalfPrecision) {
  HostTensor x = randomTensor(DType::F16, {2, 3, 5, 5}), w = randomTensor(DType::F16, {4, 3, 3, 3});
  HostTensor b = randomTensor(DType::F16, {4}), grad = randomTensor(DType::F16, {2, 4, 5, 5});
  auto as32 = [](const HostTensor& h) { return makeTensor(DType::F32, h.shape, h.values); };
  const std::vector<std::pair<std::string, AttrValue>> attrs = {{"padding", Ints{1}}};
  auto half = call("conv2d_backward", {grad, x, w, b}, attrs);
  auto full = call("conv2d_backward", {as32(grad), as32(x), as32(w), as32(b)}, attrs);
  ASSERT_EQ(half.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(half[i].dtype, DType::F16);
    // Sums of up to 2 * 25 products (the weight gradient): atol scaled by the term count.
    expectClose(half[i], makeTensor(DType::F16, full[i].shape, full[i].values), "gradient " + std::to_string(i), 50);
  }
}

TEST_F(GradcheckTest, ConvBackwardErrors) {
  auto expectError = [](const std::string& got, std::initializer_list<const char*> parts) {
    for (const char* p : parts) EXPECT_NE(got.find(p), std::string::npos) << "message: " << got << "\nmissing: " << p;
  };
  expectError(errorOf("conv2d_backward", {t({2, 4, 4, 4}), t({2, 3, 5, 5}), t({4, 3, 3, 3})}, {{"padding", Ints{1}}}),
              {"conv2d_backward", "input 'grad' has shape [2, 4, 4, 4]", "expected [2, 4, 5, 5]"});
  expectError(errorOf("conv_transpose1d_backward", {t({2, 2, 8}), t({2, 3, 4}), t({3, 2, 3})}, {{"stride", Ints{2}}}),
              {"conv_transpose1d_backward", "input 'grad' has shape [2, 2, 8]", "expected [2, 2, 9]"});
  // The forward's own checks, under the backward's name.
  expectError(errorOf("conv2d_backward", {t({2, 4, 5, 5}), t({2, 3, 5, 5}), t({4, 2, 3, 3})}),
              {"conv2d_backward", "'weight'", "dim 1 to be 3", "got 2"});
  expectError(errorOf("max_pool2d_backward", {t({1, 2, 3, 3}), t({1, 2, 6, 6})}, {{"kernel_size", Ints{3}}}),
              {"max_pool2d_backward", "input 'grad' has shape [1, 2, 3, 3]", "expected [1, 2, 2, 2]"});
  expectError(
      errorOf("avg_pool1d_backward", {t({1, 2, 3}), t({1, 2, 6})}, {{"kernel_size", Ints{2}}, {"padding", Ints{2}}}),
      {"avg_pool1d_backward", "'padding'", "half the kernel size"});
  expectError(errorOf("adaptive_avg_pool2d_backward", {t({1, 2, 3}), t({1, 2, 6, 6})}, {{"output_size", Ints{3}}}),
              {"adaptive_avg_pool2d_backward", "input 'grad' has shape [1, 2, 3]", "expected [1, 2, 3, 3]"});
  expectError(errorOf("interpolate_backward", {t({1, 1, 4, 4}), t({1, 1, 2, 2})}, {{"size", Ints{4, 5}}}),
              {"interpolate_backward", "input 'grad' has shape [1, 1, 4, 4]", "expected [1, 1, 4, 5]"});
  expectError(errorOf("interpolate_backward", {t({1, 1, 4, 4}), t({1, 1, 2, 2})},
                      {{"size", Ints{4}}, {"mode", std::string("cubic")}}),
              {"interpolate_backward", "'mode' is 'cubic'"});
}

}  // namespace
}  // namespace tensord::compute::testing
