// The shape ops.

#include "compute/op_families.h"

namespace tensord::compute {

void addShapeOps(std::vector<OpSpec>& ops) { (void)ops; }

}  // namespace tensord::compute
