// Backward ops of the conv family (see backwardOp in op_families.h for the
// calling convention). A conv's input gradient is the opposite conv of grad
// with the same weight (conv <-> conv_transpose; at stride 1 a conv with the
// taps reversed), its weight gradient a correlation of input and grad (a
// kernel of its own, template_conv_backward.h) and its bias gradient a sum;
// pooling and interpolate backwards are kernels that gather, for each input
// element, the outputs that read it.

#include "compute/op_families.h"
#include "compute/template_conv_backward.h"
#include "compute/template_graph.h"

namespace tensord::compute {
namespace {

StepAttrs given(const Attrs& attrs) {
  StepAttrs out;
  for (const auto& [k, v] : attrs.values()) out.emplace_back(k, v);
  return out;
}

// (h, w) of a 2-D op, (w) of a 1-D one.
std::vector<int64_t> perDim(int spatial, int64_t h, int64_t w) {
  return spatial == 2 ? std::vector<int64_t>{h, w} : std::vector<int64_t>{w};
}

// NAME_backward(grad, input, weight, bias?) of conv1d/conv2d and
// conv_transpose1d/conv_transpose2d.
OpSpec convBackward(const OpTable& table, const OpSpec& fwd, int spatial, bool transposed) {
  auto weightStep = std::make_shared<const OpSpec>(OpSpec{.name = fwd.name + "_backward:weight",
                                                          .category = fwd.category,
                                                          .inputs = {{"grad"}, {"input"}, {"weight"}},
                                                          .outputs = {"out"},
                                                          .attrs = fwd.attrs,
                                                          .dtypes = fwd.dtypes,
                                                          .kernel = convWeightGrad(spatial, transposed)});
  const std::string suffix = spatial == 2 ? "2d" : "1d";
  const std::string conv = "conv" + suffix, convTransposed = "conv_transpose" + suffix;
  auto program = [spatial, transposed, weightStep, conv, convTransposed](Graph& g, const Attrs& attrs) {
    const Value grad = g.in("grad"), x = g.in("input"), w = g.in("weight");
    std::vector<TensorDesc> fwdInputs = {g.desc(x), g.desc(w)};
    if (g.has("bias")) fwdInputs.push_back(g.desc(g.in("bias")));
    const ConvGeometry geo = convGeometry(g.op(), spatial, transposed, fwdInputs, attrs);
    g.expectShape(grad, geo.out, "grad");
    const Shape xShape = g.shape(x), wShape = g.shape(w);
    const DType dtype = g.desc(w).dtype;

    StepAttrs opposite = {{"stride", perDim(spatial, geo.sh, geo.sw)},
                          {"padding", perDim(spatial, geo.ph, geo.pw)},
                          {"dilation", perDim(spatial, geo.dh, geo.dw)},
                          {"groups", geo.groups}};
    Value gx;
    const bool unitStride = geo.sh == 1 && geo.sw == 1;
    if (!transposed && unitStride && geo.ph <= geo.dh * (geo.kh - 1) && geo.pw <= geo.dw * (geo.kw - 1)) {
      // At stride 1 the input gradient is a conv of grad too: with the taps
      // reversed, in and out channels swapped within each group and padding
      // d * (k - 1) - p. The conv kernel runs it faster than the transposed
      // one, which tests every tap against the stride.
      const int64_t o = wShape[0], groups = geo.groups;
      Shape grouped = {groups, o / groups};
      grouped.insert(grouped.end(), wShape.begin() + 1, wShape.end());  // [G, O/G, C/G, k...]
      Value swapped = g.transpose(g.reshape(w, grouped), 1, 2);         // [G, C/G, O/G, k...]
      Shape convWeight = {geo.in.c, o / groups};
      convWeight.insert(convWeight.end(), wShape.begin() + 2, wShape.end());
      Value reversed = g.call("flip", {g.reshape(swapped, convWeight)},
                              {{"dims", spatial == 2 ? std::vector<int64_t>{2, 3} : std::vector<int64_t>{2}}});
      gx = g.call(conv, {grad, reversed},
                  {{"padding", perDim(spatial, geo.dh * (geo.kh - 1) - geo.ph, geo.dw * (geo.kw - 1) - geo.pw)},
                   {"dilation", perDim(spatial, geo.dh, geo.dw)},
                   {"groups", groups}});
    } else if (!transposed) {
      // output_padding gives back the last rows the forward's stride skipped.
      auto lost = [](int64_t in, int64_t out, int64_t k, int64_t s, int64_t p, int64_t d) {
        return in - ((out - 1) * s - 2 * p + d * (k - 1) + 1);
      };
      opposite.emplace_back("output_padding", perDim(spatial, lost(geo.in.h, geo.oh, geo.kh, geo.sh, geo.ph, geo.dh),
                                                     lost(geo.in.w, geo.ow, geo.kw, geo.sw, geo.pw, geo.dw)));
      gx = g.call(convTransposed, {grad, w}, opposite);
    } else {
      gx = g.call(conv, {grad, w}, opposite);
      // An output_padding of a stride or more (allowed below the dilation)
      // has the conv see rows past the input's end: drop them.
      for (size_t d = xShape.size() - size_t(spatial); d < xShape.size(); ++d) {
        if (g.dim(gx, int64_t(d)) != xShape[d]) {
          gx = g.call("narrow", {gx}, {{"dim", int64_t(d)}, {"start", int64_t(0)}, {"length", xShape[d]}});
        }
      }
    }

    const Value parts = g.call(*weightStep, {grad, x, w}, given(attrs));
    const Value gw = g.dim(parts, -1) == 1 ? g.reshape(parts, wShape) : g.sum(parts, {-1}, false);
    std::vector<Value> out = {gx, g.to(gw, dtype)};
    if (g.has("bias")) {
      std::vector<int64_t> dims;  // every dim but the channels
      const int64_t channels = geo.in.batched ? 1 : 0;
      for (int64_t d = 0; d < int64_t(xShape.size()); ++d) {
        if (d != channels) dims.push_back(d);
      }
      out.push_back(g.sum(grad, dims, false));
    }
    return out;
  };
  const std::string doc =
      transposed ? "grad_input is " + conv +
                       " of grad with weight; grad_weight a correlation of input and grad; "
                       "grad_bias grad summed over all dims but the channels."
                 : "grad_input is " + convTransposed + " of grad with weight (at stride 1, " + conv +
                       " with the taps reversed); grad_weight a correlation of grad and input; grad_bias grad "
                       "summed over all dims but the channels.";
  return backwardOp(fwd, {{"grad"}, {"input"}, {"weight"}, {"bias", InputRole::kData, true}},
                    {"input", "weight", "bias"}, graphTemplate(table, program, {weightStep}), doc);
}

}  // namespace

void addConvBackwardOps(std::vector<OpSpec>& ops, const OpTable& table) {
  std::vector<OpSpec> out;
  auto fwd = [&](const char* name) -> const OpSpec& { return findOp(ops, name); };
  out.push_back(convBackward(table, fwd("conv1d"), 1, false));
  out.push_back(convBackward(table, fwd("conv2d"), 2, false));
  out.push_back(convBackward(table, fwd("conv_transpose1d"), 1, true));
  out.push_back(convBackward(table, fwd("conv_transpose2d"), 2, true));

  const std::vector<InputSpec> gradInput = {{"grad"}, {"input"}};
  for (int s : {1, 2}) {
    const std::string d = std::to_string(s) + "d";
    out.push_back(backwardOp(fwd(("max_pool" + d).c_str()), gradInput, {"input"}, poolBackward(PoolKind::kMax, s),
                             "Each window's grad goes to its maximum: the first in window order, the last NaN if "
                             "there is one (PyTorch's choice); overlapping windows add up."));
    out.push_back(backwardOp(fwd(("avg_pool" + d).c_str()), gradInput, {"input"}, poolBackward(PoolKind::kAvg, s),
                             "Each input element gets grad / divisor of every window holding it."));
    out.push_back(backwardOp(fwd(("adaptive_avg_pool" + d).c_str()), gradInput, {"input"},
                             poolBackward(PoolKind::kAdaptiveAvg, s),
                             "Each input element gets grad / window size of every window holding it."));
  }
  out.push_back(backwardOp(fwd("interpolate"), gradInput, {"input"}, interpolateBackward(),
                           "Each input element gets the grads of the outputs that read it, times the weight they "
                           "read it with."));
  for (auto& op : out) ops.push_back(std::move(op));
}

}  // namespace tensord::compute
