// dot(a, b) as a split reduction. PASS 1: each workgroup sums a grid-stride
// share of a[i] * b[i] into part[group]; PASS 2: one workgroup sums the
// `groups` partials into y[0]. Accumulates in T (float for f16/bf16).
layout(local_size_x = 256) in;
layout(push_constant) uniform Push {
  a_ref a;
  b_ref b;
  part_ref part;
  y_ref y;
  uint n;
  uint groups;
} p;
shared T s[256];
void main() {
  uint t = gl_LocalInvocationID.x;
  T acc = T(0);
#if PASS == 1
  for (uint i = gl_GlobalInvocationID.x; i < p.n; i += gl_NumWorkGroups.x * 256u) acc += LOAD_a(i) * LOAD_b(i);
#else
  for (uint i = t; i < p.groups; i += 256u) acc += LOAD_part(i);
#endif
  s[t] = acc;
  barrier();
  for (uint w = 128u; w > 0u; w >>= 1) {
    if (t < w) s[t] += s[t + w];
    barrier();
  }
  if (t == 0u) {
#if PASS == 1
    STORE_part(gl_WorkGroupID.x, s[0]);
#else
    STORE_y(0, s[0]);
#endif
  }
}
