// Gather template (template_index.cpp): y[i] = x[sum(c_d * inStride_d) +
// w * dimStride] where w = idx[sum(c_d * idxStride_d)] (negative counts from
// the end), c the coordinates of i in y's shape. Meta per dim: outSize,
// idxStride, inStride. An index out of [-dimSize, dimSize) is clamped and
// reported in err (words 1, 2: the index as int64).
layout(local_size_x = 256) in;
layout(push_constant) uniform Push {
  y_ref y;
  x_ref x;
  idx_ref idx;
  Meta meta;
  ErrorWords err;
  uint n;
  uint rank;
  uint dimStride;
  int dimSize;
} p;

void main() {
  uint stride = gl_NumWorkGroups.x * 256u;
  for (uint i = gl_GlobalInvocationID.x; i < p.n; i += stride) {
    uint rem = i;
    uint io = 0u, xo = 0u;
    for (int k = int(p.rank) - 1; k >= 0; --k) {
      uint b = 3u * uint(k);
      uint size = p.meta.v[b];
      uint c = rem % size;
      rem /= size;
      io += c * p.meta.v[b + 1u];
      xo += c * p.meta.v[b + 2u];
    }
    int64_t v = int64_t(RAW_idx(io));
    int64_t w = v < 0l ? v + int64_t(p.dimSize) : v;
    if (w < 0l || w >= int64_t(p.dimSize)) {
      if (atomicCompSwap(p.err.v[0], 0u, 1u) == 0u) {
        p.err.v[1] = uint(uint64_t(v));
        p.err.v[2] = uint(uint64_t(v) >> 32);
      }
      w = clamp(w, 0l, int64_t(p.dimSize) - 1l);
    }
    xo += uint(w) * p.dimStride;
    p.y.v[i] = p.x.v[xo];
  }
}
