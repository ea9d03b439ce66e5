// Convolution, pooling and resampling: conv1d, conv2d, conv_transpose1d,
// conv_transpose2d, max_pool1d/2d, avg_pool1d/2d, adaptive_avg_pool1d/2d,
// interpolate. PyTorch's torch.nn.functional names, attributes and
// semantics; the kernels are in template_conv.cpp. Float dtypes only,
// computed (and accumulated) in f32.

#include "compute/op_families.h"
#include "compute/template_conv.h"

namespace tensord::compute {
namespace {

AttrSpec ints(std::string name, std::vector<int64_t> value, std::string doc) {
  return {std::move(name), AttrType::kInts, std::move(value), std::move(doc)};
}

OpSpec nnOp(std::string name, std::vector<InputSpec> inputs, std::vector<AttrSpec> attrs,
            std::shared_ptr<const KernelTemplate> kernel, std::string doc) {
  return singleOutputOp("nn", std::move(name), std::move(inputs), std::move(attrs), kFloatDTypes, std::move(kernel),
                        std::move(doc));
}

}  // namespace

void addConvOps(std::vector<OpSpec>& ops) {
  const std::vector<InputSpec> convInputs = {{"input"}, {"weight"}, {"bias", InputRole::kData, true}};

  ops.push_back(nnOp(
      "conv2d", convInputs,
      {ints("stride", {1, 1}, "step of the kernel over (H, W); one int applies to both"),
       ints("padding", {0, 0}, "zeros added on both sides of (H, W); one int applies to both"),
       ints("dilation", {1, 1}, "spacing of the kernel taps over (H, W); one int applies to both"),
       {"groups", AttrType::kInt, int64_t(1), "blocked connections: input and output channels split into this many groups"}},
      conv(2, false),
      "2-D convolution (cross-correlation) of input [N, C, H, W] (or unbatched [C, H, W]) with weight "
      "[O, C/groups, kH, kW], plus bias [O] when given. Differs from PyTorch: padding takes ints only (no 'same' / "
      "'valid' strings), padding_mode is zeros."));

  ops.push_back(nnOp(
      "conv1d", convInputs,
      {ints("stride", {1}, "step of the kernel over L"), ints("padding", {0}, "zeros added on both sides of L"),
       ints("dilation", {1}, "spacing of the kernel taps"),
       {"groups", AttrType::kInt, int64_t(1), "blocked connections: input and output channels split into this many groups"}},
      conv(1, false),
      "1-D convolution (cross-correlation) of input [N, C, L] (or unbatched [C, L]) with weight [O, C/groups, k], "
      "plus bias [O] when given. Differs from PyTorch: padding takes ints only (no 'same' / 'valid' strings)."));

  ops.push_back(nnOp(
      "conv_transpose2d", convInputs,
      {ints("stride", {1, 1}, "step over (H, W) of the transposed convolution; one int applies to both"),
       ints("padding", {0, 0}, "dilation * (k - 1) - padding zeros are added on both sides of the input"),
       ints("output_padding", {0, 0}, "extra size added to one side of the output; smaller than stride or dilation"),
       {"groups", AttrType::kInt, int64_t(1), "blocked connections: input and output channels split into this many groups"},
       ints("dilation", {1, 1}, "spacing of the kernel taps over (H, W)")},
      conv(2, true),
      "2-D transposed convolution (the gradient of conv2d with respect to its input) of input [N, C, H, W] (or "
      "[C, H, W]) with weight [C, O/groups, kH, kW], plus bias [O] when given. Output size per dim: "
      "(in - 1) * stride - 2 * padding + dilation * (k - 1) + output_padding + 1. Computed as a gather: every "
      "output element sums its own contributions."));

  ops.push_back(nnOp(
      "conv_transpose1d", convInputs,
      {ints("stride", {1}, "step over L of the transposed convolution"),
       ints("padding", {0}, "dilation * (k - 1) - padding zeros are added on both sides of the input"),
       ints("output_padding", {0}, "extra size added to one side of the output; smaller than stride or dilation"),
       {"groups", AttrType::kInt, int64_t(1), "blocked connections: input and output channels split into this many groups"},
       ints("dilation", {1}, "spacing of the kernel taps")},
      conv(1, true),
      "1-D transposed convolution of input [N, C, L] (or [C, L]) with weight [C, O/groups, k], plus bias [O] when "
      "given. Output length: (L - 1) * stride - 2 * padding + dilation * (k - 1) + output_padding + 1."));

  ops.push_back(nnOp(
      "max_pool1d", {{"input"}},
      {{"kernel_size", AttrType::kInts, std::nullopt, "window size over L"},
       ints("stride", {}, "window step; [] (the default) means kernel_size"),
       ints("padding", {0}, "implicit -inf added on both sides; at most half the kernel size"),
       ints("dilation", {1}, "spacing of the window taps"),
       {"ceil_mode", AttrType::kBool, false, "round the output size up rather than down"}},
      pool(PoolKind::kMax, 1),
      "Max over sliding windows of input [N, C, L] (or [C, L]); NaN propagates. Differs from PyTorch: "
      "return_indices is not supported (only the values are returned)."));

  ops.push_back(nnOp(
      "avg_pool1d", {{"input"}},
      {{"kernel_size", AttrType::kInts, std::nullopt, "window size over L"},
       ints("stride", {}, "window step; [] (the default) means kernel_size"),
       ints("padding", {0}, "implicit zeros added on both sides; at most half the kernel size"),
       {"ceil_mode", AttrType::kBool, false, "round the output size up rather than down"},
       {"count_include_pad", AttrType::kBool, true, "count the padding zeros in the divisor"}},
      pool(PoolKind::kAvg, 1),
      "Mean over sliding windows of input [N, C, L] (or [C, L]), with PyTorch's divisor rules (windows clipped to "
      "the padded input; count_include_pad)."));

  ops.push_back(nnOp(
      "adaptive_avg_pool1d", {{"input"}},
      {{"output_size", AttrType::kInts, std::nullopt, "output length"}},
      pool(PoolKind::kAdaptiveAvg, 1),
      "Mean over the windows [floor(i * L / OL), ceil((i + 1) * L / OL)) of input [N, C, L] (or [C, L])."));

  ops.push_back(nnOp(
      "max_pool2d", {{"input"}},
      {{"kernel_size", AttrType::kInts, std::nullopt, "window size over (H, W); one int applies to both"},
       ints("stride", {}, "window step; [] (the default) means kernel_size"),
       ints("padding", {0, 0}, "implicit -inf added on both sides; at most half the kernel size"),
       ints("dilation", {1, 1}, "spacing of the window taps"),
       {"ceil_mode", AttrType::kBool, false, "round the output size up rather than down"}},
      pool(PoolKind::kMax, 2),
      "Max over sliding windows of input [N, C, H, W] (or [C, H, W]); NaN propagates. Differs from PyTorch: "
      "return_indices is not supported (only the values are returned)."));

  ops.push_back(nnOp(
      "avg_pool2d", {{"input"}},
      {{"kernel_size", AttrType::kInts, std::nullopt, "window size over (H, W); one int applies to both"},
       ints("stride", {}, "window step; [] (the default) means kernel_size"),
       ints("padding", {0, 0}, "implicit zeros added on both sides; at most half the kernel size"),
       {"ceil_mode", AttrType::kBool, false, "round the output size up rather than down"},
       {"count_include_pad", AttrType::kBool, true, "count the padding zeros in the divisor"},
       {"divisor_override", AttrType::kInt, std::nullopt, "when given, the divisor of every window's sum", true}},
      pool(PoolKind::kAvg, 2),
      "Mean over sliding windows of input [N, C, H, W] (or [C, H, W]), with PyTorch's divisor rules (windows "
      "clipped to the padded input; count_include_pad; divisor_override)."));

  ops.push_back(nnOp(
      "adaptive_avg_pool2d", {{"input"}},
      {{"output_size", AttrType::kInts, std::nullopt, "output (H, W); one int applies to both"}},
      pool(PoolKind::kAdaptiveAvg, 2),
      "Mean over the windows [floor(i * H / OH), ceil((i + 1) * H / OH)) (same for W) of input [N, C, H, W] (or "
      "[C, H, W]). Differs from PyTorch: output_size takes ints only (no None entries)."));

  ops.push_back(nnOp(
      "interpolate", {{"input"}},
      {{"size", AttrType::kInts, std::nullopt, "output (H, W); one int applies to both; give size or scale_factor",
        true},
       {"scale_factor", AttrType::kFloats, std::nullopt,
        "multiplier for (H, W): output = floor(in * scale_factor), and the index mapping uses 1 / scale_factor", true},
       {"mode", AttrType::kText, std::string("nearest"), "'nearest', 'nearest-exact' or 'bilinear'"},
       {"align_corners", AttrType::kBool, std::nullopt,
        "bilinear only: map the corner pixels' centers onto each other (default false)", true}},
      interpolate(),
      "Resizes input [N, C, H, W] with PyTorch's index mapping. Differs from PyTorch: 4-D input and modes "
      "nearest, nearest-exact and bilinear only; recompute_scale_factor and antialias are not supported (behaves "
      "as recompute_scale_factor=None, antialias=False)."));
}

}  // namespace tensord::compute
