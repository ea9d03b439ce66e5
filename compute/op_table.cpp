#include "compute/op_table.h"

#include <algorithm>
#include <stdexcept>

#include "compute/op_families.h"

namespace tensord::compute {

OpSpec singleOutputOp(std::string category, std::string name, std::vector<InputSpec> inputs,
                      std::vector<AttrSpec> attrs, std::vector<DType> dtypes,
                      std::shared_ptr<const KernelTemplate> kernel, std::string doc) {
  return {.name = std::move(name),
          .category = std::move(category),
          .inputs = std::move(inputs),
          .outputs = {"out"},
          .attrs = std::move(attrs),
          .dtypes = std::move(dtypes),
          .kernel = std::move(kernel),
          .backward = "",
          .doc = std::move(doc)};
}

OpSpec backwardOp(const OpSpec& forward, std::vector<InputSpec> inputs, const std::vector<std::string>& grads,
                  std::shared_ptr<const KernelTemplate> kernel, std::string doc) {
  std::vector<std::string> outputs;
  for (const auto& g : grads) outputs.push_back("grad_" + g);
  // Gradients exist for float data only: integer and bool tensors have none.
  std::vector<DType> dtypes;
  for (DType d : forward.dtypes) {
    if (isFloating(d)) dtypes.push_back(d);
  }
  return {.name = forward.name + "_backward",
          .category = forward.category,
          .inputs = std::move(inputs),
          .outputs = std::move(outputs),
          .attrs = forward.attrs,
          .dtypes = dtypes.empty() ? forward.dtypes : dtypes,
          .kernel = std::move(kernel),
          .backward = "",
          .doc = "Gradient of " + forward.name + ". " + doc + (doc.empty() ? "" : " ") +
                 "Not differentiable itself.",
          .promote = forward.promote,
          .differentiable = false};
}

const OpSpec& findOp(const std::vector<OpSpec>& ops, std::string_view name) {
  for (const auto& op : ops) {
    if (op.name == name) return op;
  }
  throw std::logic_error("no op '" + std::string(name) + "' in the table yet");
}

namespace {

bool hasName(const std::vector<std::string>& names, const std::string& name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

// A backward op must be callable by the convention in op_families.h from what
// a forward call had: its inputs name grads, forward inputs or outputs; it
// takes every forward attribute; its outputs name forward inputs.
void checkBackward(const OpSpec& fwd, const OpSpec& bwd) {
  auto fail = [&](const std::string& what) {
    throw std::logic_error("backward op '" + bwd.name + "' of '" + fwd.name + "': " + what);
  };
  std::vector<std::string> inNames, outNames;
  for (const auto& i : fwd.inputs) inNames.push_back(i.name);
  for (const auto& o : fwd.outputs) outNames.push_back(o);
  for (const auto& i : bwd.inputs) {
    bool known = i.name == "grad" || hasName(inNames, i.name) || hasName(outNames, i.name) ||
                 (i.name.rfind("grad_", 0) == 0 && hasName(outNames, i.name.substr(5)));
    if (!known) fail("input '" + i.name + "' is neither a grad nor a forward input or output");
  }
  for (const auto& a : fwd.attrs) {
    if (!bwd.findAttr(a.name)) fail("lacks the forward attribute '" + a.name + "'");
  }
  for (const auto& o : bwd.outputs) {
    if (o.rfind("grad_", 0) != 0 || !hasName(inNames, o.substr(5))) fail("output '" + o + "' names no forward input");
  }
}

}  // namespace

// The op table is the union of the families (op_families.h). Adding an op is
// one entry in its family's file, plus its conformance case.
OpTable::OpTable() {
  addElementwiseOps(ops_);
  addReductionOps(ops_);
  addLinalgOps(ops_);
  addShapeOps(ops_);
  addIndexOps(ops_);
  addNnOps(ops_);
  addCreationOps(ops_);
  addConvOps(ops_);
  addOptimizerOps(ops_);
  addElementwiseBackwardOps(ops_, *this);
  addReductionBackwardOps(ops_, *this);
  addLinalgBackwardOps(ops_, *this);
  addShapeBackwardOps(ops_, *this);
  addIndexBackwardOps(ops_, *this);
  addNnBackwardOps(ops_, *this);
  addConvBackwardOps(ops_, *this);
  std::sort(ops_.begin(), ops_.end(), [](const OpSpec& a, const OpSpec& b) { return a.name < b.name; });
  for (size_t i = 1; i < ops_.size(); ++i) {
    if (ops_[i].name == ops_[i - 1].name) throw std::logic_error("op '" + ops_[i].name + "' is defined twice");
  }
  // Each differentiable op names its backward, NAME_backward, when the table has it.
  for (auto& op : ops_) {
    if (!op.differentiable) continue;
    if (const OpSpec* bwd = find(op.name + "_backward")) {
      checkBackward(op, *bwd);
      op.backward = bwd->name;
    }
  }
}

const OpSpec* OpTable::find(std::string_view name) const {
  auto it = std::lower_bound(ops_.begin(), ops_.end(), name,
                             [](const OpSpec& op, std::string_view n) { return op.name < n; });
  return it != ops_.end() && it->name == name ? &*it : nullptr;
}

}  // namespace tensord::compute
