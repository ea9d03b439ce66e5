// The index ops.

#include "compute/op_families.h"

namespace tensord::compute {

void addIndexOps(std::vector<OpSpec>& ops) { (void)ops; }

}  // namespace tensord::compute
