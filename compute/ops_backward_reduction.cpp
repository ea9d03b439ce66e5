// Backward ops of the reduction family (see backwardOp in op_families.h for the
// calling convention). All are graph programs: the gradient of a reduction is
// its grad spread back over the reduced dims (kept as size 1, so the steps
// broadcast it), times a factor that one elementwise expression computes;
// max-like reductions route it by indices (scatter) or split it among ties;
// scans run the scan backwards (flip, scan, flip).

#include <algorithm>
#include <cmath>

#include "compute/error.h"
#include "compute/op_families.h"
#include "compute/template_elementwise.h"
#include "compute/template_graph.h"
#include "compute/template_util.h"

namespace tensord::compute {
namespace {

using Ints = std::vector<int64_t>;

// A step no op of the table does: one elementwise expression over `operands`
// (a, b, c, d in order, all of the backward's float dtype) and the float
// attributes `params` (s0, s1, ...). Listed with graphTemplate's steps so the
// build compiles it.
std::shared_ptr<const OpSpec> expression(const std::string& name, std::vector<std::string> operands,
                                         std::vector<std::string> params, std::string expr) {
  std::vector<InputSpec> inputs;
  for (auto& o : operands) inputs.push_back({std::move(o)});
  std::vector<AttrSpec> attrs;
  for (const auto& p : params) attrs.push_back({p, AttrType::kFloat, 1.0, p});
  const int arity = int(inputs.size());
  return std::make_shared<OpSpec>(
      OpSpec{.name = name,
             .category = "reduction",
             .inputs = std::move(inputs),
             .outputs = {"out"},
             .attrs = std::move(attrs),
             .dtypes = kFloatDTypes,
             .kernel = elementwise(arity, std::move(expr), ElementwiseSpec::Result::kSame, std::move(params))});
}

// How a forward reduction call reduced its input, worked out from the
// input's shape and the attributes as the forward op does.
struct Reduced {
  Ints dims;          // the reduced dims, normalized
  Shape kept;         // the output's shape with reduced dims kept as 1 (broadcasts against the input)
  Shape out;          // the forward output's shape
  int64_t count = 1;  // elements reduced into each output
};

Reduced reduced(const Graph& g, const Shape& in, const Attrs& attrs) {
  const std::string& name = g.op().name;
  std::vector<bool> mask;
  bool keepdim = attrs.getBool("keepdim");
  if (g.op().findAttr("dim")->type == AttrType::kInts) {
    mask = dimMask(name, attrs.getInts("dim"), in.size());
  } else if (attrs.has("dim")) {  // max, min: one optional dim
    mask = dimMask(name, {attrs.getInt("dim")}, in.size(), false);
  } else {  // max, min without dim: everything, to a 0-d value
    mask.assign(in.size(), true);
    keepdim = false;
  }
  Reduced r;
  for (size_t d = 0; d < in.size(); ++d) {
    if (mask[d]) {
      r.dims.push_back(int64_t(d));
      r.count *= in[d];
      r.kept.push_back(1);
      if (keepdim) r.out.push_back(1);
    } else {
      r.kept.push_back(in[d]);
      r.out.push_back(in[d]);
    }
  }
  return r;
}

// `v`, a forward output (or its grad, named `what`), checked against the
// output's shape and viewed with the reduced dims kept.
Value kept(Graph& g, Value v, const Reduced& r, std::string_view what) {
  g.expectShape(v, r.out, what);
  return g.shape(v) == r.kept ? v : g.reshape(v, r.kept);
}

// For backward ops of scans: a 0-d input is scanned as [1].
Value atLeast1d(Graph& g, Value v) { return g.shape(v).empty() ? g.reshape(v, {1}) : v; }

Value flip(Graph& g, Value v, int64_t dim) { return g.call("flip", {v}, {{"dims", Ints{dim}}}); }

// sum_{k >= i} v_k along dim.
Value reverseCumsum(Graph& g, Value v, int64_t dim) {
  return flip(g, g.call("cumsum", {flip(g, v, dim)}, {{"dim", dim}}), dim);
}

// Along dim, v shifted one place towards higher indices with 1 coming in:
// the exclusive product when v is an inclusive one.
Value shiftInOne(Graph& g, Value v) {
  return g.call("pad", {v}, {{"pad", Ints{1, -1}}, {"value", 1.0}});  // last dim only
}

// How many elements of each reduced slice `hit` (a 0/1 expression over
// input and out) marks, kept: the ties that share a max's gradient.
Value ties(Graph& g, const OpSpec& hit, Value x, Value out, const Reduced& r) {
  return g.sum(g.call(hit, {x, out}), r.dims, true);
}

struct Builder {
  std::vector<OpSpec>& ops;
  const OpTable& table;
  std::vector<OpSpec> out;

  const OpSpec& fwd(const char* name) const { return findOp(ops, name); }

  void add(const char* name, std::vector<InputSpec> inputs, GraphProgram program, std::string doc,
           std::vector<std::shared_ptr<const OpSpec>> steps = {}) {
    OpSpec op = backwardOp(fwd(name), std::move(inputs), {"input"},
                           graphTemplate(table, std::move(program), std::move(steps)), std::move(doc));
    op.dtypes = kFloatDTypes;  // gradients exist for float inputs only
    out.push_back(std::move(op));
  }
};

}  // namespace

void addReductionBackwardOps(std::vector<OpSpec>& ops, const OpTable& table) {
  Builder b{ops, table, {}};
  using One = std::vector<Value>;

  b.add(
      "sum", {{"grad"}, {"input"}},
      [](Graph& g, const Attrs& attrs) {
        Value x = g.in("input");
        const Shape in = g.shape(x);
        Reduced r = reduced(g, in, attrs);
        return One{g.expand(kept(g, g.in("grad"), r, "grad"), in)};
      },
      "grad broadcast over the reduced dims.");

  b.add(
      "mean", {{"grad"}, {"input"}},
      [](Graph& g, const Attrs& attrs) {
        Value x = g.in("input");
        const Shape in = g.shape(x);
        Reduced r = reduced(g, in, attrs);
        Value scaled = g.mul(kept(g, g.in("grad"), r, "grad"), 1.0 / double(r.count));
        return One{g.expand(scaled, in)};
      },
      "grad / N broadcast over the reduced dims.");

  // prod: the product of the other elements of each slice, as the product of
  // exclusive scans from both ends, so that zeros in the input are exact
  // (PyTorch's answer for any number of zeros) and nothing is divided.
  auto prodTimesGrad = expression("prod_backward:times", {"grad", "left", "right"}, {}, "a * b * c");
  b.add("prod", {{"grad"}, {"input"}},
        [prodTimesGrad](Graph& g, const Attrs& attrs) {
          Value x = g.in("input");
          const Shape in = g.shape(x);
          Reduced r = reduced(g, in, attrs);
          Value gk = kept(g, g.in("grad"), r, "grad");
          // Kept dims first, reduced dims last, flattened: [kept..., D].
          Ints perm;
          Shape flat, permuted;
          for (size_t d = 0; d < in.size(); ++d) {
            if (std::find(r.dims.begin(), r.dims.end(), int64_t(d)) != r.dims.end()) continue;
            perm.push_back(int64_t(d));
            flat.push_back(in[d]);
          }
          Shape gFlat = flat;
          flat.push_back(r.count);
          gFlat.push_back(1);
          perm.insert(perm.end(), r.dims.begin(), r.dims.end());
          for (int64_t d : perm) permuted.push_back(in[size_t(d)]);
          bool identity = true;
          for (size_t k = 0; k < perm.size(); ++k) identity = identity && perm[k] == int64_t(k);
          Value xf = g.reshape(identity ? x : g.call("permute", {x}, {{"dims", perm}}), flat);
          Value left = shiftInOne(g, g.call("cumprod", {xf}, {{"dim", int64_t(-1)}}));
          Value right = flip(g, shiftInOne(g, g.call("cumprod", {flip(g, xf, -1)}, {{"dim", int64_t(-1)}})), -1);
          Value grad = g.reshape(g.call(*prodTimesGrad, {g.reshape(gk, gFlat), left, right}), permuted);
          if (identity) return One{grad};
          Ints inverse(perm.size());
          for (size_t k = 0; k < perm.size(); ++k) inverse[size_t(perm[k])] = int64_t(k);
          return One{g.call("permute", {grad}, {{"dims", inverse}})};
        },
        "grad times the product of the other elements (exact with zeros in the input).", {prodTimesGrad});

  // amax, amin (and max, min without dim): split evenly among the ties.
  // A NaN result goes to the NaNs, as in PyTorch.
  auto extremes =
      expression("amax_backward:hit", {"input", "out"}, {}, "(a == b || (isnan(a) && isnan(b))) ? 1.0 : 0.0");
  auto shareAmongTies = expression("amax_backward:share", {"grad", "input", "out", "ties"}, {},
                                   "(b == c || (isnan(b) && isnan(c))) ? a / d : 0.0");
  auto evenly = [extremes, shareAmongTies](Graph& g, const Reduced& r, std::string_view outName) {
    Value x = g.in("input");
    Value ok = kept(g, g.in(outName), r, outName);
    Value gk = kept(g, g.in("grad"), r, "grad");
    return g.call(*shareAmongTies, {gk, x, ok, ties(g, *extremes, x, ok, r)});
  };
  for (const char* name : {"amax", "amin"}) {
    b.add(name, {{"grad"}, {"input"}, {"out"}},
          [evenly](Graph& g, const Attrs& attrs) {
            Reduced r = reduced(g, Shape(g.shape(g.in("input"))), attrs);
            return One{evenly(g, r, "out")};
          },
          "grad split evenly among the elements equal to the result, like PyTorch.", {extremes, shareAmongTies});
  }
  // max, min: with dim the gradient goes to the returned index; without,
  // to the ties evenly (both as PyTorch).
  for (const char* name : {"max", "min"}) {
    b.add(
        name, {{"grad"}, {"input"}, {"values"}, {"indices", InputRole::kIndex, true}},
        [evenly](Graph& g, const Attrs& attrs) {
          Value x = g.in("input");
          const Shape in = g.shape(x);
          Reduced r = reduced(g, in, attrs);
          if (!attrs.has("dim")) return One{evenly(g, r, "values")};
          if (!g.has("indices")) {
            throwInvalid(g.op().name + ": input 'indices' (the forward's second output) is needed when 'dim' is given");
          }
          Value idx = kept(g, g.in("indices"), r, "indices");
          Value gk = kept(g, g.in("grad"), r, "grad");
          const int64_t dim = r.dims.empty() ? 0 : r.dims[0];  // a 0-d input reduces its only "dim" 0
          if (in.empty()) return One{gk};
          return One{g.call("scatter", {g.zerosLike(x), idx, gk}, {{"dim", dim}})};
        },
        "with dim: grad at the returned indices; without: grad split evenly among the ties, like PyTorch.",
        {extremes, shareAmongTies});
  }

  auto lse = expression("logsumexp_backward:softmax", {"grad", "input", "out"}, {},
                        "(isinf(c) && c < 0.0) ? 0.0 : a * exp(b - c)");
  b.add("logsumexp", {{"grad"}, {"input"}, {"out"}},
        [lse](Graph& g, const Attrs& attrs) {
          Value x = g.in("input");
          Reduced r = reduced(g, Shape(g.shape(x)), attrs);
          return One{g.call(*lse, {kept(g, g.in("grad"), r, "grad"), x, kept(g, g.in("out"), r, "out")})};
        },
        "grad * exp(input - out) (softmax); 0 where every element is -inf.", {lse});

  // norm: d|x|_p / dx = sign(x) (|x| / |x|_p)^(p - 1); inf norms split among
  // the ties of max (min) |x|; 0 at a zero norm and, for p < 1, at x = 0.
  auto pnorm =
      expression("norm_backward:p", {"grad", "input", "out"}, {"p"},
                 "(b == 0.0 || c == 0.0) ? 0.0 : (s0 == 2.0 ? a * b / c : a * sign(b) * pow(abs(b) / c, s0 - 1.0))");
  auto infHit = expression("norm_backward:hit", {"input", "out"}, {}, "abs(a) == b ? 1.0 : 0.0");
  auto infNorm =
      expression("norm_backward:inf", {"grad", "input", "out", "ties"}, {}, "abs(b) == c ? a * sign(b) / d : 0.0");
  b.add("norm", {{"grad"}, {"input"}, {"out"}},
        [pnorm, infHit, infNorm](Graph& g, const Attrs& attrs) {
          Value x = g.in("input");
          Reduced r = reduced(g, Shape(g.shape(x)), attrs);
          Value gk = kept(g, g.in("grad"), r, "grad");
          Value ok = kept(g, g.in("out"), r, "out");
          const double p = attrs.getFloat("p");
          if (p == 0) return One{g.zerosLike(x)};  // a count of non-zeros: piecewise constant
          if (std::isinf(p)) {
            return One{g.call(*infNorm, {gk, x, ok, ties(g, *infHit, x, ok, r)})};
          }
          return One{g.call(*pnorm, {gk, x, ok}, {{"p", p}})};
        },
        "sign(x) (|x| / norm)^(p - 1) times grad; inf norms split it among the ties; 0 where the norm is 0 "
        "(and at x = 0 for p < 1), like PyTorch.",
        {pnorm, infHit, infNorm});

  // var, std, var_mean: d var / dx = 2 (x - mean) / (N - correction).
  auto divisor = [](const Attrs& attrs, const Reduced& r) {
    return std::max(double(r.count) - attrs.getFloat("correction"), 0.0);
  };
  auto meanOf = [](Graph& g, Value x, const Reduced& r) {
    return g.call("mean", {x}, {{"dim", r.dims}, {"keepdim", true}});
  };
  auto var = expression("var_backward:centered", {"grad", "input", "mean"}, {"scale"}, "a * s0 * (b - c)");
  b.add("var", {{"grad"}, {"input"}},
        [var, divisor, meanOf](Graph& g, const Attrs& attrs) {
          Value x = g.in("input");
          Reduced r = reduced(g, Shape(g.shape(x)), attrs);
          Value gk = kept(g, g.in("grad"), r, "grad");
          return One{g.call(*var, {gk, x, meanOf(g, x, r)}, {{"scale", 2.0 / divisor(attrs, r)}})};
        },
        "2 grad (x - mean) / (N - correction).", {var});
  auto stdev = expression("std_backward:centered", {"grad", "input", "mean", "out"}, {"scale"},
                          "d == 0.0 ? 0.0 : a * s0 * (b - c) / d");
  b.add("std", {{"grad"}, {"input"}, {"out"}},
        [stdev, divisor, meanOf](Graph& g, const Attrs& attrs) {
          Value x = g.in("input");
          Reduced r = reduced(g, Shape(g.shape(x)), attrs);
          Value gk = kept(g, g.in("grad"), r, "grad");
          Value ok = kept(g, g.in("out"), r, "out");
          return One{g.call(*stdev, {gk, x, meanOf(g, x, r), ok}, {{"scale", 1.0 / divisor(attrs, r)}})};
        },
        "grad (x - mean) / ((N - correction) std); 0 where std is 0, like PyTorch.", {stdev});
  auto varMean = expression("var_mean_backward:both", {"grad", "input", "mean", "grad_mean"}, {"scale", "inv_n"},
                            "a * s0 * (b - c) + d * s1");
  b.add("var_mean", {{"grad"}, {"input"}, {"mean"}, {"grad_mean", InputRole::kData, true}},
        [var, varMean, divisor](Graph& g, const Attrs& attrs) {
          Value x = g.in("input");
          Reduced r = reduced(g, Shape(g.shape(x)), attrs);
          Value gk = kept(g, g.in("grad"), r, "grad");
          Value mk = kept(g, g.in("mean"), r, "mean");
          const double scale = 2.0 / divisor(attrs, r);
          if (!g.has("grad_mean")) return One{g.call(*var, {gk, x, mk}, {{"scale", scale}})};
          Value gm = kept(g, g.in("grad_mean"), r, "grad_mean");
          return One{g.call(*varMean, {gk, x, mk, gm}, {{"scale", scale}, {"inv_n", 1.0 / double(r.count)}})};
        },
        "var's gradient (grad) plus mean's (grad_mean / N); grad_mean may be left off (zero).", {var, varMean});

  b.add(
      "cumsum", {{"grad"}},
      [](Graph& g, const Attrs& attrs) {
        Value grad = g.in("grad");
        const Shape in = g.shape(grad);
        const int64_t dim = normalizeDim(g.op().name, attrs.getInt("dim"), in.size());
        Value r = reverseCumsum(g, atLeast1d(g, grad), dim);
        return One{g.shape(r) == in ? r : g.reshape(r, in)};
      },
      "The reverse cumulative sum of grad along dim.");

  // cumprod: with z the first zero of a line (n if none), d out_k / d x_i =
  // out_k / x_i for i < z; at z, out_{z-1} times the product of x_(z+1..k);
  // after z, 0 (every product has the zero in it). `c` counts the zeros
  // up to each position, so c == 0 before z and (c == 1 && x == 0) at z.
  auto firstZeroToOne = expression("cumprod_backward:skip", {"input", "zeros"}, {}, "(b == 1.0 && a == 0.0) ? 1.0 : a");
  auto cumprodGrad = expression("cumprod_backward:select", {"before", "input", "zeros", "at"}, {},
                                "c == 0.0 ? a / b : ((c == 1.0 && b == 0.0) ? d : 0.0)");
  b.add("cumprod", {{"grad"}, {"input"}, {"out"}},
        [firstZeroToOne, cumprodGrad](Graph& g, const Attrs& attrs) {
          Value x0 = g.in("input");
          const Shape in = g.shape(x0);
          const DType dtype = g.desc(x0).dtype;
          const int64_t dim = normalizeDim(g.op().name, attrs.getInt("dim"), in.size());
          g.expectShape(g.in("grad"), in, "grad");
          g.expectShape(g.in("out"), in, "out");
          Value x = atLeast1d(g, x0), grad = atLeast1d(g, g.in("grad")), out = atLeast1d(g, g.in("out"));
          Value zeros = g.call("cumsum", {g.to(g.call("eq", {x}, {{"other", 0.0}}), dtype)}, {{"dim", dim}});
          Value skipped = g.call("cumprod", {g.call(*firstZeroToOne, {x, zeros})}, {{"dim", dim}});
          Value before = reverseCumsum(g, g.mul(grad, out), dim);
          Value at = reverseCumsum(g, g.mul(grad, skipped), dim);
          Value r = g.call(*cumprodGrad, {before, x, zeros, at});
          return One{g.shape(r) == in ? r : g.reshape(r, in)};
        },
        "The reverse cumulative sum of grad * out, over input; exact at the first zero of a line and 0 after it, "
        "like PyTorch.",
        {firstZeroToOne, cumprodGrad});

  // sort, topk: grad scattered back to where each value came from.
  b.add(
      "sort", {{"grad"}, {"indices", InputRole::kIndex}},
      [](Graph& g, const Attrs& attrs) {
        Value grad = g.in("grad"), idx = g.in("indices");
        g.expectShape(grad, Shape(g.shape(idx)), "grad");
        if (g.shape(grad).empty()) return One{grad};
        return One{g.call("scatter", {g.zerosLike(grad), idx, grad}, {{"dim", attrs.getInt("dim")}})};
      },
      "grad scattered to the indices the values came from.");
  b.add(
      "topk", {{"grad"}, {"input"}, {"indices", InputRole::kIndex}},
      [](Graph& g, const Attrs& attrs) {
        Value x = g.in("input"), grad = g.in("grad"), idx = g.in("indices");
        Shape out = g.shape(x);
        if (out.empty()) {
          g.expectShape(grad, out, "grad");
          return One{grad};
        }
        const int64_t dim = normalizeDim(g.op().name, attrs.getInt("dim"), out.size());
        out[size_t(dim)] = attrs.getInt("k");
        g.expectShape(grad, out, "grad");
        g.expectShape(idx, out, "indices");
        return One{g.call("scatter", {g.zerosLike(x), idx, grad}, {{"dim", dim}})};
      },
      "grad scattered to the indices the values came from (0 elsewhere).");

  for (auto& op : b.out) ops.push_back(std::move(op));
}

}  // namespace tensord::compute
