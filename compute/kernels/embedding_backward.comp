// embedding's weight gradient without atomics: the indices come sorted
// (stable, with the permutation `perm` that sorts them), so the entries of
// table row r are one run of `sorted`; element (r, j) finds the run by
// binary search and sums grad[perm[k], j] over it, in index order (the same
// sum on every run and device). Row `pad` (padding_idx, when HAS_PAD) gets
// zeros; indices outside [0, rows) match no row.
layout(local_size_x = 256) in;
layout(push_constant) uniform Push {
  dw_ref dw;
  g_ref g;
  sorted_ref sorted;
  perm_ref perm;
  uint n;     // indices
  uint dim;   // embedding dim
  uint rows;  // table rows
  uint pad;
} p;

void main() {
  uint stride = gl_NumWorkGroups.x * 256u;
  for (uint e = gl_GlobalInvocationID.x; e < p.rows * p.dim; e += stride) {
    uint r = e / p.dim, j = e % p.dim;
    float acc = 0.0;
#ifdef HAS_PAD
    bool skip = r == p.pad;
#else
    bool skip = false;
#endif
    if (!skip) {
      // The first k with sorted[k] >= r.
      uint lo = 0u, hi = p.n;
      while (lo < hi) {
        uint mid = (lo + hi) / 2u;
#ifdef IDX64
        bool below = RAW_sorted(mid) < int64_t(uint64_t(r));
#else
        bool below = RAW_sorted(mid) < int(r);
#endif
        if (below) lo = mid + 1u; else hi = mid;
      }
#ifdef IDX64
      for (uint k = lo; k < p.n && RAW_sorted(k) == int64_t(uint64_t(r)); ++k) {
#else
      for (uint k = lo; k < p.n && RAW_sorted(k) == int(r); ++k) {
#endif
        acc += LOAD_g(uint(RAW_perm(k)) * p.dim + j);
      }
    }
    STORE_dw(e, acc);
  }
}
