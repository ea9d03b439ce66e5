// Backward ops of the nn family (see backwardOp in op_families.h for the
// calling convention).

#include "compute/op_families.h"
#include "compute/template_graph.h"

namespace tensord::compute {

void addNnBackwardOps(std::vector<OpSpec>& ops, const OpTable& table) {}

}  // namespace tensord::compute
