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
  std::sort(ops_.begin(), ops_.end(), [](const OpSpec& a, const OpSpec& b) { return a.name < b.name; });
  for (size_t i = 1; i < ops_.size(); ++i) {
    if (ops_[i].name == ops_[i - 1].name) throw std::logic_error("op '" + ops_[i].name + "' is defined twice");
  }
}

const OpSpec* OpTable::find(std::string_view name) const {
  auto it = std::lower_bound(ops_.begin(), ops_.end(), name,
                             [](const OpSpec& op, std::string_view n) { return op.name < n; });
  return it != ops_.end() && it->name == name ? &*it : nullptr;
}

}  // namespace tensord::compute
