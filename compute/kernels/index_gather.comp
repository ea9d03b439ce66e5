// Gather template (template_index.cpp): y[i] = x[sum(c_d * inStride_d) +
// w * dimStride] where w = idx[sum(c_d * idxStride_d)] (negative counts from
// the end), c the coordinates of i in y's shape. Meta per dim: outSize,
// idxStride, inStride. An index out of [-dimSize, dimSize) is clamped and
// reported in err (words 1, 2: the index as int64). IDX_T is the index
// type (int or int64_t: i32 indices stay 32-bit; widening them to int64 gave
// wrong comparisons on lavapipe).
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
    IDX_T v = RAW_idx(io);
    IDX_T size = IDX_T(p.dimSize);
    IDX_T w = v < IDX_T(0) ? v + size : v;
    if (w < IDX_T(0) || w >= size) {
      if (atomicCompSwap(p.err.v[0], 0u, 1u) == 0u) {
        p.err.v[1] = uint(v);
        p.err.v[2] = IDX_HI(v);
      }
      w = clamp(w, IDX_T(0), size - IDX_T(1));
    }
    xo += uint(w) * p.dimStride;
    p.y.v[i] = p.x.v[xo];
  }
}
