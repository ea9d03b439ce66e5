// Remap template (template_shape.cpp): y[base + sum(c_d * outStride_d)] =
// x[sum(map_d(c_d) * inStride_d)] over an iteration shape, or a constant.
// Meta: 4 fill words (float bits, int32, int64 low, int64 high), then per
// dim (outermost first) 7 words: size, outStride, inStride, offset, step,
// inSize, mode (0 linear, 1 wrap, 2 reflect, 3 replicate, 4 constant).
// Same dtype in and out: elements are copied as stored.
layout(local_size_x = 256) in;
layout(push_constant) uniform Push {
  y_ref y;
  x_ref x;
  Meta meta;
  uint n;
  uint rank;
  uint base;
  uint tri;   // 0 none, 1 triu, 2 tril over the last two dims
  int diag;
} p;

#if defined(IS_FLOAT)
#define FILL uintBitsToFloat(p.meta.v[0])
#elif defined(DT_I32)
#define FILL int(p.meta.v[1])
#elif defined(DT_I64)
#define FILL int64_t(uint64_t(p.meta.v[2]) | (uint64_t(p.meta.v[3]) << 32))
#elif defined(DT_U8)
#define FILL p.meta.v[1]
#else
#define FILL (p.meta.v[1] != 0u)
#endif

void main() {
  uint stride = gl_NumWorkGroups.x * 256u;
  for (uint i = gl_GlobalInvocationID.x; i < p.n; i += stride) {
    uint rem = i;
    uint dst = p.base;
    int src = 0;
    bool fill = false;
    int row = 0, col = 0;
    for (int k = int(p.rank) - 1; k >= 0; --k) {
      uint b = 4u + 7u * uint(k);
      uint size = p.meta.v[b];
      uint c = rem % size;
      rem /= size;
      dst += c * p.meta.v[b + 1u];
      int ci = int(p.meta.v[b + 3u]) + int(p.meta.v[b + 4u]) * int(c);
      int len = int(p.meta.v[b + 5u]);
      uint mode = p.meta.v[b + 6u];
      if (mode == 1u) {
        ci -= (ci / len) * len;  // not %: GLSL leaves % of negative ints undefined (NVIDIA and llvmpipe differ)
        if (ci < 0) ci += len;
      } else if (mode == 2u) {
        int period = 2 * (len - 1);
        if (period == 0) {
          ci = 0;
        } else {
          ci = abs(ci) % period;
          if (ci >= len) ci = period - ci;
        }
      } else if (mode == 3u) {
        ci = clamp(ci, 0, len - 1);
      } else if (mode == 4u) {
        if (ci < 0 || ci >= len) {
          fill = true;
          ci = 0;
        }
      }
      src += ci * int(p.meta.v[b + 2u]);
      if (k == int(p.rank) - 1) col = int(c);
      if (k == int(p.rank) - 2) row = int(c);
    }
    if (p.tri == 1u && col - row < p.diag) fill = true;
    if (p.tri == 2u && col - row > p.diag) fill = true;
    if (fill) {
      STORE_y(dst, FILL);
    } else {
      p.y.v[dst] = p.x.v[src];
    }
  }
}
