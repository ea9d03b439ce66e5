// Build step: compiles every kernel variant of every op in every dtype it
// declares with glslang, so a broken shader fails the build instead of a
// user's call. Needs no Vulkan device. Exit status 1 lists what failed.

#include <cstdio>
#include <exception>
#include <set>

#include "compute/kernel_cache.h"
#include "compute/kernel_templates.h"
#include "compute/op_table.h"

int main() {
  using namespace tensord::compute;
  OpTable table;
  std::set<const KernelSource*> seen;
  int failures = 0;
  for (const OpSpec& op : table.all()) {
    for (DType dtype : op.dtypes) {
      std::vector<const KernelSource*> sources;
      try {
        sources = op.kernel->variants(op, dtype);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "%s (%s): generating kernels failed: %s\n", op.name.c_str(),
                     std::string(dtypeName(dtype)).c_str(), e.what());
        ++failures;
        continue;
      }
      for (const KernelSource* source : sources) {
        if (!seen.insert(source).second) continue;
        try {
          compileGlsl(source->name, source->glsl);
        } catch (const std::exception& e) {
          std::fprintf(stderr, "%s (%s): %s\n", op.name.c_str(), std::string(dtypeName(dtype)).c_str(), e.what());
          ++failures;
        }
      }
    }
  }
  std::printf("kernel check: %zu ops, %zu kernel variants compiled, %d failed\n", table.all().size(), seen.size(),
              failures);
  return failures ? 1 : 0;
}
