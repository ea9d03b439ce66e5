// Backward ops of the shape family (see backwardOp in op_families.h for the
// calling convention). Every shape op moves elements without changing them,
// so each gradient is the grad moved back: views reshape it, permutations
// permute it back, copies of a part (narrow, slice, split) pad it with zeros,
// and ops that use an element several times (expand, repeat, reflect and
// replicate padding) sum its copies. All are graph programs over the table's
// ops; none needs a kernel of its own.

#include <algorithm>
#include <functional>

#include "compute/error.h"
#include "compute/op_families.h"
#include "compute/op_table.h"
#include "compute/template_graph.h"
#include "compute/template_util.h"

namespace tensord::compute {
namespace {

// The shapes of forward op `fwd`'s outputs for the forward inputs `names` as
// this backward call has them. The forward call passed the same checks; a
// backward called with inputs no forward call could have had fails here,
// under the backward op's name.
std::vector<Shape> forwardShapes(const OpTable& table, const std::string& fwd, const Graph& g,
                                 const std::vector<std::string>& names, const Attrs& attrs) {
  std::vector<TensorDesc> in;
  for (const auto& name : names) {
    for (Value v : g.ins(name)) in.push_back(g.desc(v));
  }
  std::vector<Shape> shapes;
  try {
    for (auto& d : inferOutputs(*table.find(fwd), in, attrs)) shapes.push_back(std::move(d.shape));
  } catch (const ComputeError& e) {
    throw ComputeError(e.kind(), g.op().name + ": the forward inputs do not fit (" + e.what() + ")");
  }
  return shapes;
}

// `v` padded with zeros along `dim`: lo before, hi after (negative: cropped).
Value padDim(Graph& g, Value v, int64_t dim, int64_t lo, int64_t hi) {
  const int64_t rank = int64_t(g.shape(v).size());
  std::vector<int64_t> pad(size_t(2 * (rank - dim)), 0);  // F.pad order: last dim first
  pad[size_t(2 * (rank - 1 - dim))] = lo;
  pad[size_t(2 * (rank - 1 - dim) + 1)] = hi;
  return g.call("pad", {v}, {{"pad", pad}});
}

Value narrow(Graph& g, Value v, int64_t dim, int64_t start, int64_t length) {
  return g.call("narrow", {v}, {{"dim", dim}, {"start", start}, {"length", length}});
}

int64_t product(const Shape& s, size_t begin, size_t end) {
  int64_t n = 1;
  for (size_t d = begin; d < end; ++d) n *= s[d];
  return n;
}

// The backward of a one-input shape op: `grad` (checked against the forward
// output's shape) and the input's shape in, the input's gradient out.
using ShapeGrad = std::function<Value(Graph& g, Value grad, const Shape& in, const Attrs& attrs)>;

OpSpec oneInput(const OpTable& table, const OpSpec& fwd, ShapeGrad f, std::string doc) {
  auto program = [&table, name = fwd.name, f](Graph& g, const Attrs& attrs) {
    const Value input = g.in("input"), grad = g.in("grad");
    g.expectShape(grad, forwardShapes(table, name, g, {"input"}, attrs).at(0), "grad");
    const Shape in = g.shape(input);
    const DType dtype = g.desc(input).dtype;
    return std::vector<Value>{g.to(f(g, grad, in, attrs), dtype)};
  };
  return backwardOp(fwd, {{"grad"}, fwd.inputs.at(0)}, {"input"}, graphTemplate(table, program), std::move(doc));
}

// slice: the grad's rows go back to start, start + step, ...; the rest is 0.
Value sliceGrad(Graph& g, Value grad, const Shape& in, const Attrs& attrs) {
  const int64_t dim = normalizeDim(g.op().name, attrs.getInt("dim"), in.size());
  const int64_t size = in[size_t(dim)], step = attrs.getInt("step");
  auto norm = [&](int64_t v) { return std::clamp<int64_t>(v < 0 ? v + size : v, 0, size); };
  const int64_t start = norm(attrs.getInt("start"));
  const int64_t length = g.shape(grad)[size_t(dim)];
  if (length == 0) return g.zerosLike(g.in("input"));
  if (step == 1 || length == 1) return padDim(g, grad, dim, start, size - start - length);
  // As [A, length, 1, B]: each row gets step - 1 zero rows after it, then the
  // whole is shifted to start and cropped (or padded) to size. Here
  // length * step < 2 * size: no overflow, and the rank stays 4.
  const int64_t a = product(in, 0, size_t(dim)), b = product(in, size_t(dim) + 1, in.size());
  Value v = g.reshape(grad, {a, length, 1, b});
  v = padDim(g, v, 2, 0, step - 1);
  v = g.reshape(v, {a, length * step, b});
  v = padDim(g, v, 1, start, size - start - length * step);
  return g.reshape(v, in);
}

// repeat: out dim d is repeats[d] tiles of the (padded) input dim, so as
// [repeats[d], size[d]] the tiles are summed.
Value repeatGrad(Graph& g, Value grad, const Shape& in, const Attrs& attrs) {
  const auto& reps = attrs.getInts("repeats");
  Shape padded(reps.size() - in.size(), 1);
  padded.insert(padded.end(), in.begin(), in.end());
  Shape split;
  std::vector<int64_t> tiles;  // dims of `split` to sum
  for (size_t d = 0; d < reps.size(); ++d) {
    if (reps[d] != 1) {
      tiles.push_back(int64_t(split.size()));
      split.push_back(reps[d]);
    }
    if (padded[d] != 1 || reps[d] == 1) split.push_back(padded[d]);
  }
  if (tiles.empty()) return g.reshape(grad, in);
  if (split.size() <= kMaxRank) return g.reshape(g.sum(g.reshape(grad, split), tiles, false), in);
  // Too many dims to split at once: one dim at a time, as [A, repeats, size, B].
  Shape cur = g.shape(grad);
  Value v = grad;
  for (size_t d = 0; d < reps.size(); ++d) {
    if (reps[d] == 1) continue;
    const int64_t a = product(cur, 0, d), b = product(cur, d + 1, cur.size());
    v = g.sum(g.reshape(v, {a, reps[d], padded[d], b}), {1}, false);
    cur[d] = padded[d];
  }
  return g.reshape(v, in);
}

// pad: constant padding is undone by the opposite padding (which crops);
// reflect and replicate send each border element's gradient back to the
// element it copied, one padded dim at a time.
Value padGrad(Graph& g, Value grad, const Shape& in, const Attrs& attrs) {
  const auto& pad = attrs.getInts("pad");
  const std::string& mode = attrs.getText("mode");
  if (mode == "constant") {
    std::vector<int64_t> crop;
    for (int64_t p : pad) crop.push_back(-p);
    return g.call("pad", {grad}, {{"pad", crop}});
  }
  Value v = grad;
  for (size_t k = 0; k < pad.size() / 2; ++k) {
    const int64_t d = int64_t(in.size() - 1 - k), lo = pad[2 * k], hi = pad[2 * k + 1], n = in[size_t(d)];
    if (lo == 0 && hi == 0) continue;
    Value cur = v;
    v = narrow(g, cur, d, lo, n);
    if (mode == "replicate") {
      // Every left pad copies element 0, every right pad element n - 1.
      if (lo > 0) v = g.add(v, padDim(g, g.sum(narrow(g, cur, d, 0, lo), {d}, true), d, 0, n - 1));
      if (hi > 0) v = g.add(v, padDim(g, g.sum(narrow(g, cur, d, lo + n, hi), {d}, true), d, n - 1, 0));
    } else {
      // Left pads copy elements lo .. 1 in that order; right pads n-2 .. n-1-hi.
      auto flip = [&](Value x) { return g.call("flip", {x}, {{"dims", std::vector<int64_t>{d}}}); };
      if (lo > 0) v = g.add(v, padDim(g, flip(narrow(g, cur, d, 0, lo)), d, 1, n - 1 - lo));
      if (hi > 0) v = g.add(v, padDim(g, flip(narrow(g, cur, d, lo + n, hi)), d, n - 1 - hi, 1));
    }
  }
  return v;
}

// roll by the opposite shifts (taken modulo the size, so no shift overflows).
Value rollGrad(Graph& g, Value grad, const Shape& in, const Attrs& attrs) {
  const auto& shifts = attrs.getInts("shifts");
  const auto& dims = attrs.getInts("dims");
  std::vector<int64_t> back;
  for (size_t k = 0; k < shifts.size(); ++k) {
    const int64_t n = dims.empty() ? product(in, 0, in.size()) : in[size_t(normalizeDim(g.op().name, dims[k], in.size(), "dims"))];
    back.push_back(n ? (n - shifts[k] % n) % n : 0);
  }
  return g.call("roll", {grad}, {{"shifts", back}, {"dims", dims}});
}

Value permuteGrad(Graph& g, Value grad, const Shape& in, const Attrs& attrs) {
  const auto& dims = attrs.getInts("dims");
  std::vector<int64_t> inverse(dims.size());
  for (size_t i = 0; i < dims.size(); ++i) inverse[size_t(normalizeDim(g.op().name, dims[i], in.size(), "dims"))] = int64_t(i);
  return g.call("permute", {grad}, {{"dims", inverse}});
}

// cat: each tensor's part of the grad (1-D empty tensors, skipped by cat, get empty gradients).
OpSpec catBackward(const OpTable& table, const OpSpec& fwd) {
  auto program = [&table](Graph& g, const Attrs& attrs) {
    const Value grad = g.in("grad");
    const std::vector<Value> tensors = g.ins("tensors");
    g.expectShape(grad, forwardShapes(table, "cat", g, {"tensors"}, attrs).at(0), "grad");
    const int64_t dim = normalizeDim(g.op().name, attrs.getInt("dim"), g.shape(grad).size());
    std::vector<Value> out;
    int64_t at = 0;
    for (Value t : tensors) {
      const Shape s = g.shape(t);
      if (s.size() == 1 && s[0] == 0) {
        out.push_back(g.zerosLike(t));
        continue;
      }
      out.push_back(tensors.size() == 1 ? grad : narrow(g, grad, dim, at, s[size_t(dim)]));
      at += s[size_t(dim)];
    }
    return out;
  };
  return backwardOp(fwd, {{"grad"}, fwd.inputs.at(0)}, {"tensors"}, graphTemplate(table, program),
                    "The grad cut back into the tensors' parts along dim.");
}

// stack: tensor k's gradient is index k of the new dim.
OpSpec stackBackward(const OpTable& table, const OpSpec& fwd) {
  auto program = [&table](Graph& g, const Attrs& attrs) {
    const Value grad = g.in("grad");
    const std::vector<Value> tensors = g.ins("tensors");
    g.expectShape(grad, forwardShapes(table, "stack", g, {"tensors"}, attrs).at(0), "grad");
    const Shape s = g.shape(tensors.at(0));
    const int64_t dim = normalizeDim(g.op().name, attrs.getInt("dim"), s.size() + 1);
    std::vector<Value> out;
    for (size_t k = 0; k < tensors.size(); ++k) out.push_back(g.reshape(narrow(g, grad, dim, int64_t(k), 1), s));
    return out;
  };
  return backwardOp(fwd, {{"grad"}, fwd.inputs.at(0)}, {"tensors"}, graphTemplate(table, program),
                    "Each tensor's slice of the grad along the new dim.");
}

// split, chunk: the pieces' grads (one per output, variadic) joined along dim.
OpSpec piecesBackward(const OpTable& table, const OpSpec& fwd) {
  auto program = [&table, name = fwd.name](Graph& g, const Attrs& attrs) {
    const std::vector<Value> grads = g.ins("grad");
    const std::vector<Shape> pieces = forwardShapes(table, name, g, {"input"}, attrs);
    if (grads.size() != pieces.size()) {
      throwInvalid(g.op().name + ": input 'grad' has " + std::to_string(grads.size()) + " tensors; expected " +
                   std::to_string(pieces.size()) + " (one per output of " + name + ")");
    }
    for (size_t k = 0; k < grads.size(); ++k) g.expectShape(grads[k], pieces[k], "grad " + std::to_string(k));
    return std::vector<Value>{g.call("cat", grads, {{"dim", attrs.getInt("dim")}})};
  };
  return backwardOp(fwd, {fwd.inputs.at(0), {"grad", InputRole::kData, false, true}}, {"input"},
                    graphTemplate(table, program), "The pieces' grads (one per output, in order) joined along dim.");
}

}  // namespace

void addShapeBackwardOps(std::vector<OpSpec>& ops, const OpTable& table) {
  std::vector<OpSpec> out;
  auto fwd = [&](const char* name) -> const OpSpec& { return findOp(ops, name); };
  auto reshapeBack = [](Graph& g, Value grad, const Shape& in, const Attrs&) { return g.reshape(grad, in); };
  for (const char* name : {"reshape", "flatten", "squeeze", "unsqueeze"}) {
    out.push_back(oneInput(table, fwd(name), reshapeBack, "The grad reshaped to the input's shape (a view)."));
  }
  out.push_back(oneInput(
      table, fwd("contiguous"), [](Graph&, Value grad, const Shape&, const Attrs&) { return grad; }, "The grad."));
  out.push_back(oneInput(
      table, fwd("expand"), [](Graph& g, Value grad, const Shape& in, const Attrs&) { return g.sumTo(grad, in); },
      "The grad summed over the expanded dims."));
  out.push_back(oneInput(table, fwd("permute"), permuteGrad, "The grad permuted by the inverse permutation."));
  out.push_back(oneInput(
      table, fwd("transpose"),
      [](Graph& g, Value grad, const Shape&, const Attrs& a) {
        return g.transpose(grad, a.getInt("dim0"), a.getInt("dim1"));
      },
      "The grad transposed back."));
  out.push_back(oneInput(
      table, fwd("flip"),
      [](Graph& g, Value grad, const Shape&, const Attrs& a) {
        return g.call("flip", {grad}, {{"dims", a.getInts("dims")}});
      },
      "The grad flipped back."));
  out.push_back(oneInput(table, fwd("roll"), rollGrad, "The grad rolled back."));
  out.push_back(oneInput(
      table, fwd("narrow"),
      [](Graph& g, Value grad, const Shape& in, const Attrs& a) {
        const int64_t dim = normalizeDim(g.op().name, a.getInt("dim"), in.size());
        const int64_t size = in[size_t(dim)], start = a.getInt("start") < 0 ? a.getInt("start") + size : a.getInt("start");
        return padDim(g, grad, dim, start, size - start - a.getInt("length"));
      },
      "The grad in place, zeros around it."));
  out.push_back(oneInput(table, fwd("slice"), sliceGrad, "The grad at the sliced positions, zeros elsewhere."));
  out.push_back(oneInput(table, fwd("pad"), padGrad,
                         "constant: the grad cropped; reflect, replicate: border grads added to the elements they "
                         "copied (a few passes over the grad per padded dim)."));
  out.push_back(oneInput(table, fwd("repeat"), repeatGrad, "The grad's tiles summed."));
  for (const char* name : {"triu", "tril"}) {
    out.push_back(oneInput(
        table, fwd(name),
        [name = std::string(name)](Graph& g, Value grad, const Shape&, const Attrs& a) {
          return g.call(name, {grad}, {{"diagonal", a.getInt("diagonal")}});
        },
        std::string("The grad's ") + (name == std::string("triu") ? "upper" : "lower") + " triangle."));
  }
  out.push_back(catBackward(table, fwd("cat")));
  out.push_back(stackBackward(table, fwd("stack")));
  out.push_back(piecesBackward(table, fwd("split")));
  out.push_back(piecesBackward(table, fwd("chunk")));
  for (auto& op : out) ops.push_back(std::move(op));
}

}  // namespace tensord::compute
