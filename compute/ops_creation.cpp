// The creation ops.

#include "compute/op_families.h"

namespace tensord::compute {

void addCreationOps(std::vector<OpSpec>& ops) { (void)ops; }

}  // namespace tensord::compute
