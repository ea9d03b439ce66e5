// Backward ops of the linalg family (see backwardOp in op_families.h for the
// calling convention). Graph programs of matrix products: for C = A @ B,
//   dA = dC @ B^T,  dB = A^T @ dC,
// summed over batch dims that broadcast. A matrix used transposed is read in
// place where linear (x @ W^T) can take it; else it is transposed (a copy,
// or a view when one of its two dims is 1).

#include <string_view>
#include <tuple>
#include <utility>

#include "compute/error.h"
#include "compute/op_families.h"
#include "compute/template_graph.h"
#include "compute/template_util.h"

namespace tensord::compute {
namespace {

using Values = std::vector<Value>;

void needRank(const Graph& g, Value v, std::string_view input, size_t lo, size_t hi) {
  const size_t r = g.shape(v).size();
  if (r < lo || r > hi) {
    throwInvalid(g.op().name + ": input '" + std::string(input) + "' has shape " + shapeStr(g.shape(v)) +
                 "; expected " +
                 (lo == hi ? "a " + std::to_string(lo) + "-D tensor" : "at least " + std::to_string(lo) + " dim(s)"));
  }
}

// v as a matrix: its leading dims flattened into rows, its last dim kept.
Value rows(Graph& g, Value v) {
  const Shape s = g.shape(v);
  int64_t n = 1;
  for (size_t d = 0; d + 1 < s.size(); ++d) n *= s[d];
  return g.reshape(v, {n, s.back()});
}

// v with its last two dims swapped.
Value mT(Graph& g, Value v) {
  Shape s = g.shape(v);
  const size_t r = s.size();
  if (s[r - 1] != 1 && s[r - 2] != 1) return g.transpose(v, -2, -1);
  std::swap(s[r - 1], s[r - 2]);
  return g.reshape(v, s);
}

// The grads of C = A @ B (torch.matmul's rules: 1-D operands promoted,
// batch dims broadcast) for the grad of C as the forward gave it, each in
// its operand's shape. Checks the grad's shape against C's.
std::pair<Value, Value> productGrads(Graph& g, Value a, Value b, std::string_view bName, Value grad) {
  needRank(g, a, "input", 1, kMaxRank);
  needRank(g, b, bName, 1, kMaxRank);
  const Shape as = g.shape(a), bs = g.shape(b);
  // A as [..., n, k], B as [..., k, m], grad as [batch..., n, m].
  Value A = as.size() == 1 ? g.reshape(a, {1, as[0]}) : a;
  Value B = bs.size() == 1 ? g.reshape(b, {bs[0], 1}) : b;
  const Shape As = g.shape(A), Bs = g.shape(B);
  const int64_t n = As[As.size() - 2], m = Bs.back();
  auto batch = broadcastShapes(Shape(As.begin(), As.end() - 2), Shape(Bs.begin(), Bs.end() - 2));
  if (!batch) {
    throwInvalid(g.op().name + ": inputs of shapes " + shapeStr(as) + " and " + shapeStr(bs) +
                 " have batch dims that cannot be broadcast together");
  }
  Shape expected = *batch, full = *batch;
  if (as.size() > 1) expected.push_back(n);
  if (bs.size() > 1) expected.push_back(m);
  full.push_back(n);
  full.push_back(m);
  g.expectShape(grad, expected, "grad");
  Value G = g.shape(grad) == full ? grad : g.reshape(grad, full);

  // dA = G @ B^T: with B one matrix, linear reads it transposed in place.
  Value dA = Bs.size() == 2 ? g.call("linear", {G, B}) : g.call("matmul", {G, mT(g, B)});
  // dB = A^T @ G: with B one matrix, A's batch is all of G's; the sum over
  // it is one product of the batch-flattened matrices.
  Value dB = Bs.size() == 2 ? g.call("mm", {mT(g, rows(g, A)), rows(g, G)}) : g.call("matmul", {mT(g, A), G});
  dA = g.sumTo(dA, As);
  dB = g.sumTo(dB, Bs);
  return {g.shape(dA) == as ? dA : g.reshape(dA, as), g.shape(dB) == bs ? dB : g.reshape(dB, bs)};
}

Value scaled(Graph& g, Value v, double s) { return s == 1.0 ? v : g.mul(v, s); }

}  // namespace

void addLinalgBackwardOps(std::vector<OpSpec>& ops, const OpTable& table) {
  std::vector<OpSpec> out;
  auto add = [&](const char* name, std::vector<InputSpec> inputs, std::vector<std::string> grads, GraphProgram program,
                 std::string doc) {
    OpSpec op = backwardOp(findOp(ops, name), std::move(inputs), grads, graphTemplate(table, std::move(program)),
                           std::move(doc));
    op.dtypes = kFloatDTypes;  // gradients exist for float inputs only
    out.push_back(std::move(op));
  };

  // matmul, mm, bmm: one program (mm and bmm are matmul's 2-D and 3-D cases).
  for (auto [name, second] : {std::pair{"matmul", "other"}, std::pair{"mm", "mat2"}, std::pair{"bmm", "mat2"}}) {
    std::string other = second;
    add(
        name, {{"grad"}, {"input"}, {other}}, {"input", other},
        [other](Graph& g, const Attrs&) {
          auto [da, db] = productGrads(g, g.in("input"), g.in(other), other, g.in("grad"));
          return Values{da, db};
        },
        "grad @ " + other + "^T and input^T @ grad, summed over broadcast batch dims.");
  }

  // addmm, baddbmm: beta * input + alpha * (A @ B).
  for (auto [name, first, second] : {std::tuple{"addmm", "mat1", "mat2"}, std::tuple{"baddbmm", "batch1", "batch2"}}) {
    std::string a = first, b = second;
    add(
        name, {{"grad"}, {"input"}, {a}, {b}}, {"input", a, b},
        [a, b](Graph& g, const Attrs& attrs) {
          Value grad = g.in("grad"), input = g.in("input");
          auto [da, db] = productGrads(g, g.in(a), g.in(b), b, scaled(g, grad, attrs.getFloat("alpha")));
          Value dInput = scaled(g, g.sumTo(grad, Shape(g.shape(input))), attrs.getFloat("beta"));
          return Values{dInput, da, db};
        },
        "beta * grad summed to input's shape; alpha times the product's grads.");
  }

  add(
      "dot", {{"grad"}, {"input"}, {"other"}}, {"input", "other"},
      [](Graph& g, const Attrs&) {
        Value grad = g.in("grad");
        g.expectShape(grad, {}, "grad");
        return Values{g.mul(g.in("other"), grad), g.mul(g.in("input"), grad)};
      },
      "grad * other and grad * input.");

  add(
      "outer", {{"grad"}, {"input"}, {"vec2"}}, {"input", "vec2"},
      [](Graph& g, const Attrs&) {
        Value grad = g.in("grad"), x = g.in("input"), y = g.in("vec2");
        needRank(g, x, "input", 1, 1);
        needRank(g, y, "vec2", 1, 1);
        g.expectShape(grad, {g.dim(x, 0), g.dim(y, 0)}, "grad");
        return Values{g.call("matmul", {grad, y}), g.call("matmul", {x, grad})};
      },
      "grad @ vec2 and input @ grad.");

  // linear: out = x @ W^T + bias.
  add(
      "linear", {{"grad"}, {"input"}, {"weight"}, {"bias", InputRole::kData, true}}, {"input", "weight", "bias"},
      [](Graph& g, const Attrs&) {
        Value grad = g.in("grad"), x = g.in("input"), w = g.in("weight");
        needRank(g, x, "input", 1, kMaxRank);
        needRank(g, w, "weight", 2, 2);
        Shape expected = g.shape(x);
        expected.back() = g.dim(w, 0);
        g.expectShape(grad, expected, "grad");
        Value dx = g.call("matmul", {grad, w});
        // dW = grad^T @ x over every leading dim at once.
        Value dw = g.call("mm", {mT(g, rows(g, grad)), rows(g, x)});
        Values grads{dx, dw};
        if (g.has("bias")) {
          Value bias = g.in("bias");
          grads.push_back(g.sumTo(grad, Shape(g.shape(bias))));
        }
        return grads;
      },
      "grad @ weight, grad^T @ input over all leading dims, and grad summed to bias's shape.");

  for (auto& op : out) ops.push_back(std::move(op));
}

}  // namespace tensord::compute
