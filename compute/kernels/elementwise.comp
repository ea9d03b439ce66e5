// Elementwise template: y[i] = EXPR over operands a..d (ARITY of them) and
// scalar parameters s0... Defined by the generator (template_elementwise.cpp):
// ARITY, EXPR, OPERAND_a(i).. (a tensor load or a scalar), SCALAR(k).
// Meta: shape[rank], then one stride row per operand, then scalars (4 words
// each: float bits, int32 (saturated), int64 low, int64 high).
layout(local_size_x = 256) in;
layout(push_constant) uniform Push {
  y_ref y;
  a_ref a;
  b_ref b;
  c_ref c;
  d_ref d;
  Meta meta;
  uint n;
  uint rank;
  uint dense;   // 1: every tensor operand is contiguous with y's shape
  uint scalars; // word offset of the scalars in meta
} p;

#define SCALAR_F(k) uintBitsToFloat(p.meta.v[p.scalars + 4u * (k)])
#define SCALAR_I(k) int(p.meta.v[p.scalars + 4u * (k) + 1u])
#define SCALAR_L(k) (int64_t(uint64_t(p.meta.v[p.scalars + 4u * (k) + 2u]) | (uint64_t(p.meta.v[p.scalars + 4u * (k) + 3u]) << 32)))
#define SCALAR_U(k) p.meta.v[p.scalars + 4u * (k) + 1u]
#define SCALAR_B(k) (p.meta.v[p.scalars + 4u * (k) + 1u] != 0u)

// Elements per invocation per pass of the dense loop: its loads are all
// issued before any is used, so each invocation keeps several in flight
// (one at a time leaves a big GPU short of memory bandwidth).
#define UNROLL 4u

void main() {
  uint stride = gl_NumWorkGroups.x * 256u;
  if (p.dense != 0u) {
    for (uint i0 = gl_GlobalInvocationID.x; i0 < p.n; i0 += UNROLL * stride) {
      T av[UNROLL];
#if ARITY > 1
      T bv[UNROLL];
#endif
#if ARITY > 2
      T cv[UNROLL];
#endif
#if ARITY > 3
      T dv[UNROLL];
#endif
      for (uint j = 0u; j < UNROLL; ++j) {
        uint i = i0 + j * stride;
        if (i < p.n) {
          av[j] = OPERAND_a(i);
#if ARITY > 1
          bv[j] = OPERAND_b(i);
#endif
#if ARITY > 2
          cv[j] = OPERAND_c(i);
#endif
#if ARITY > 3
          dv[j] = OPERAND_d(i);
#endif
        }
      }
      for (uint j = 0u; j < UNROLL; ++j) {
        uint i = i0 + j * stride;
        if (i < p.n) {
          T a = av[j];
#if ARITY > 1
          T b = bv[j];
#endif
#if ARITY > 2
          T c = cv[j];
#endif
#if ARITY > 3
          T d = dv[j];
#endif
          STORE_y(i, EXPR);
        }
      }
    }
    return;
  }
  for (uint i = gl_GlobalInvocationID.x; i < p.n; i += stride) {
    uint ia = i, ib = i, ic = i, id = i;
    if (p.dense == 0u) {
      ia = 0u; ib = 0u; ic = 0u; id = 0u;
      uint rem = i;
      uint r = p.rank;
      for (int k = int(r) - 1; k >= 0; --k) {
        uint size = p.meta.v[k];
        uint idx = rem % size;
        rem /= size;
        ia += idx * p.meta.v[r + uint(k)];
#if ARITY > 1
        ib += idx * p.meta.v[2u * r + uint(k)];
#endif
#if ARITY > 2
        ic += idx * p.meta.v[3u * r + uint(k)];
#endif
#if ARITY > 3
        id += idx * p.meta.v[4u * r + uint(k)];
#endif
      }
    }
    T a = OPERAND_a(ia);
#if ARITY > 1
    T b = OPERAND_b(ib);
#endif
#if ARITY > 2
    T c = OPERAND_c(ic);
#endif
#if ARITY > 3
    T d = OPERAND_d(id);
#endif
    STORE_y(i, EXPR);
  }
}
