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
  uint dense;   // 1: every tensor operand is contiguous with y's shape; 2: also VEC4's alignment (below)
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
// A pass of the dense loops gives each workgroup one contiguous chunk of
// UNROLL x 256 elements (or groups of 4), its invocations' loads 256 apart
// within it. Strided across the whole grid instead (each load a grid's
// width from the invocation's last), the same ops took 0.6-1.4% longer on
// an H100 by device time, in every case and round (docs/PERFORMANCE.md,
// "Changes of the seventh round").
#define CHUNK (UNROLL * 256u)

// VEC4 (float values stored as f32, f16 or bf16; the generator defines
// VEC4_TYPE_x, VEC4_ALIGN_x, LOAD4_x(q) for each tensor operand, OPERAND4_x(q)
// for every operand and STORE4_y(q, v)): with dense == 2 the element count is
// a multiple of 4 and every tensor is aligned to 4 elements, so each access
// moves 4 consecutive elements at once (16 bytes of f32, 8 of f16), a
// quarter of the load and store instructions.
#ifdef VEC4
#ifdef VEC4_TYPE_a
layout(buffer_reference, std430, buffer_reference_align = VEC4_ALIGN_a) buffer a_ref4 { VEC4_TYPE_a v[]; };
#endif
#ifdef VEC4_TYPE_b
layout(buffer_reference, std430, buffer_reference_align = VEC4_ALIGN_b) buffer b_ref4 { VEC4_TYPE_b v[]; };
#endif
#ifdef VEC4_TYPE_c
layout(buffer_reference, std430, buffer_reference_align = VEC4_ALIGN_c) buffer c_ref4 { VEC4_TYPE_c v[]; };
#endif
#ifdef VEC4_TYPE_d
layout(buffer_reference, std430, buffer_reference_align = VEC4_ALIGN_d) buffer d_ref4 { VEC4_TYPE_d v[]; };
#endif
layout(buffer_reference, std430, buffer_reference_align = VEC4_ALIGN_y) buffer y_ref4 { VEC4_TYPE_y v[]; };

// Groups of 4 elements q = 0 .. n/4 - 1, UNROLL groups in flight.
void dense4() {
  uint n4 = p.n >> 2;
  for (uint q0 = gl_WorkGroupID.x * CHUNK + gl_LocalInvocationID.x; q0 < n4; q0 += gl_NumWorkGroups.x * CHUNK) {
    vec4 av[UNROLL];
#if ARITY > 1
    vec4 bv[UNROLL];
#endif
#if ARITY > 2
    vec4 cv[UNROLL];
#endif
#if ARITY > 3
    vec4 dv[UNROLL];
#endif
    for (uint j = 0u; j < UNROLL; ++j) {
      uint q = q0 + j * 256u;
      if (q < n4) {
        av[j] = OPERAND4_a(q);
#if ARITY > 1
        bv[j] = OPERAND4_b(q);
#endif
#if ARITY > 2
        cv[j] = OPERAND4_c(q);
#endif
#if ARITY > 3
        dv[j] = OPERAND4_d(q);
#endif
      }
    }
    for (uint j = 0u; j < UNROLL; ++j) {
      uint q = q0 + j * 256u;
      if (q < n4) {
        vec4 r;
        for (uint e = 0u; e < 4u; ++e) {
          T a = av[j][e];
#if ARITY > 1
          T b = bv[j][e];
#endif
#if ARITY > 2
          T c = cv[j][e];
#endif
#if ARITY > 3
          T d = dv[j][e];
#endif
          r[e] = EXPR;
        }
        STORE4_y(q, r);
      }
    }
  }
}
#endif

void main() {
#ifdef VEC4
  if (p.dense == 2u) {
    dense4();
    return;
  }
#endif
  if (p.dense != 0u) {
    for (uint i0 = gl_WorkGroupID.x * CHUNK + gl_LocalInvocationID.x; i0 < p.n; i0 += gl_NumWorkGroups.x * CHUNK) {
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
        uint i = i0 + j * 256u;
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
        uint i = i0 + j * 256u;
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
  uint stride = gl_NumWorkGroups.x * 256u;
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
