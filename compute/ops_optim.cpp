// Optimizer steps as ops: they update parameters and their state in place.

#include "compute/op_families.h"

namespace tensord::compute {

void addOptimizerOps(std::vector<OpSpec>& ops) {}

}  // namespace tensord::compute
