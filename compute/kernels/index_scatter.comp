// Scatter template (template_index.cpp): y = x, then for each index position
// q (shape posSize) with w = idx[q] (negative counts from the end), the
// element of y at q's coordinates with dim `dim` replaced by w receives
// src[q] (or the scalar FILL): assigned, or added when ACCUMULATE. Each
// output element loops over the j positions along dim that can target it,
// so no atomics are needed and duplicate indices sum deterministically.
// Meta: 4 fill words, then per dim 4 words: outSize, posSize, idxStride,
// srcStride. Out-of-range indices are skipped and reported in err.
layout(local_size_x = 256) in;
layout(push_constant) uniform Push {
  y_ref y;
  x_ref x;
  idx_ref idx;
  src_ref src;
  Meta meta;
  ErrorWords err;
  uint n;
  uint rank;
  uint dim;
  uint J;       // index positions along dim
  int dimSize;  // y's size along dim
  uint flags;   // 1: accumulate, 2: src is the scalar FILL
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
  uint db = 4u + 4u * p.dim;
  uint idxStep = p.rank > 0u ? p.meta.v[db + 2u] : 0u;
  uint srcStep = p.rank > 0u ? p.meta.v[db + 3u] : 0u;
  bool accumulate = (p.flags & 1u) != 0u;
  bool scalar = (p.flags & 2u) != 0u;
  IDX_T size = IDX_T(p.dimSize);
  for (uint i = gl_GlobalInvocationID.x; i < p.n; i += stride) {
    uint rem = i;
    uint ib = 0u, sb = 0u, od = 0u;
    bool ok = true;
    for (int k = int(p.rank) - 1; k >= 0; --k) {
      uint b = 4u + 4u * uint(k);
      uint size = p.meta.v[b];
      uint c = rem % size;
      rem /= size;
      if (uint(k) == p.dim) {
        od = c;
      } else {
        if (c >= p.meta.v[b + 1u]) ok = false;
        ib += c * p.meta.v[b + 2u];
        sb += c * p.meta.v[b + 3u];
      }
    }
    T acc = LOAD_x(i);
    if (ok) {
      for (uint j = 0u; j < p.J; ++j) {
        IDX_T v = RAW_idx(ib + j * idxStep);
        IDX_T w = v < IDX_T(0) ? v + size : v;
        if (w < IDX_T(0) || w >= size) {
          if (od == 0u && atomicCompSwap(p.err.v[0], 0u, 1u) == 0u) {
            p.err.v[1] = uint(v);
            p.err.v[2] = IDX_HI(v);
          }
          continue;
        }
        if (uint(w) != od) continue;
        T val = scalar ? T(FILL) : LOAD_src(sb + j * srcStep);
        if (accumulate) {
#if defined(IS_BOOL)
          acc = acc || val;
#else
          acc = acc + val;
#endif
        } else {
          acc = val;
        }
      }
    }
    STORE_y(i, acc);
  }
}
