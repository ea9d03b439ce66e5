// The shader copy behind device-to-device copies.

#include "compute/kernel_templates.h"

namespace tensord::compute {

const KernelSource& copyKernel() {
  static const KernelSource source{"copy", R"(#version 460
#extension GL_EXT_buffer_reference : require
layout(buffer_reference, std430, buffer_reference_align = 16) buffer Words { uvec4 v[]; };
layout(local_size_x = 256) in;
layout(push_constant) uniform Push { Words src; Words dst; uint count; } p;
void main() {
  uint stride = gl_NumWorkGroups.x * 256u;
  for (uint i = gl_GlobalInvocationID.x; i < p.count; i += stride) p.dst.v[i] = p.src.v[i];
}
)"};
  return source;
}

}  // namespace tensord::compute
