// embedding: y[i, j] = weight[indices[i], j]. An index out of [0, rows) is
// clamped and reported: err word 0 = 1, words 1, 2 = the index (low, high).
layout(local_size_x = 256) in;
layout(push_constant) uniform Push {
  y_ref y;
  w_ref w;
  idx_ref idx;
  ErrorWords err;
  uint n;     // output elements
  uint dim;   // embedding dim
  uint rows;  // table rows
} p;

void main() {
  uint stride = gl_NumWorkGroups.x * 256u;
  for (uint i = gl_GlobalInvocationID.x; i < p.n; i += stride) {
    uint e = i / p.dim, j = i % p.dim;
    // No int -> int64 conversions: lavapipe does not sign-extend them reliably.
#ifdef IDX64
    int64_t t = RAW_idx(e);
    bool bad = t < 0l || t >= int64_t(p.rows);
    uint lo = uint(uint64_t(t)), hi = uint(uint64_t(t) >> 32);
#else
    int t = RAW_idx(e);
    bool bad = t < 0 || uint(t) >= p.rows;
    uint lo = uint(t), hi = t < 0 ? 0xffffffffu : 0u;
#endif
    uint row = bad ? (t < 0 ? 0u : p.rows - 1u) : uint(t);
    if (bad && atomicCompSwap(p.err.v[0], 0u, 1u) == 0u) {
      p.err.v[1] = lo;
      p.err.v[2] = hi;
    }
    STORE_y(i, LOAD_w(row * p.dim + j));
  }
}
