// x * sigmoid(alpha * x): GELU's sigmoid approximation, fused into one pass.
#version 450
layout(local_size_x = 64) in;
layout(binding = 0) readonly buffer X { float x[]; };
layout(binding = 1) writeonly buffer Y { float y[]; };
layout(push_constant) uniform Push { float alpha; };

void main() {
  uint i = gl_GlobalInvocationID.x;
  if (i >= x.length()) return;
  float v = x[i];
  y[i] = v / (1.0 + exp(-alpha * v));
}
