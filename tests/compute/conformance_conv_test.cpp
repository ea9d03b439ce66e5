// Conformance of the convolution, pooling and resampling family
// (compute/ops_conv.cpp) against CPU references in double. The conv
// reference for conv_transpose2d scatters (the kernel gathers), and a few
// results are checked against values PyTorch prints.

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <future>
#include <limits>
#include <optional>

#include "tests/compute/conformance.h"

namespace tensord::compute::testing {
namespace {

TENSORD_COVERS(conv, "conv1d", "conv2d", "conv_transpose1d", "conv_transpose2d", "max_pool1d", "max_pool2d",
               "avg_pool1d", "avg_pool2d", "adaptive_avg_pool1d", "adaptive_avg_pool2d", "interpolate");

using Ints = std::vector<int64_t>;
using AttrList = std::vector<std::pair<std::string, AttrValue>>;

struct Conv2dArgs {
  Ints stride{1, 1}, padding{0, 0}, dilation{1, 1}, outputPadding{0, 0};
  int64_t groups = 1;
};

// conv2d / conv_transpose2d on [N, C, H, W] in double.
HostTensor convRef(const HostTensor& x, const HostTensor& w, const HostTensor* bias, const Conv2dArgs& a,
                   bool transposed, DType outDType) {
  const int64_t n = x.shape[0], c = x.shape[1], h = x.shape[2], wd = x.shape[3];
  const int64_t kh = w.shape[2], kw = w.shape[3], g = a.groups, cg = c / g;
  const int64_t o = transposed ? w.shape[1] * g : w.shape[0], og = o / g;
  int64_t oh, ow;
  if (transposed) {
    oh = (h - 1) * a.stride[0] - 2 * a.padding[0] + a.dilation[0] * (kh - 1) + a.outputPadding[0] + 1;
    ow = (wd - 1) * a.stride[1] - 2 * a.padding[1] + a.dilation[1] * (kw - 1) + a.outputPadding[1] + 1;
  } else {
    oh = (h + 2 * a.padding[0] - a.dilation[0] * (kh - 1) - 1) / a.stride[0] + 1;
    ow = (wd + 2 * a.padding[1] - a.dilation[1] * (kw - 1) - 1) / a.stride[1] + 1;
  }
  Shape outShape{n, o, oh, ow};
  std::vector<double> y(size_t(n * o * oh * ow), 0.0);
  auto X = [&](int64_t b, int64_t ch, int64_t i, int64_t j) { return x.values[size_t(((b * c + ch) * h + i) * wd + j)]; };
  auto Y = [&](int64_t b, int64_t ch, int64_t i, int64_t j) -> double& { return y[size_t(((b * o + ch) * oh + i) * ow + j)]; };
  if (!transposed) {
    for (int64_t b = 0; b < n; ++b)
      for (int64_t oc = 0; oc < o; ++oc)
        for (int64_t i = 0; i < oh; ++i)
          for (int64_t j = 0; j < ow; ++j) {
            double s = bias ? bias->values[size_t(oc)] : 0.0;
            int64_t grp = oc / og;
            for (int64_t ci = 0; ci < cg; ++ci)
              for (int64_t u = 0; u < kh; ++u)
                for (int64_t v = 0; v < kw; ++v) {
                  int64_t ih = i * a.stride[0] - a.padding[0] + u * a.dilation[0];
                  int64_t iw = j * a.stride[1] - a.padding[1] + v * a.dilation[1];
                  if (ih < 0 || ih >= h || iw < 0 || iw >= wd) continue;
                  s += X(b, grp * cg + ci, ih, iw) * w.values[size_t(((oc * cg + ci) * kh + u) * kw + v)];
                }
            Y(b, oc, i, j) = s;
          }
  } else {
    // Scatter every input element into the outputs it feeds.
    for (int64_t b = 0; b < n; ++b)
      for (int64_t ch = 0; ch < c; ++ch)
        for (int64_t i = 0; i < h; ++i)
          for (int64_t j = 0; j < wd; ++j) {
            int64_t grp = ch / cg;
            for (int64_t ocl = 0; ocl < og; ++ocl)
              for (int64_t u = 0; u < kh; ++u)
                for (int64_t v = 0; v < kw; ++v) {
                  int64_t yi = i * a.stride[0] - a.padding[0] + u * a.dilation[0];
                  int64_t yj = j * a.stride[1] - a.padding[1] + v * a.dilation[1];
                  if (yi < 0 || yi >= oh || yj < 0 || yj >= ow) continue;
                  Y(b, grp * og + ocl, yi, yj) += X(b, ch, i, j) * w.values[size_t(((ch * og + ocl) * kh + u) * kw + v)];
                }
          }
    if (bias) {
      for (int64_t k = 0; k < int64_t(y.size()); ++k) y[size_t(k)] += bias->values[size_t((k / (oh * ow)) % o)];
    }
  }
  return makeTensor(outDType, outShape, y);
}

AttrList convAttrs(const Conv2dArgs& a, bool transposed) {
  AttrList attrs = {{"stride", a.stride}, {"padding", a.padding}, {"dilation", a.dilation}, {"groups", a.groups}};
  if (transposed) attrs.push_back({"output_padding", a.outputPadding});
  return attrs;
}

struct ConvCase {
  Shape x, w;
  Conv2dArgs args;
  bool bias;
  DType dtype = DType::F32;
};

class ConvConformanceTest : public ConformanceTest {
 protected:
  // `tol`: absolute and relative tolerance; by default the dtype's, the
  // absolute part scaled by the number of terms of an output.
  static void checkConv(const ConvCase& k, bool transposed, std::optional<Tolerance> tol = std::nullopt);
};

void ConvConformanceTest::checkConv(const ConvCase& k, bool transposed, std::optional<Tolerance> tol) {
  HostTensor x = randomTensor(k.dtype, k.x), w = randomTensor(k.dtype, k.w);
  std::vector<HostTensor> in = {x, w};
  HostTensor b;
  int64_t o = transposed ? k.w[1] * k.args.groups : k.w[0];
  if (k.bias) in.push_back(b = randomTensor(k.dtype, {o}));
  std::string op = transposed ? "conv_transpose2d" : "conv2d";
  auto got = call(op, in, convAttrs(k.args, transposed));
  HostTensor want = convRef(x, w, k.bias ? &b : nullptr, k.args, transposed, k.dtype);
  ASSERT_EQ(got[0].shape, want.shape) << op << " " << dimsName(k.x) << " " << dimsName(k.w);
  int64_t terms = (transposed ? k.x[1] / k.args.groups : k.w[1]) * k.w[2] * k.w[3] + 1;
  const std::string what = op + " x " + dimsName(k.x) + " w " + dimsName(k.w);
  if (tol) expectClose(got[0], want, what, 1.0, *tol);
  else expectClose(got[0], want, what, double(terms));
}

TEST_F(ConvConformanceTest, Conv2d) {
  using A = Conv2dArgs;
  const ConvCase cases[] = {
      {{2, 3, 7, 6}, {5, 3, 3, 3}, A{}, true},                                      // plain, O not a multiple of 4
      {{1, 4, 9, 8}, {8, 4, 3, 2}, A{.stride = {2, 1}, .padding = {1, 0}}, false},  // stride, padding per dim
      {{2, 2, 10, 9}, {3, 2, 3, 3}, A{.stride = {2, 3}, .padding = {2, 1}, .dilation = {2, 3}}, true},
      {{1, 6, 5, 5}, {9, 2, 3, 3}, A{.padding = {1, 1}, .groups = 3}, true},  // groups, 3 out channels per group
      {{2, 4, 6, 6}, {4, 1, 3, 3}, A{.stride = {2, 2}, .padding = {1, 1}, .groups = 4}, false},  // depthwise
      {{1, 1, 1, 1}, {1, 1, 1, 1}, A{}, true},                                      // size-1 everything
      {{3, 2, 4, 4}, {2, 2, 4, 4}, A{}, false},                                     // kernel = input: 1x1 output
      {{1, 3, 2, 3}, {7, 3, 5, 5}, A{.padding = {2, 2}}, true},                     // kernel fits only with padding
      {{0, 2, 5, 5}, {3, 2, 3, 3}, A{}, true},                                      // size-0 batch
      {{2, 16, 12, 12}, {16, 16, 3, 3}, A{.padding = {1, 1}}, true},                // a realistic block
  };
  for (const auto& k : cases) checkConv(k, false);
}

TEST_F(ConvConformanceTest, Conv2dHalfAndBfloat) {
  checkConv({{2, 4, 7, 7}, {6, 2, 3, 3}, {.stride = {2, 2}, .padding = {1, 1}, .groups = 2}, true, DType::F16}, false);
  checkConv({{1, 3, 6, 5}, {4, 3, 2, 3}, {.dilation = {2, 1}}, true, DType::BF16}, false);
  checkConv({{1, 4, 3, 4}, {4, 2, 3, 3}, {.stride = {2, 2}, .padding = {1, 1}, .outputPadding = {1, 1}}, true,
             DType::F16},
            true);
  checkConv({{1, 2, 3, 3}, {2, 3, 2, 2}, {.stride = {2, 2}}, false, DType::BF16}, true);
}

// Shapes with at least 16 output channels per group and 16 products per
// output run as an implicit GEMM (conv_gemm.comp; in f16 on a device with
// cooperative matrices, conv_gemm_coop.comp), the others on the direct
// kernel; these cover the GEMM's paths: padding, stride, dilation, groups,
// tiles cut by the channel and pixel counts, batches, bias or none, weights
// loaded as vectors (K a multiple of 4) or not, both tile widths
// template_conv.cpp picks, and convolutions without padding (whose loads
// run without branches).
namespace {

std::vector<ConvCase> implicitGemmCases(DType dtype) {
  using A = Conv2dArgs;
  return {
      {{2, 3, 9, 7}, {16, 3, 3, 3}, A{.padding = {1, 1}}, true, dtype},                        // 126 pixels, K = 27
      {{2, 4, 11, 10}, {20, 4, 3, 2}, A{.stride = {2, 1}, .padding = {1, 0}, .dilation = {2, 3}}, false, dtype},
      {{1, 6, 8, 8}, {34, 3, 3, 3}, A{.stride = {1, 2}, .padding = {2, 1}, .groups = 2}, true, dtype},  // 17 per group
      {{3, 32, 5, 5}, {24, 32, 1, 1}, A{.stride = {2, 2}}, false, dtype},                      // 1x1, stride
      {{1, 5, 4, 4}, {16, 5, 4, 4}, A{.padding = {3, 3}, .dilation = {2, 2}}, true, dtype},    // taps mostly in the padding
      {{2, 8, 9, 9}, {70, 4, 3, 3}, A{.padding = {1, 1}, .groups = 2}, true, dtype},           // 35 per group: tiles cut
      {{1, 16, 7, 7}, {130, 16, 2, 2}, A{}, true, dtype},                                      // 130 channels, 2 tile rows
      {{2, 16, 80, 80}, {256, 16, 1, 1}, A{}, true, dtype},                                    // 128-pixel tiles
      {{2, 32, 80, 80}, {256, 16, 1, 1}, A{.groups = 2}, false, dtype},                        // ... in 2 groups
      {{3, 32, 8, 8}, {64, 32, 1, 1}, A{.dilation = {2, 3}}, true, dtype},  // 1x1 with bias on whole tiles
      {{1, 96, 34, 34}, {1536, 2, 3, 3}, A{.groups = 48}, true, dtype},  // ... in 48 groups, K = 18: scalar weights
      {{2, 40, 9, 11}, {64, 40, 3, 3}, A{.padding = {1, 1}}, true, dtype},  // K = 360: many K steps, a partial last one
      // No padding (loads without branches): partial last K steps, channels and pixels past a tile
      {{2, 5, 9, 8}, {18, 5, 3, 3}, A{}, false, dtype},                    // K = 45: scalar weights
      {{2, 12, 9, 8}, {20, 12, 3, 3}, A{.stride = {2, 1}}, true, dtype},  // K = 108: vector weights
      // 32 and 64 input channels per group: the tensor-core kernel's K runs over taps, then channels
      {{2, 64, 9, 11}, {40, 64, 3, 3}, A{.stride = {1, 2}, .padding = {1, 1}}, true, dtype},
      {{1, 64, 7, 7}, {34, 32, 3, 3}, A{.padding = {2, 1}, .dilation = {2, 2}, .groups = 2}, false, dtype},
      {{2, 64, 20, 20}, {130, 64, 3, 3}, A{.padding = {1, 1}}, true, dtype},  // 3 x 4 tiles of 64 x 256
      // ... dilated: the same in f32 (which takes Winograd without dilation), K = 576, 3 tile rows
      {{2, 64, 20, 20}, {130, 64, 3, 3}, A{.padding = {2, 2}, .dilation = {2, 2}}, true, dtype},
  };
}

std::vector<ConvCase> implicitGemmTransposedCases(DType dtype) {
  using A = Conv2dArgs;
  return {
      {{2, 8, 5, 4}, {8, 16, 3, 3}, A{.padding = {1, 1}}, true, dtype},  // stride 1: one phase
      {{1, 8, 5, 6}, {8, 20, 3, 3}, A{.stride = {2, 2}, .padding = {1, 1}, .outputPadding = {1, 1}}, false, dtype},
      {{2, 16, 4, 5}, {16, 16, 3, 4},
       A{.stride = {3, 2}, .padding = {1, 0}, .dilation = {2, 1}, .outputPadding = {1, 1}, .groups = 2}, true, dtype},
      {{1, 64, 4, 4}, {64, 16, 1, 1}, A{.stride = {2, 2}}, true, dtype},  // phases no tap reaches: the bias alone
      {{1, 16, 6, 6}, {16, 17, 3, 3}, A{.padding = {2, 2}}, false, dtype},  // padding past the kernel's reach
      {{2, 18, 4, 3}, {18, 16, 4, 4}, A{.stride = {2, 2}, .padding = {1, 1}}, true, dtype},  // the usual 2x upsampler
  };
}

}  // namespace

TEST_F(ConvConformanceTest, Conv2dImplicitGemm) {
  for (const auto& k : implicitGemmCases(DType::F32)) checkConv(k, false);
  checkConv({{2, 8, 6, 7}, {32, 4, 3, 3}, {.stride = {2, 1}, .padding = {1, 1}, .groups = 2}, true, DType::F16},
            false);
  checkConv({{1, 6, 9, 5}, {18, 6, 2, 3}, {.padding = {1, 0}, .dilation = {2, 1}}, false, DType::BF16}, false);
}

// A 1x1 convolution of stride 1 without padding, groups or bias is a
// product, weight [O, C] @ input [N, C, H * W] (template_conv.cpp's
// pointwiseProductSpec; the implicit GEMM's 1x1 cases above have bias,
// stride or groups). f32 takes it where there are 64 or more output
// channels and 256 or more pixels per image: edge tiles in both (70
// channels of 289 pixels, a row length no multiple of 4), whole tiles, an
// unbatched input, and 14x14 and 7x7 images, which stay on the implicit
// GEMM.
TEST_F(ConvConformanceTest, Conv2dPointwiseProduct) {
  using A = Conv2dArgs;
  const ConvCase cases[] = {
      {{3, 40, 17, 17}, {70, 40, 1, 1}, A{}, false},
      {{2, 64, 16, 16}, {128, 64, 1, 1}, A{}, false},
      {{2, 96, 16, 20}, {64, 96, 1, 1}, A{.dilation = {2, 2}}, false},  // dilation means nothing to a 1x1 kernel
      {{2, 32, 14, 14}, {64, 32, 1, 1}, A{}, false},
      {{2, 32, 7, 7}, {64, 32, 1, 1}, A{}, false},
      // 256 or more input channels at 14x14: on devices whose f32 products
      // run on tensor cores, a product with 196 columns per image (a
      // multiple of 4, not of 8); elsewhere the implicit GEMM.
      {{2, 256, 14, 14}, {72, 256, 1, 1}, A{}, false},
      // ... and at 7x7 (49 pixels), with 4 images: 196 pixels in all, one
      // product over them all from a channel-major copy of the input.
      {{4, 256, 7, 7}, {72, 256, 1, 1}, A{}, false},
      {{2, 256, 7, 7}, {72, 256, 1, 1}, A{}, false},  // 98 pixels: the implicit GEMM everywhere
  };
  for (const auto& k : cases) checkConv(k, false);
  // f16 and bf16 take it on tensor cores (elsewhere the implicit GEMM).
  for (DType dtype : {DType::F16, DType::BF16}) checkConv({{2, 16, 80, 80}, {256, 16, 1, 1}, A{}, false, dtype}, false);
  HostTensor x = randomTensor(DType::F32, {48, 16, 20}), w = randomTensor(DType::F32, {72, 48, 1, 1});
  auto got = call("conv2d", {x, w});
  HostTensor x4 = x;
  x4.shape.insert(x4.shape.begin(), 1);
  HostTensor want = convRef(x4, w, nullptr, A{}, false, DType::F32);
  want.shape.erase(want.shape.begin());
  expectClose(got[0], want, "conv2d unbatched 1x1", 48.0 + 1);
}

// f32 conv2d with 3x3 kernels, stride 1, dilation 1, one group and about
// 64 or more input and output channels runs as Winograd F(4x4, 3x3)
// (conv_winograd.comp around the matmul kernels): outputs whose height and
// width leave 1, 2 or 3 of a tile (tiles cut at the edge), every padding a
// 3x3 kernel takes, channel counts that are not multiples of 4 (the
// product's scalar path), one output per image, an unbatched input, bias or
// none.
TEST_F(ConvConformanceTest, Conv2dWinograd) {
  using A = Conv2dArgs;
  const ConvCase cases[] = {
      {{2, 128, 9, 7}, {128, 128, 3, 3}, A{}, true},                     // 7x5 outputs, no padding
      {{1, 130, 6, 11}, {131, 130, 3, 3}, A{.padding = {1, 1}}, false},  // 130 in, 131 out
      {{3, 128, 5, 8}, {160, 128, 3, 3}, A{.padding = {2, 0}}, true},    // padding 2 and 0
      {{2, 128, 3, 3}, {256, 128, 3, 3}, A{}, true},                     // one output per image
      {{3, 64, 10, 9}, {64, 64, 3, 3}, A{.padding = {1, 1}}, false},     // 64 channels: f32's least
  };
  for (const auto& k : cases) checkConv(k, false);
  // f16 and bf16 take the path on tensor cores (elsewhere the implicit GEMM),
  // where the product has 64 or more columns (tiles), their transformed
  // operands rounded to the dtype. On an H100 these cases (outputs of rms
  // 11) were off by at most 0.031 in f16 and 0.25 in bf16, two units in the
  // last place at outputs of 16 to 32: held to a few times that.
  for (DType dtype : {DType::F16, DType::BF16}) {
    const Tolerance tol = dtype == DType::F16 ? Tolerance{0.1, 4e-3} : Tolerance{0.5, 1.6e-2};
    checkConv({{2, 128, 16, 15}, {128, 128, 3, 3}, A{.padding = {1, 1}}, true, dtype}, false, tol);  // 128 tiles
    checkConv({{1, 136, 18, 19}, {256, 136, 3, 3}, A{}, false, dtype}, false, tol);                   // 72 tiles
  }
  // Unbatched [C, H, W].
  HostTensor x = randomTensor(DType::F32, {128, 5, 6}), w = randomTensor(DType::F32, {136, 128, 3, 3});
  auto got = call("conv2d", {x, w}, {{"padding", Ints{1, 1}}});
  HostTensor x4 = x;
  x4.shape.insert(x4.shape.begin(), 1);
  HostTensor want = convRef(x4, w, nullptr, A{.padding = {1, 1}}, false, DType::F32);
  want.shape.erase(want.shape.begin());
  expectClose(got[0], want, "conv2d unbatched Winograd", 128.0 * 9 + 1);
}

// f32 takes Winograd F(4x4, 3x3), whose transforms scale values by up to
// 8 and round them: its errors may exceed those of a direct convolution's
// f32 sums, by about 2.8x on operands in [-1, 1] (on operands in [0, 1]
// its 128-term products err less than 1152-term sums). Held to 4x the RMS
// error of the direct convolution summed in order in f32 on the host.
TEST_F(ConvConformanceTest, Conv2dWinogradF32IsNearF32InOrder) {
  const int64_t n = 2, c = 128, o = 128, h = 16, wd = 16;
  for (double lo : {-1.0, 0.0}) {
    HostTensor x = randomTensor(DType::F32, {n, c, h, wd}, lo, 1), w = randomTensor(DType::F32, {o, c, 3, 3}, lo, 1);
    const HostTensor got = call("conv2d", {x, w}, {{"padding", Ints{1, 1}}})[0];
    const HostTensor exact = convRef(x, w, nullptr, Conv2dArgs{.padding = {1, 1}}, false, DType::F32);
    double device = 0, host = 0;
    for (int64_t b = 0; b < n; ++b)
      for (int64_t oc = 0; oc < o; ++oc)
        for (int64_t i = 0; i < h; ++i)
          for (int64_t j = 0; j < wd; ++j) {
            float s = 0;
            for (int64_t ci = 0; ci < c; ++ci)
              for (int64_t u = 0; u < 3; ++u)
                for (int64_t v = 0; v < 3; ++v) {
                  const int64_t ih = i - 1 + u, iw = j - 1 + v;
                  if (ih < 0 || ih >= h || iw < 0 || iw >= wd) continue;
                  s += float(x.values[size_t(((b * c + ci) * h + ih) * wd + iw)]) *
                       float(w.values[size_t(((oc * c + ci) * 3 + u) * 3 + v)]);
                }
            const size_t at = size_t(((b * o + oc) * h + i) * wd + j);
            host += (double(s) - exact.values[at]) * (double(s) - exact.values[at]);
            device += (got.values[at] - exact.values[at]) * (got.values[at] - exact.values[at]);
          }
    const double count = double(n * o * h * wd);
    device = std::sqrt(device / count), host = std::sqrt(host / count);
    std::printf(
        "conv2d f32 3x3 %lldx%lldx%lldx%lld, operands in [%g, 1]: RMS error %.3g on the device, %.3g in order "
        "on the host\n",
        (long long)n, (long long)c, (long long)h, (long long)wd, lo, device, host);
    EXPECT_LE(device, 4 * host) << "operands in [" << lo << ", 1]";
  }
}

// Values near the top of f16's range through the Winograd path (on tensor
// cores; elsewhere the implicit GEMM runs): a transformed input sums four
// inputs and a transformed weight is up to 2.25 times the kernel's largest
// entry, more than f16 holds here, while every output stays well inside it.
TEST_F(ConvConformanceTest, Conv2dWinogradHalfLargeValues) {
  using A = Conv2dArgs;
  const Shape xs{2, 128, 16, 16}, ws{128, 128, 3, 3};
  // Inputs of +-30000, the sign flipping every two rows and columns: with
  // padding 1 a tile's first and third rows (and columns) differ in sign,
  // so its (0, 0) transform is 4 x 30000. Small weights.
  HostTensor x = randomTensor(DType::F16, xs), w = randomTensor(DType::F16, ws, -1e-3, 1e-3);
  for (int64_t i = 0; i < x.numel(); ++i) {
    const int64_t h = (i / xs[3]) % xs[2], col = i % xs[3];
    x.values[size_t(i)] = ((h / 2 + col / 2) % 2 == 0 ? 30000.0 : -30000.0);
  }
  const Tolerance tol{8.0, 1e-2};
  auto got = call("conv2d", {x, w}, {{"padding", Ints{1, 1}}});
  expectClose(got[0], convRef(x, w, nullptr, A{.padding = {1, 1}}, false, DType::F16),
              "conv2d f16 inputs of 30000 (Winograd)", 1.0, tol);
  // Kernels of 40000 (a transformed weight of 90000) on four input channels
  // of output channel 0, small inputs.
  HostTensor x2 = randomTensor(DType::F16, xs, -1e-2, 1e-2), w2 = randomTensor(DType::F16, ws, -1e-3, 1e-3);
  for (int64_t i = 0; i < 4 * 9; ++i) w2.values[size_t(i)] = 40000.0;
  got = call("conv2d", {x2, w2}, {{"padding", Ints{1, 1}}});
  expectClose(got[0], convRef(x2, w2, nullptr, A{.padding = {1, 1}}, false, DType::F16),
              "conv2d f16 weights of 40000 (Winograd)", 1.0, tol);
}

// Where the Winograd path's scratch memory is not to be had (an engine near
// its memory limit), the implicit GEMM runs instead and the call succeeds.
TEST_F(ConvConformanceTest, Conv2dWinogradWithoutScratchMemoryFallsBack) {
  auto conv = [](Engine* on) {
    auto x = run("randn", {}, {{"size", Ints{1, 128, 4, 4}}, {"seed", int64_t(1)}}, on)[0];
    auto w = run("randn", {}, {{"size", Ints{128, 128, 3, 3}}, {"seed", int64_t(2)}}, on)[0];
    return download(run("conv2d", {x, w}, {{"padding", Ints{1, 1}}}, on)[0], on);
  };
  const std::vector<float> want = conv(nullptr);  // Winograd, memory to spare
  // The weight (576 KiB) fits; its transform (2.25 MiB: 36 points) does not.
  auto small = limitedEngine(1 << 20, "winograd-limit");
  const std::vector<float> got = conv(small.get());
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], want[i], 1e-3 * (1 + std::abs(want[i]))) << i;
}

// Scratch memory of one job serves the later jobs of its batch (each waits
// for the ones before it): four Winograd convs submitted together hold the
// intermediates of one, and each still gets its own result.
TEST_F(ConvConformanceTest, Conv2dWinogradJobsOfABatchShareScratch) {
  Engine& e = engine();
  const OpSpec& conv = *e.ops().find("conv2d");
  const Attrs attrs = validateAttrs(conv, {{"padding", Ints{1, 1}}});
  auto w = run("randn", {}, {{"size", Ints{128, 128, 3, 3}}, {"seed", int64_t(7)}})[0];
  std::vector<TensorView> xs, ys, want;
  for (int i = 0; i < 4; ++i) {
    xs.push_back(run("randn", {}, {{"size", Ints{1, 128, 6, 6}}, {"seed", int64_t(10 + i)}})[0]);
    want.push_back(run("conv2d", {xs[i], w}, {{"padding", Ints{1, 1}}})[0]);
    ys.push_back({want[i].desc, e.allocate(want[i].desc.bytes(), "test")});
  }
  e.waitIdle();
  const uint64_t before = e.memoryStats().reservedBytes;
  std::atomic<int> left{4};
  std::promise<void> done;
  e.holdSubmits();
  for (int i = 0; i < 4; ++i) {
    e.enqueueOp("test", conv, {xs[i], w}, {ys[i]}, attrs, [&](std::exception_ptr error) {
      if (error) ADD_FAILURE() << "conv2d failed";
      if (--left == 0) done.set_value();
    });
  }
  e.releaseSubmits();
  done.get_future().get();
  // One conv's intermediates: the transformed weight (2.25 MiB) and 2 x 144
  // KiB; two convs' would be more than 5 MiB.
  EXPECT_LT(e.memoryStats().reservedBytes - before, uint64_t(5) << 20) << "each conv took scratch of its own";
  for (int i = 0; i < 4; ++i) EXPECT_EQ(download(ys[i]), download(want[i])) << "conv " << i;
}

TEST_F(ConvConformanceTest, ConvTranspose2dImplicitGemm) {
  for (const auto& k : implicitGemmTransposedCases(DType::F32)) checkConv(k, true);
  checkConv({{1, 8, 4, 3}, {8, 16, 3, 3}, {.stride = {2, 2}, .padding = {1, 1}, .outputPadding = {1, 0}}, true,
             DType::F16},
            true);
  checkConv({{2, 8, 3, 3}, {8, 16, 2, 2}, {.stride = {1, 1}}, false, DType::BF16}, true);
}

// The same shapes in f16 and bf16: on a device with cooperative matrices
// they run on tensor cores (conv_gemm_coop.comp; bf16 where K runs over taps
// first, with 32 or 64 input channels per group), elsewhere on conv_gemm.comp.
TEST_F(ConvConformanceTest, Conv2dImplicitGemmHalfAndBfloat) {
  for (DType dtype : {DType::F16, DType::BF16}) {
    for (const auto& k : implicitGemmCases(dtype)) checkConv(k, false);
    for (const auto& k : implicitGemmTransposedCases(dtype)) checkConv(k, true);
  }
}

TEST_F(ConvConformanceTest, Conv2dKnownValuesAndAttrForms) {
  // One int applies to both dims; an unbatched [C, H, W] input.
  HostTensor x = makeTensor(DType::F32, {1, 3, 3}, {1, 2, 3, 4, 5, 6, 7, 8, 9});
  HostTensor w = makeTensor(DType::F32, {1, 1, 2, 2}, {1, 0, 0, -1});
  auto y = call("conv2d", {x, w}, {{"stride", int64_t(1)}, {"padding", int64_t(0)}});
  expectClose(y[0], makeTensor(DType::F32, {1, 2, 2}, {-4, -4, -4, -4}), "conv2d unbatched");
  // PyTorch: F.conv2d(x, w, padding=1, stride=2) -> [[-1, -3], [-7, -4]]
  y = call("conv2d", {x, w}, {{"padding", int64_t(1)}, {"stride", int64_t(2)}});
  expectClose(y[0], makeTensor(DType::F32, {1, 2, 2}, {-1, -3, -7, -4}), "conv2d padding=1 stride=2");
}

TEST_F(ConvConformanceTest, Conv1d) {
  struct Case {
    Shape x, w;
    int64_t stride, padding, dilation, groups;
    bool bias;
    DType dtype;
  };
  const Case cases[] = {
      {{2, 3, 17}, {5, 3, 3}, 1, 0, 1, 1, true, DType::F32},
      {{1, 4, 20}, {6, 2, 4}, 3, 2, 2, 2, false, DType::F32},
      {{3, 2, 9}, {2, 1, 5}, 2, 2, 1, 2, true, DType::F16},
      {{2, 9}, {3, 2, 2}, 1, 1, 1, 1, true, DType::BF16},  // unbatched [C, L]
      // implicit GEMM
      {{2, 8, 30}, {32, 4, 5}, 2, 2, 1, 2, true, DType::F32},
      {{3, 16, 21}, {40, 16, 3}, 1, 2, 3, 1, false, DType::F32},
      {{16, 12}, {17, 16, 1}, 1, 0, 1, 1, true, DType::F16},  // unbatched
  };
  for (const auto& k : cases) {
    bool batched = k.x.size() == 3;
    HostTensor x = randomTensor(k.dtype, k.x), w = randomTensor(k.dtype, k.w), b;
    std::vector<HostTensor> in = {x, w};
    if (k.bias) in.push_back(b = randomTensor(k.dtype, {k.w[0]}));
    auto got = call("conv1d", in,
                    {{"stride", Ints{k.stride}}, {"padding", Ints{k.padding}}, {"dilation", Ints{k.dilation}},
                     {"groups", k.groups}});
    // As conv2d over H = 1.
    HostTensor x4 = x, w4 = w;
    x4.shape = batched ? Shape{k.x[0], k.x[1], 1, k.x[2]} : Shape{1, k.x[0], 1, k.x[1]};
    w4.shape = {k.w[0], k.w[1], 1, k.w[2]};
    HostTensor want = convRef(x4, w4, k.bias ? &b : nullptr,
                              {.stride = {1, k.stride}, .padding = {0, k.padding}, .dilation = {1, k.dilation},
                               .groups = k.groups},
                              false, k.dtype);
    want.shape = batched ? Shape{want.shape[0], want.shape[1], want.shape[3]} : Shape{want.shape[1], want.shape[3]};
    ASSERT_EQ(got[0].shape, want.shape) << dimsName(k.x);
    expectClose(got[0], want, "conv1d x " + dimsName(k.x) + " w " + dimsName(k.w), double(k.w[1] * k.w[2] + 1));
  }
}

TEST_F(ConvConformanceTest, ConvTranspose2d) {
  using A = Conv2dArgs;
  const ConvCase cases[] = {
      {{2, 3, 4, 5}, {3, 5, 3, 3}, A{}, true},
      {{1, 4, 5, 4}, {4, 3, 3, 3}, A{.stride = {2, 2}, .padding = {1, 1}, .outputPadding = {1, 1}}, true},
      {{2, 2, 3, 3}, {2, 2, 4, 4}, A{.stride = {2, 2}, .padding = {1, 1}}, false},  // the usual 2x upsampler
      {{1, 6, 3, 4}, {6, 2, 3, 2}, A{.stride = {3, 2}, .padding = {0, 1}, .outputPadding = {2, 0}, .groups = 3},
       true},
      {{1, 2, 4, 3}, {2, 3, 2, 3}, A{.stride = {1, 2}, .dilation = {2, 2}, .outputPadding = {1, 1}}, true},
      {{1, 1, 1, 1}, {1, 1, 1, 1}, A{}, false},
  };
  for (const auto& k : cases) checkConv(k, true);
}

TEST_F(ConvConformanceTest, ConvTranspose1d) {
  struct Case {
    Shape x, w;
    int64_t stride, padding, outputPadding, groups, dilation;
    bool bias;
    DType dtype;
  };
  const Case cases[] = {
      {{2, 3, 7}, {3, 4, 3}, 2, 1, 1, 1, 1, true, DType::F32},
      {{1, 4, 5}, {4, 3, 2}, 3, 0, 2, 2, 2, false, DType::F32},
      {{6, 4}, {6, 1, 3}, 1, 1, 0, 3, 1, true, DType::BF16},  // unbatched [C, L]
      // implicit GEMM: one phase, then two
      {{2, 8, 9}, {8, 16, 3}, 1, 1, 0, 1, 1, true, DType::F32},
      {{1, 24, 7}, {24, 20, 4}, 2, 1, 1, 1, 2, false, DType::F32},
  };
  for (const auto& k : cases) {
    bool batched = k.x.size() == 3;
    HostTensor x = randomTensor(k.dtype, k.x), w = randomTensor(k.dtype, k.w), b;
    std::vector<HostTensor> in = {x, w};
    if (k.bias) in.push_back(b = randomTensor(k.dtype, {k.w[1] * k.groups}));
    auto got = call("conv_transpose1d", in,
                    {{"stride", Ints{k.stride}}, {"padding", Ints{k.padding}}, {"output_padding", Ints{k.outputPadding}},
                     {"groups", k.groups}, {"dilation", Ints{k.dilation}}});
    HostTensor x4 = x, w4 = w;
    x4.shape = batched ? Shape{k.x[0], k.x[1], 1, k.x[2]} : Shape{1, k.x[0], 1, k.x[1]};
    w4.shape = {k.w[0], k.w[1], 1, k.w[2]};
    HostTensor want = convRef(x4, w4, k.bias ? &b : nullptr,
                              {.stride = {1, k.stride}, .padding = {0, k.padding}, .dilation = {1, k.dilation},
                               .outputPadding = {0, k.outputPadding}, .groups = k.groups},
                              true, k.dtype);
    want.shape = batched ? Shape{want.shape[0], want.shape[1], want.shape[3]} : Shape{want.shape[1], want.shape[3]};
    ASSERT_EQ(got[0].shape, want.shape) << dimsName(k.x);
    expectClose(got[0], want, "conv_transpose1d x " + dimsName(k.x), double(k.x[batched ? 1 : 0] * k.w[2] + 1));
  }
}

TEST_F(ConvConformanceTest, ConvPastTheWorkgroupLimit) {
  // 4100 x 4100 outputs of one channel: 16.8M invocations, > 65535 groups of 256.
  HostTensor x = randomTensor(DType::F32, {1, 1, 4100, 4100});
  HostTensor w = makeTensor(DType::F32, {1, 1, 1, 1}, {0.5});
  auto y = call("conv2d", {x, w});
  HostTensor want = x;
  for (auto& v : want.values) v *= 0.5;
  expectClose(y[0], want, "conv2d 1x1 over 4100x4100");
}

// ---------------------------------------------------------------- pooling

struct PoolArgs {
  Ints kernel, stride, padding{0, 0}, dilation{1, 1};
  bool ceil = false, includePad = true;
  int64_t divisor = 0;
};

int64_t pooledSize(int64_t in, int64_t k, int64_t p, int64_t s, int64_t d, bool ceil) {
  double num = double(in + 2 * p - d * (k - 1) - 1) / double(s);
  int64_t out = int64_t(ceil ? std::ceil(num) : std::floor(num)) + 1;
  if (ceil && (out - 1) * s >= in + p) --out;  // the last window must start inside the input or left padding
  return out;
}

// max (avg = false) or avg pooling of [P..., H, W] in double.
HostTensor poolRef(const HostTensor& x, const PoolArgs& a, bool avg) {
  Ints stride = a.stride.empty() ? a.kernel : a.stride;
  const size_t r = x.shape.size();
  const int64_t h = x.shape[r - 2], w = x.shape[r - 1], planes = x.numel() / (h * w);
  const int64_t oh = pooledSize(h, a.kernel[0], a.padding[0], stride[0], a.dilation[0], a.ceil);
  const int64_t ow = pooledSize(w, a.kernel[1], a.padding[1], stride[1], a.dilation[1], a.ceil);
  Shape out = x.shape;
  out[r - 2] = oh, out[r - 1] = ow;
  std::vector<double> y;
  for (int64_t pl = 0; pl < planes; ++pl)
    for (int64_t i = 0; i < oh; ++i)
      for (int64_t j = 0; j < ow; ++j) {
        double best = -std::numeric_limits<double>::infinity(), sum = 0;
        int64_t inside = 0, padded = 0;
        for (int64_t u = 0; u < a.kernel[0]; ++u)
          for (int64_t v = 0; v < a.kernel[1]; ++v) {
            int64_t ih = i * stride[0] - a.padding[0] + u * a.dilation[0];
            int64_t iw = j * stride[1] - a.padding[1] + v * a.dilation[1];
            // avg's count_include_pad counts window positions inside the padded input
            if (ih < h + a.padding[0] && iw < w + a.padding[1]) ++padded;
            if (ih < 0 || ih >= h || iw < 0 || iw >= w) continue;
            double val = x.values[size_t((pl * h + ih) * w + iw)];
            best = std::isnan(best) ? best : (val > best || std::isnan(val)) ? val : best;
            sum += val;
            ++inside;
          }
        double div = a.divisor ? double(a.divisor) : a.includePad ? double(padded) : double(inside);
        y.push_back(avg ? (inside ? sum / div : 0.0) : best);
      }
  return makeTensor(x.dtype, out, y);
}

AttrList poolAttrs(const PoolArgs& a, bool avg) {
  AttrList attrs = {{"kernel_size", a.kernel}, {"stride", a.stride}, {"padding", a.padding}, {"ceil_mode", a.ceil}};
  if (avg) {
    attrs.push_back({"count_include_pad", a.includePad});
    if (a.divisor) attrs.push_back({"divisor_override", a.divisor});
  } else {
    attrs.push_back({"dilation", a.dilation});
  }
  return attrs;
}

struct PoolCase {
  Shape x;
  PoolArgs a;
  DType dtype = DType::F32;
};

TEST_F(ConvConformanceTest, MaxPool2d) {
  const PoolCase cases[] = {
      {{2, 3, 8, 8}, {.kernel = {2, 2}}},
      {{1, 2, 7, 9}, {.kernel = {3, 2}, .stride = {2, 3}, .padding = {1, 1}}},
      {{2, 2, 5, 5}, {.kernel = {2, 2}, .ceil = true}},                                       // ceil: 3x3
      {{1, 1, 6, 6}, {.kernel = {3, 3}, .stride = {2, 2}, .padding = {1, 1}, .ceil = true}},  // ceil: 4x4
      {{1, 3, 10, 9}, {.kernel = {3, 3}, .stride = {1, 2}, .padding = {1, 0}, .dilation = {2, 3}}},
      {{3, 6, 6}, {.kernel = {3, 3}, .stride = {3, 3}, .padding = {1, 1}}},  // unbatched
      {{1, 1, 1, 1}, {.kernel = {1, 1}}},
      {{0, 2, 4, 4}, {.kernel = {2, 2}}},
      {{2, 3, 9, 7}, {.kernel = {3, 3}, .stride = {2, 2}, .padding = {1, 1}, .ceil = true}, DType::F16},
      {{1, 2, 6, 6}, {.kernel = {2, 3}, .stride = {2, 2}}, DType::BF16},
  };
  for (const auto& k : cases) {
    HostTensor x = randomTensor(k.dtype, k.x);
    auto got = call("max_pool2d", {x}, poolAttrs(k.a, false));
    HostTensor want = poolRef(x, k.a, false);
    ASSERT_EQ(got[0].shape, want.shape) << dimsName(k.x);
    expectClose(got[0], want, "max_pool2d " + dimsName(k.x));
  }
  // ceil_mode output sizes PyTorch gives.
  EXPECT_EQ(call("max_pool2d", {randomTensor(DType::F32, {1, 1, 5, 5})}, {{"kernel_size", Ints{2}}, {"ceil_mode", true}})[0].shape,
            (Shape{1, 1, 3, 3}));
  EXPECT_EQ(call("max_pool2d", {randomTensor(DType::F32, {1, 1, 6, 6})},
                 {{"kernel_size", Ints{3}}, {"stride", Ints{2}}, {"padding", Ints{1}}, {"ceil_mode", true}})[0].shape,
            (Shape{1, 1, 4, 4}));
  // NaN propagates; padding never wins.
  const double nan = std::nan("");
  HostTensor x = makeTensor(DType::F32, {1, 1, 2, 2}, {-5, nan, -7, -8});
  auto y = call("max_pool2d", {x}, {{"kernel_size", Ints{2}}, {"stride", Ints{1}}, {"padding", Ints{1}}});
  expectClose(y[0], makeTensor(DType::F32, {1, 1, 3, 3}, {-5, nan, nan, -5, nan, nan, -7, -7, -8}), "max_pool2d nan");
}

TEST_F(ConvConformanceTest, AvgPool2d) {
  const PoolCase cases[] = {
      {{2, 3, 8, 8}, {.kernel = {2, 2}}},
      {{1, 2, 7, 9}, {.kernel = {3, 2}, .stride = {2, 3}, .padding = {1, 1}}},
      {{1, 2, 7, 9}, {.kernel = {3, 2}, .stride = {2, 3}, .padding = {1, 1}, .includePad = false}},
      {{2, 2, 5, 5}, {.kernel = {2, 2}, .ceil = true}},
      {{1, 1, 6, 7}, {.kernel = {3, 3}, .stride = {2, 2}, .padding = {1, 1}, .ceil = true}},
      {{1, 1, 6, 7}, {.kernel = {3, 3}, .stride = {2, 2}, .padding = {1, 1}, .ceil = true, .includePad = false}},
      {{1, 2, 5, 5}, {.kernel = {2, 2}, .stride = {2, 2}, .padding = {1, 1}, .divisor = 3}},
      {{3, 6, 6}, {.kernel = {3, 3}}},
      {{2, 3, 9, 7}, {.kernel = {3, 3}, .stride = {2, 2}, .padding = {1, 1}, .ceil = true}, DType::F16},
      {{1, 2, 6, 6}, {.kernel = {2, 3}, .stride = {2, 2}, .padding = {1, 1}}, DType::BF16},
  };
  for (const auto& k : cases) {
    HostTensor x = randomTensor(k.dtype, k.x);
    auto got = call("avg_pool2d", {x}, poolAttrs(k.a, true));
    HostTensor want = poolRef(x, k.a, true);
    ASSERT_EQ(got[0].shape, want.shape) << dimsName(k.x);
    expectClose(got[0], want, "avg_pool2d " + dimsName(k.x), double(k.a.kernel[0] * k.a.kernel[1]));
  }
  // PyTorch: F.avg_pool2d(arange(1..16).view(1,1,4,4), 3, 2, 1) -> [[14/9, 30/9], [57/9, 11]]
  // ... with count_include_pad=False -> [[3.5, 5.0], [9.5, 11.0]]
  std::vector<double> v;
  for (int i = 1; i <= 16; ++i) v.push_back(i);
  HostTensor x = makeTensor(DType::F32, {1, 1, 4, 4}, v);
  auto y = call("avg_pool2d", {x}, {{"kernel_size", Ints{3}}, {"stride", Ints{2}}, {"padding", Ints{1}}});
  expectClose(y[0], makeTensor(DType::F32, {1, 1, 2, 2}, {14.0 / 9, 30.0 / 9, 57.0 / 9, 11}), "avg_pool2d known");
  y = call("avg_pool2d", {x},
           {{"kernel_size", Ints{3}}, {"stride", Ints{2}}, {"padding", Ints{1}}, {"count_include_pad", false}});
  expectClose(y[0], makeTensor(DType::F32, {1, 1, 2, 2}, {3.5, 5.0, 9.5, 11.0}), "avg_pool2d known exclude pad");
  // ceil_mode adds a third window starting in the last row.
  EXPECT_EQ(call("avg_pool2d", {x},
                 {{"kernel_size", Ints{3}}, {"stride", Ints{2}}, {"padding", Ints{1}}, {"ceil_mode", true}})[0].shape,
            (Shape{1, 1, 3, 3}));
}

TEST_F(ConvConformanceTest, AdaptiveAvgPool2d) {
  struct Case {
    Shape x;
    Ints size;
    DType dtype = DType::F32;
  };
  const Case cases[] = {{{2, 3, 7, 9}, {3, 4}},
                        {{1, 2, 5, 5}, {5}},
                        {{1, 2, 4, 6}, {1}},
                        {{3, 5, 3}, {7, 2}},  // unbatched; more outputs than inputs along H
                        {{1, 1, 10, 10}, {3, 3}, DType::F16},
                        {{2, 2, 6, 5}, {4, 3}, DType::BF16},
                        {{0, 3, 4, 4}, {2, 2}}};
  for (const auto& k : cases) {
    HostTensor x = randomTensor(k.dtype, k.x);
    auto got = call("adaptive_avg_pool2d", {x}, {{"output_size", k.size}});
    const size_t r = k.x.size();
    const int64_t h = k.x[r - 2], w = k.x[r - 1], oh = k.size[0], ow = k.size.back();
    Shape out = k.x;
    out[r - 2] = oh, out[r - 1] = ow;
    std::vector<double> y;
    for (int64_t pl = 0; pl < x.numel() / (h * w); ++pl)
      for (int64_t i = 0; i < oh; ++i)
        for (int64_t j = 0; j < ow; ++j) {
          int64_t h0 = int64_t(std::floor(double(i * h) / oh)), h1 = int64_t(std::ceil(double((i + 1) * h) / oh));
          int64_t w0 = int64_t(std::floor(double(j * w) / ow)), w1 = int64_t(std::ceil(double((j + 1) * w) / ow));
          double s = 0;
          for (int64_t a = h0; a < h1; ++a)
            for (int64_t b = w0; b < w1; ++b) s += x.values[size_t((pl * h + a) * w + b)];
          y.push_back(s / double((h1 - h0) * (w1 - w0)));
        }
    HostTensor want = makeTensor(k.dtype, out, y);
    ASSERT_EQ(got[0].shape, want.shape) << dimsName(k.x);
    expectClose(got[0], want, "adaptive_avg_pool2d " + dimsName(k.x), 9);
  }
}

TEST_F(ConvConformanceTest, Pool1d) {
  // As the 2-D references over H = 1.
  struct Case {
    Shape x;
    PoolArgs a;  // 1-D values in the second slot
    DType dtype = DType::F32;
  };
  const Case cases[] = {
      {{2, 3, 11}, {.kernel = {1, 3}, .stride = {1, 2}, .padding = {0, 1}, .dilation = {1, 2}}},
      {{2, 3, 10}, {.kernel = {1, 3}, .stride = {1, 2}, .padding = {0, 1}, .ceil = true}},
      {{4, 9}, {.kernel = {1, 2}, .ceil = true, .includePad = false}, DType::F16},  // unbatched
      {{1, 2, 8}, {.kernel = {1, 4}, .stride = {1, 3}, .padding = {0, 2}, .includePad = false}, DType::BF16},
  };
  for (const auto& k : cases) {
    HostTensor x = randomTensor(k.dtype, k.x);
    HostTensor x4 = x;
    x4.shape.insert(x4.shape.end() - 1, 1);
    for (bool avg : {false, true}) {
      AttrList attrs = {{"kernel_size", Ints{k.a.kernel[1]}},
                        {"stride", k.a.stride.empty() ? Ints{} : Ints{k.a.stride[1]}},
                        {"padding", Ints{k.a.padding[1]}},
                        {"ceil_mode", k.a.ceil}};
      PoolArgs a = k.a;
      if (avg) {
        attrs.push_back({"count_include_pad", k.a.includePad});
        a.dilation = {1, 1};
      } else {
        attrs.push_back({"dilation", Ints{k.a.dilation[1]}});
      }
      std::string op = avg ? "avg_pool1d" : "max_pool1d";
      auto got = call(op, {x}, attrs);
      HostTensor want = poolRef(x4, a, avg);
      want.shape.erase(want.shape.end() - 2);
      ASSERT_EQ(got[0].shape, want.shape) << op << " " << dimsName(k.x);
      expectClose(got[0], want, op + " " + dimsName(k.x), double(k.a.kernel[1]));
    }
  }
  // adaptive_avg_pool1d: L = 7 to 3 windows [0, 3), [2, 5), [4, 7).
  HostTensor x = makeTensor(DType::F32, {1, 7}, {1, 2, 3, 4, 5, 6, 7});
  auto y = call("adaptive_avg_pool1d", {x}, {{"output_size", Ints{3}}});
  expectClose(y[0], makeTensor(DType::F32, {1, 3}, {2, 4, 6}), "adaptive_avg_pool1d known");
  HostTensor r = randomTensor(DType::F16, {2, 3, 5});
  y = call("adaptive_avg_pool1d", {r}, {{"output_size", Ints{8}}});
  std::vector<double> want;
  for (int64_t pl = 0; pl < 6; ++pl)
    for (int64_t i = 0; i < 8; ++i) {
      int64_t a = i * 5 / 8, b = ((i + 1) * 5 + 7) / 8;
      double s = 0;
      for (int64_t j = a; j < b; ++j) s += r.values[size_t(pl * 5 + j)];
      want.push_back(s / double(b - a));
    }
  expectClose(y[0], makeTensor(DType::F16, {2, 3, 8}, want), "adaptive_avg_pool1d f16", 2);
  const std::string e = errorOf("max_pool1d", {randomTensor(DType::F32, {1, 2, 5, 5})}, {{"kernel_size", Ints{2}}});
  EXPECT_NE(e.find("max_pool1d: input 'input' has shape [1, 2, 5, 5]; expected [N, C, L] or [C, L]"), std::string::npos) << e;
}

// ---------------------------------------------------------------- interpolate

struct InterpArgs {
  std::string mode = "nearest";
  Ints size;
  std::vector<double> scale;
  int alignCorners = -1;  // -1: not given
};

HostTensor interpolateRef(const HostTensor& x, const InterpArgs& a) {
  const int64_t n = x.shape[0], c = x.shape[1], h = x.shape[2], w = x.shape[3];
  int64_t oh, ow;
  std::vector<double> sc = a.scale;
  if (sc.size() == 1) sc.push_back(sc[0]);
  if (!a.size.empty()) {
    oh = a.size[0], ow = a.size.back();
  } else {
    oh = int64_t(std::floor(double(h) * sc[0])), ow = int64_t(std::floor(double(w) * sc[1]));
  }
  bool align = a.alignCorners == 1;
  // PyTorch computes scales and source coordinates in float.
  auto scale = [&](int64_t in, int64_t out, size_t d) -> float {
    if (a.mode == "bilinear" && align) return out > 1 ? float(in - 1) / float(out - 1) : 0.0f;
    return sc.empty() ? float(in) / float(out) : float(1.0 / sc[d]);
  };
  float fh = scale(h, oh, 0), fw = scale(w, ow, 1);
  auto nearest = [&](int64_t o, float s, int64_t in) {
    float src = (a.mode == "nearest-exact" ? float(o) + 0.5f : float(o)) * s;
    return std::min(int64_t(std::floor(src)), in - 1);
  };
  auto source = [&](int64_t o, float s) -> float {
    if (align) return float(o) * s;
    float src = (float(o) + 0.5f) * s - 0.5f;
    return src < 0 ? 0.0f : src;
  };
  std::vector<double> y;
  for (int64_t pl = 0; pl < n * c; ++pl) {
    auto X = [&](int64_t i, int64_t j) { return x.values[size_t((pl * h + i) * w + j)]; };
    for (int64_t i = 0; i < oh; ++i)
      for (int64_t j = 0; j < ow; ++j) {
        if (a.mode != "bilinear") {
          y.push_back(X(nearest(i, fh, h), nearest(j, fw, w)));
          continue;
        }
        float sh = source(i, fh), sw = source(j, fw);
        int64_t h0 = std::min(int64_t(std::floor(sh)), h - 1), w0 = std::min(int64_t(std::floor(sw)), w - 1);
        double lh = std::clamp(double(sh) - double(h0), 0.0, 1.0), lw = std::clamp(double(sw) - double(w0), 0.0, 1.0);
        int64_t h1 = h0 < h - 1 ? h0 + 1 : h0, w1 = w0 < w - 1 ? w0 + 1 : w0;
        y.push_back((1 - lh) * ((1 - lw) * X(h0, w0) + lw * X(h0, w1)) + lh * ((1 - lw) * X(h1, w0) + lw * X(h1, w1)));
      }
  }
  return makeTensor(x.dtype, {n, c, oh, ow}, y);
}

AttrList interpAttrs(const InterpArgs& a) {
  AttrList attrs = {{"mode", a.mode}};
  if (!a.size.empty()) attrs.push_back({"size", a.size});
  if (!a.scale.empty()) attrs.push_back({"scale_factor", a.scale});
  if (a.alignCorners >= 0) attrs.push_back({"align_corners", a.alignCorners == 1});
  return attrs;
}

TEST_F(ConvConformanceTest, Interpolate) {
  struct Case {
    Shape x;
    InterpArgs a;
    DType dtype = DType::F32;
  };
  const Case cases[] = {
      {{2, 3, 4, 5}, {.size = {8, 10}}},
      {{1, 2, 7, 5}, {.size = {3, 11}}},
      {{1, 2, 5, 6}, {.scale = {2.5, 0.5}}},
      {{1, 2, 5, 6}, {.mode = "nearest-exact", .size = {9, 4}}},
      {{2, 2, 4, 5}, {.mode = "bilinear", .size = {7, 9}}},
      {{2, 2, 4, 5}, {.mode = "bilinear", .size = {7, 9}, .alignCorners = 1}},
      {{1, 3, 6, 6}, {.mode = "bilinear", .size = {4, 3}, .alignCorners = 0}},  // downsampling
      {{1, 1, 5, 4}, {.mode = "bilinear", .scale = {1.5, 2}}},
      {{1, 1, 5, 4}, {.mode = "bilinear", .scale = {1.5, 2}, .alignCorners = 1}},
      {{1, 2, 1, 1}, {.mode = "bilinear", .size = {3, 1}, .alignCorners = 1}},  // size-1 input and output
      {{0, 2, 3, 3}, {.size = {6, 6}}},
      {{1, 2, 5, 7}, {.mode = "bilinear", .size = {8, 3}}, DType::F16},
      {{1, 2, 5, 7}, {.scale = {2}}, DType::BF16},
      {{1, 2, 5, 7}, {.mode = "bilinear", .size = {8, 3}, .alignCorners = 1}, DType::BF16},
  };
  for (const auto& k : cases) {
    HostTensor x = randomTensor(k.dtype, k.x);
    auto got = call("interpolate", {x}, interpAttrs(k.a));
    HostTensor want = interpolateRef(x, k.a);
    ASSERT_EQ(got[0].shape, want.shape) << dimsName(k.x) << " " << k.a.mode;
    expectClose(got[0], want, "interpolate " + k.a.mode + " " + dimsName(k.x), 4);
  }
  // PyTorch: F.interpolate([[1, 2], [3, 4]], size=4, mode='bilinear'), and size (1, 4) with align_corners=True.
  HostTensor x = makeTensor(DType::F32, {1, 1, 2, 2}, {1, 2, 3, 4});
  auto y = call("interpolate", {x}, {{"size", Ints{4}}, {"mode", std::string("bilinear")}});
  expectClose(y[0],
              makeTensor(DType::F32, {1, 1, 4, 4},
                         {1, 1.25, 1.75, 2, 1.5, 1.75, 2.25, 2.5, 2.5, 2.75, 3.25, 3.5, 3, 3.25, 3.75, 4}),
              "bilinear known");
  y = call("interpolate", {x}, {{"size", Ints{1, 4}}, {"mode", std::string("bilinear")}, {"align_corners", true}});
  expectClose(y[0], makeTensor(DType::F32, {1, 1, 1, 4}, {1, 4.0 / 3, 5.0 / 3, 2}), "bilinear align_corners known");
}

TEST_F(ConvConformanceTest, InterpolatePastTheWorkgroupLimit) {
  HostTensor x = randomTensor(DType::F32, {1, 1, 41, 41});
  InterpArgs a{.size = {4100, 4100}};
  auto got = call("interpolate", {x}, interpAttrs(a));
  expectClose(got[0], interpolateRef(x, a), "interpolate nearest to 4100x4100");
}

// ---------------------------------------------------------------- errors

TEST_F(ConvConformanceTest, Errors) {
  auto t = [](Shape s) { return randomTensor(DType::F32, s); };
  auto expectError = [](const std::string& got, std::initializer_list<const char*> parts) {
    for (const char* p : parts) EXPECT_NE(got.find(p), std::string::npos) << "message: " << got << "\nmissing: " << p;
  };
  expectError(errorOf("conv2d", {t({1, 3, 5, 5}), t({4, 2, 3, 3})}), {"conv2d", "'weight'", "dim 1 to be 3", "got 2"});
  expectError(errorOf("conv2d", {t({1, 4, 5, 5}), t({4, 2, 3, 3})}, {{"groups", int64_t(3)}}),
              {"conv2d", "'groups' is 3", "divisor", "4"});
  expectError(errorOf("conv2d", {t({1, 4, 5, 5}), t({3, 2, 3, 3})}, {{"groups", int64_t(2)}}),
              {"conv2d", "'groups' is 2", "out_channels 3"});
  expectError(errorOf("conv2d", {t({1, 3, 2, 2}), t({4, 3, 5, 5})}, {{"padding", Ints{1}}}),
              {"conv2d", "padded input is 4x4", "dilated kernel is 5x5"});
  expectError(errorOf("conv2d", {t({1, 3, 5, 5}), t({4, 3, 3, 3}), t({3})}), {"conv2d", "'bias'", "[3]", "expected [4]"});
  expectError(errorOf("conv2d", {t({3, 5}), t({4, 3, 3, 3})}), {"conv2d", "'input'", "rank 3 or 4", "got rank 2"});
  expectError(errorOf("conv2d", {t({1, 3, 5, 5}), t({4, 3, 3, 3})}, {{"stride", Ints{0}}}),
              {"conv2d", "'stride'", "in [1, 2147483647]"});
  expectError(errorOf("conv2d", {t({1, 3, 5, 5}), t({4, 3, 3, 3})}, {{"padding", Ints{1, 1, 1}}}),
              {"conv2d", "'padding'", "1 or 2 ints"});
  expectError(errorOf("conv1d", {t({1, 3, 2}), t({4, 3, 5})}), {"conv1d", "padded input is 2", "dilated kernel is 5"});
  expectError(errorOf("conv_transpose2d", {t({1, 3, 5, 5}), t({4, 2, 3, 3})}),
              {"conv_transpose2d", "'weight'", "dim 0 to be 3"});
  expectError(errorOf("conv_transpose2d", {t({1, 4, 5, 5}), t({4, 2, 3, 3})},
                      {{"stride", Ints{2}}, {"output_padding", Ints{2}}}),
              {"conv_transpose2d", "'output_padding'", "smaller than the stride"});
  expectError(errorOf("conv_transpose2d", {t({1, 4, 1, 1}), t({4, 2, 1, 1})}, {{"padding", Ints{1}}}),
              {"conv_transpose2d", "output size would be", ">= 1"});
  expectError(errorOf("conv2d", {t({1, 3, 5, 5}), randomTensor(DType::F16, {4, 3, 3, 3})}), {"conv2d", "'weight'", "f16"});
  expectError(errorOf("max_pool2d", {t({1, 1, 2, 2})}, {{"kernel_size", Ints{3}}}),
              {"max_pool2d", "output size would be", ">= 1"});
  expectError(errorOf("max_pool2d", {t({1, 1, 4, 4})}, {{"kernel_size", Ints{2}}, {"padding", Ints{2}}}),
              {"max_pool2d", "'padding'", "half the kernel size"});
  expectError(errorOf("max_pool2d", {t({1, 1, 4, 4})}), {"max_pool2d", "kernel_size"});
  expectError(errorOf("avg_pool2d", {t({1, 1, 4, 4})}, {{"kernel_size", Ints{2}}, {"divisor_override", int64_t(0)}}),
              {"avg_pool2d", "'divisor_override' is 0"});
  expectError(errorOf("adaptive_avg_pool2d", {t({1, 1, 4, 4})}, {{"output_size", Ints{0}}}),
              {"adaptive_avg_pool2d", "'output_size'", "in [1, 2147483647]"});
  expectError(errorOf("adaptive_avg_pool2d", {t({1, 1, 0, 4})}, {{"output_size", Ints{2}}}),
              {"adaptive_avg_pool2d", "non-zero spatial"});
  expectError(errorOf("interpolate", {t({1, 1, 4, 4})}, {{"size", Ints{2}}, {"scale_factor", 2.0}}),
              {"interpolate", "both 'size' and 'scale_factor'"});
  expectError(errorOf("interpolate", {t({1, 1, 4, 4})}), {"interpolate", "neither"});
  expectError(errorOf("interpolate", {t({1, 1, 4, 4})}, {{"size", Ints{2}}, {"align_corners", true}}),
              {"interpolate", "'align_corners'", "'bilinear'"});
  expectError(errorOf("interpolate", {t({1, 1, 4, 4})}, {{"size", Ints{2}}, {"mode", std::string("bicubic")}}),
              {"interpolate", "'mode' is 'bicubic'"});
  expectError(errorOf("interpolate", {t({1, 1, 4, 4})}, {{"scale_factor", 0.1}}),
              {"interpolate", "output size would be 0x0"});
  expectError(errorOf("interpolate", {t({4, 4})}, {{"size", Ints{2}}}), {"interpolate", "rank 4", "got rank 2"});
}

}  // namespace
}  // namespace tensord::compute::testing
