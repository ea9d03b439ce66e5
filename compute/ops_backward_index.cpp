// Backward ops of the index family (see backwardOp in op_families.h for the
// calling convention). A gather's gradient is a scatter-add of the grad and
// a scatter's is a gather, so these are graph programs over the family's own
// kernels. scatter_add (and index_put with accumulate, which it mirrors)
// loop, per output element, over the index positions that may address it:
// deterministic and atomic-free, duplicates summing in order, at a cost of
// numel(input) * index.size(dim) index reads, fine for the index sizes of
// embedding-like uses and small gathers, quadratic for a gather along a long
// dim with a long index.

#include "compute/error.h"
#include "compute/op_families.h"
#include "compute/template_graph.h"
#include "compute/template_util.h"

namespace tensord::compute {
namespace {

StepAttrs dimAttr(int64_t dim) { return {{"dim", dim}}; }

Value zerosOf(Graph& g, const Shape& shape, DType dtype) {
  return g.call("zeros", {}, {{"size", shape}, {"dtype", std::string(dtypeName(dtype))}});
}

// 0 .. n-1 (i64), as a tensor of `shape` counting along `dim` (a size-n dim).
Value countAlong(Graph& g, const Shape& shape, int64_t dim, int64_t n) {
  Shape one(shape.size(), 1);
  if (!shape.empty()) one[size_t(dim)] = n;
  Value ids = g.reshape(g.call("arange", {}, {{"end", n}}), one);
  return one == shape ? ids : g.expand(ids, shape);
}

// `v` padded with zeros at the end of each dim up to `shape` (a src larger
// than its index gets no gradient where the index does not reach).
Value padTo(Graph& g, Value v, const Shape& shape) {
  const Shape s = g.shape(v);
  if (s == shape) return v;
  std::vector<int64_t> pad;
  for (size_t k = 0; k < s.size(); ++k) pad.insert(pad.end(), {0, shape[s.size() - 1 - k] - s[s.size() - 1 - k]});
  return g.call("pad", {v}, {{"pad", pad}});
}

Value whereElseZero(Graph& g, Value mask, Value v) { return g.call("where", {mask, v}, {{"other", 0.0}}); }

// gather: the grad scatter-added back to the places it was read from.
OpSpec gatherBackward(const OpTable& table, const OpSpec& fwd) {
  auto program = [](Graph& g, const Attrs& attrs) {
    const Value grad = g.in("grad"), input = g.in("input"), index = g.in("index");
    g.expectShape(grad, Shape(g.shape(index)), "grad");
    return std::vector<Value>{g.call("scatter_add", {g.zerosLike(input), index, grad}, dimAttr(attrs.getInt("dim")))};
  };
  return backwardOp(fwd, {{"grad"}, fwd.inputs[0], fwd.inputs[1]}, {"input"}, graphTemplate(table, program),
                    "scatter_add of the grad into zeros; duplicate indices sum.");
}

// index_select: each selected row's grad added back to the row, through
// scatter_add with the index broadcast over the grad.
OpSpec indexSelectBackward(const OpTable& table, const OpSpec& fwd) {
  auto program = [](Graph& g, const Attrs& attrs) {
    const Value grad = g.in("grad"), input = g.in("input"), index = g.in("index");
    const Shape in = g.shape(input);
    const int64_t k = g.desc(index).numel();
    if (in.empty()) {  // a 0-d input: every index names its one element
      g.expectShape(grad, g.shape(index).empty() ? Shape{} : Shape{k}, "grad");
      return std::vector<Value>{g.reshape(g.sum(grad, {}, false), {})};
    }
    const int64_t dim = normalizeDim(g.op().name, attrs.getInt("dim"), in.size());
    Shape out = in;
    out[size_t(dim)] = k;
    g.expectShape(grad, out, "grad");
    Shape along(in.size(), 1);
    along[size_t(dim)] = k;
    Value idx = g.expand(g.reshape(index, along), out);
    return std::vector<Value>{g.call("scatter_add", {g.zerosLike(input), idx, grad}, dimAttr(dim))};
  };
  return backwardOp(fwd, {{"grad"}, fwd.inputs[0], fwd.inputs[1]}, {"input"}, graphTemplate(table, program),
                    "Rows of the grad added back to the rows they came from; duplicate indices sum.");
}

// take: a scatter-add over the flattened input.
OpSpec takeBackward(const OpTable& table, const OpSpec& fwd) {
  auto program = [](Graph& g, const Attrs&) {
    const Value grad = g.in("grad"), input = g.in("input"), index = g.in("index");
    g.expectShape(grad, Shape(g.shape(index)), "grad");
    const Shape in = g.shape(input);
    const int64_t n = g.desc(input).numel(), k = g.desc(index).numel();
    Value flat = g.zerosLike(g.reshape(input, {n}));
    Value sum = g.call("scatter_add", {flat, g.reshape(index, {k}), g.reshape(grad, {k})}, dimAttr(0));
    return std::vector<Value>{g.reshape(sum, in)};
  };
  return backwardOp(fwd, {{"grad"}, fwd.inputs[0], fwd.inputs[1]}, {"input"}, graphTemplate(table, program),
                    "The grad scatter-added into the flattened input; duplicate indices sum.");
}

// scatter: the input's gradient is the grad where nothing was scattered. Of
// several writes to one place the last along dim wins, so only its src
// element gets the grad there (PyTorch gives it to every duplicate). The
// winners are found by scattering each position's number along dim and
// reading it back.
OpSpec scatterBackward(const OpTable& table, const OpSpec& fwd) {
  auto program = [](Graph& g, const Attrs& attrs) {
    const Value grad = g.in("grad"), input = g.in("input"), index = g.in("index");
    g.expectShape(grad, Shape(g.shape(input)), "grad");
    const int64_t dim = attrs.getInt("dim");
    std::vector<Value> out = {g.call("scatter", {grad, index}, {{"dim", dim}, {"value", 0.0}})};
    if (g.has("src")) {
      const Shape pos = g.shape(index), src = g.shape(g.in("src"));
      const int64_t d = normalizeDim(g.op().name, dim, pos.size());
      Value ids = countAlong(g, pos, d, pos.empty() ? 1 : pos[size_t(d)]);
      Value writer = g.call("scatter", {g.call("zeros_like", {grad}, {{"dtype", std::string("i64")}}), index, ids}, dimAttr(dim));
      Value wins = g.call("eq", {g.call("gather", {writer, index}, dimAttr(dim)), ids});
      out.push_back(padTo(g, whereElseZero(g, wins, g.call("gather", {grad, index}, dimAttr(dim))), src));
    }
    return out;
  };
  return backwardOp(fwd, {{"grad"}, fwd.inputs[0], fwd.inputs[1], fwd.inputs[2]}, {"input", "src"},
                    graphTemplate(table, program),
                    "input: the grad, 0 where scattered to. src: the grad gathered at the index, only for the "
                    "write that won (the last duplicate; PyTorch gives every duplicate the grad).");
}

// scatter_add: the input passes the grad through; src gets it gathered.
OpSpec scatterAddBackward(const OpTable& table, const OpSpec& fwd) {
  auto program = [](Graph& g, const Attrs& attrs) {
    const Value grad = g.in("grad"), index = g.in("index");
    g.expectShape(grad, Shape(g.shape(g.in("input"))), "grad");
    const Shape src = g.shape(g.in("src"));
    return std::vector<Value>{grad, padTo(g, g.call("gather", {grad, index}, dimAttr(attrs.getInt("dim"))), src)};
  };
  return backwardOp(fwd, {{"grad"}, fwd.inputs[0], fwd.inputs[1], fwd.inputs[2]}, {"input", "src"},
                    graphTemplate(table, program), "input: the grad. src: the grad gathered at the index.");
}

// index_put: the grad's rows at the indices go to values (summed back to
// values' shape); the input keeps the rest, or all of it with accumulate.
// Without accumulate only the last duplicate's values row wins, and gets the grad.
OpSpec indexPutBackward(const OpTable& table, const OpSpec& fwd) {
  auto program = [](Graph& g, const Attrs& attrs) {
    const Value grad = g.in("grad"), indices = g.in("indices"), values = g.in("values");
    const Shape in = g.shape(g.in("input")), vs = g.shape(values);
    const DType dtype = g.desc(values).dtype;
    g.expectShape(grad, in, "grad");
    Value rows = g.call("index_select", {grad, indices}, dimAttr(0));
    if (attrs.getBool("accumulate")) return std::vector<Value>{grad, g.to(g.sumTo(rows, vs), dtype)};
    const int64_t k = g.desc(indices).numel();
    Value cleared = g.call("index_put", {grad, indices, zerosOf(g, {}, g.desc(grad).dtype)});
    Value ids = g.call("arange", {}, {{"end", k}});
    Value writer = g.call("index_put", {zerosOf(g, {in[0]}, DType::I64), indices, ids});
    Value wins = g.call("eq", {g.call("index_select", {writer, indices}, dimAttr(0)), ids});
    Shape column(in.size(), 1);
    column[0] = k;
    Value kept = whereElseZero(g, g.reshape(wins, column), rows);
    return std::vector<Value>{cleared, g.to(g.sumTo(kept, vs), dtype)};
  };
  return backwardOp(fwd, {{"grad"}, fwd.inputs[0], fwd.inputs[1], fwd.inputs[2]}, {"input", "values"},
                    graphTemplate(table, program),
                    "input: the grad, 0 at the indexed rows unless accumulate. values: the grad's indexed rows "
                    "summed to values' shape (without accumulate only the last duplicate's).");
}

// masked_fill: the grad where the mask is false; a tensor value gets the sum where it is true.
OpSpec maskedFillBackward(const OpTable& table, const OpSpec& fwd) {
  auto program = [](Graph& g, const Attrs&) {
    const Value grad = g.in("grad"), mask = g.in("mask");
    g.expectShape(grad, Shape(g.shape(g.in("input"))), "grad");
    std::vector<Value> out = {g.call("masked_fill", {grad, mask}, {{"value", 0.0}})};
    if (g.has("value")) {
      const DType dtype = g.desc(g.in("value")).dtype;
      out.push_back(g.to(g.sum(whereElseZero(g, mask, grad), {}, false), dtype));
    }
    return out;
  };
  return backwardOp(fwd, {{"grad"}, fwd.inputs[0], fwd.inputs[1], fwd.inputs[2]}, {"input", "value"},
                    graphTemplate(table, program),
                    "input: the grad, 0 where mask. value: the sum of the grad where mask.");
}

// masked_select: grad element j goes back to the place of the j-th true mask
// element. The running count of the mask, minus one, numbers those places
// along the flattened broadcast shape; `take` reads the grad there (index -1
// before the first true element reads the last, which `where` then drops).
// The grad's length must be the number of true mask elements; a longer grad's
// tail is ignored, a shorter one fails with an out-of-range index.
OpSpec maskedSelectBackward(const OpTable& table, const OpSpec& fwd) {
  auto program = [](Graph& g, const Attrs&) {
    const Value grad = g.in("grad"), input = g.in("input"), mask = g.in("mask");
    const Shape in = g.shape(input), grads = g.shape(grad);
    if (grads.size() != 1) {
      throwInvalid(g.op().name + ": input 'grad' has shape " + shapeStr(grads) +
                   "; expected a 1-D tensor (one element per true mask element)");
    }
    const auto b = broadcastShapes(in, g.shape(mask));
    if (!b) {
      throwInvalid(g.op().name + ": inputs 'input' " + shapeStr(in) + " and 'mask' " + shapeStr(g.shape(mask)) +
                   " cannot be broadcast together");
    }
    if (grads[0] == 0) return std::vector<Value>{g.zerosLike(input)};
    const int64_t n = TensorDesc{DType::Bool, *b}.numel();
    Value flatMask = g.reshape(g.shape(mask) == *b ? mask : g.expand(mask, *b), {n});
    Value place = g.call("sub", {g.call("cumsum", {flatMask}, dimAttr(0))}, {{"other", int64_t(1)}});
    Value spread = whereElseZero(g, flatMask, g.call("take", {grad, place}));
    return std::vector<Value>{g.sumTo(g.reshape(spread, *b), in)};
  };
  return backwardOp(fwd, {{"grad"}, fwd.inputs[0], fwd.inputs[1]}, {"input"}, graphTemplate(table, program),
                    "The grad's elements at the true mask positions in order, 0 elsewhere (summed over "
                    "broadcast dims). grad must have one element per true mask element.");
}

}  // namespace

void addIndexBackwardOps(std::vector<OpSpec>& ops, const OpTable& table) {
  std::vector<OpSpec> out;
  auto fwd = [&](const char* name) -> const OpSpec& { return findOp(ops, name); };
  out.push_back(gatherBackward(table, fwd("gather")));
  out.push_back(indexSelectBackward(table, fwd("index_select")));
  out.push_back(takeBackward(table, fwd("take")));
  out.push_back(scatterBackward(table, fwd("scatter")));
  out.push_back(scatterAddBackward(table, fwd("scatter_add")));
  out.push_back(indexPutBackward(table, fwd("index_put")));
  out.push_back(maskedFillBackward(table, fwd("masked_fill")));
  out.push_back(maskedSelectBackward(table, fwd("masked_select")));
  for (auto& op : out) ops.push_back(std::move(op));
}

}  // namespace tensord::compute
