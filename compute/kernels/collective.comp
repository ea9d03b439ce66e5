// Collective kernels (compute/collective_kernels.cpp), over n elements of
// two stretches of device memory (their addresses already offset):
//   MODE_REDUCE:  dst[i] = COMBINE(dst[i], src[i]), f32 partial results;
//                 with MIRROR also copy[i] = dst[i] (the result sent on);
//   MODE_CONVERT: dst[i] = src[i] * scale, converted to dst's dtype.
layout(local_size_x = 256) in;
layout(push_constant) uniform Push {
  src_ref src;
  dst_ref dst;
#ifdef MIRROR
  copy_ref copy;
#endif
  uint n;
  float scale;
} p;

void main() {
  uint stride = gl_NumWorkGroups.x * 256u;
  for (uint i = gl_GlobalInvocationID.x; i < p.n; i += stride) {
#ifdef MODE_REDUCE
    T a = LOAD_dst(i);
    T b = LOAD_src(i);
    T r = COMBINE(a, b);
    STORE_dst(i, r);
#ifdef MIRROR
    STORE_copy(i, r);
#endif
#else
    STORE_dst(i, LOAD_src(i) * p.scale);
#endif
  }
}
