#pragma once
// The graph template: an op written as a short program over other ops of the
// table. Backward ops are mostly this: relu_backward is `where(input > 0,
// grad, 0)`, matmul_backward two matmuls and a sum over broadcast batch dims.
//
// The program runs twice per call: once on descriptors only (infer: output
// shapes, every step's own checks), and once recording each step's kernels
// into the op's command buffer. Intermediates live in the batch's scratch
// memory; the step that produces a result writes straight into the op's
// output, so a graph op costs what its steps cost and nothing more. A step
// that is a view (reshape) costs nothing.

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "compute/kernel_templates.h"

namespace tensord::compute {

class OpTable;

// One tensor in a graph program (an input of the op or a step's output).
struct Value {
  int id = -1;
  explicit operator bool() const { return id >= 0; }
};

using StepAttrs = std::vector<std::pair<std::string, AttrValue>>;

class Graph {
 public:
  virtual ~Graph() = default;

  // The op's inputs by name; `in` throws if the input was not given.
  Value in(std::string_view name) const;
  bool has(std::string_view name) const { return !ins(name).empty(); }
  std::vector<Value> ins(std::string_view name) const;  // a variadic input's tensors (or the one, or none)
  // Valid until the next step is added: copy what must outlive a call.
  const TensorDesc& desc(Value v) const { return descs_.at(size_t(v.id)); }
  const Shape& shape(Value v) const { return desc(v).shape; }
  int64_t dim(Value v, int64_t d) const;  // size of dim d (negative: from the end)
  const OpSpec& op() const { return *op_; }
  // Throws ComputeError(kInvalid) naming this op, `input` and both shapes
  // unless v has `shape` (a grad that does not fit the forward output, say).
  void expectShape(Value v, const Shape& shape, std::string_view input) const;

  // Runs op `name` of the table on `inputs`; attributes not given take their
  // defaults. The op's own checks apply (a failing check is an error of this op).
  std::vector<Value> callN(std::string_view name, std::vector<Value> inputs, const StepAttrs& attrs = {});
  Value call(std::string_view name, std::vector<Value> inputs, const StepAttrs& attrs = {});
  // Runs a step that is not in the table: a spec the graph op keeps for
  // itself (a partial derivative as an elementwise expression, say). Pass
  // it to graphTemplate too, so the build compiles its kernels.
  std::vector<Value> callSpec(const OpSpec& step, std::vector<Value> inputs, const StepAttrs& attrs = {});
  Value call(const OpSpec& step, std::vector<Value> inputs, const StepAttrs& attrs = {});

  // Shorthands for the steps backward ops take most.
  Value mul(Value a, Value b) { return call("mul", {a, b}); }
  Value mul(Value a, double s) { return call("mul", {a}, {{"other", s}}); }
  Value add(Value a, Value b) { return call("add", {a, b}); }
  Value add(Value a, double s) { return call("add", {a}, {{"other", s}}); }
  Value sub(Value a, Value b) { return call("sub", {a, b}); }
  Value div(Value a, Value b) { return call("div", {a, b}); }
  Value neg(Value a) { return call("neg", {a}); }
  Value reshape(Value a, const Shape& shape) { return call("reshape", {a}, {{"shape", shape}}); }
  Value sum(Value a, std::vector<int64_t> dims, bool keepdim) {
    return call("sum", {a}, {{"dim", std::move(dims)}, {"keepdim", keepdim}});
  }
  Value expand(Value a, const Shape& shape) { return call("expand", {a}, {{"size", shape}}); }
  Value transpose(Value a, int64_t d0, int64_t d1) { return call("transpose", {a}, {{"dim0", d0}, {"dim1", d1}}); }
  Value zerosLike(Value a) { return call("zeros_like", {a}); }
  // `a` (broadcast from `shape`) summed back to `shape`: leading dims and dims
  // that are 1 in `shape` are summed. The gradient of every broadcast.
  Value sumTo(Value a, Shape shape);
  // `a` brought to dtype d (a no-op when it has it).
  Value to(Value a, DType d);

 protected:
  Graph(const OpTable& table, const OpSpec& op) : table_(table), op_(&op) {}
  virtual void onStep(const OpSpec& step, const std::vector<Value>& inputs, const Attrs& attrs,
                      const std::vector<Value>& outputs) = 0;
  int newValue(TensorDesc desc, int parent);
  void bindInputs(std::span<const TensorDesc> inputs);

  const OpTable& table_;
  const OpSpec* op_;
  std::vector<TensorDesc> descs_;
  std::vector<int> viewOf_;  // value -> the value whose memory it shares (-1: its own)
  size_t numInputs_ = 0;
};

// The program: returns one Value per output of the call (in order).
using GraphProgram = std::function<std::vector<Value>(Graph& g, const Attrs& attrs)>;

// `steps`: the specs the program runs through callSpec.
std::shared_ptr<const KernelTemplate> graphTemplate(const OpTable& table, GraphProgram program,
                                                    std::vector<std::shared_ptr<const OpSpec>> steps = {});

}  // namespace tensord::compute
