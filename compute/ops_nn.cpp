// The nn ops.

#include "compute/op_families.h"

namespace tensord::compute {

void addNnOps(std::vector<OpSpec>& ops) { (void)ops; }

}  // namespace tensord::compute
