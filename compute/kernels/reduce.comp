// Reduction template: every reduction (sum ... count_nonzero) is this file
// with one OP_* block selected. Defined by the generator (template_reduce.cpp):
//   A          accumulator type: float (float inputs) or int64_t (int, bool)
//   LOADA(i)   element i of x converted to A
//   OP_*       which accumulate / combine / finalize to use
//   ST_FIELDS  which fields of St the op uses (bits: 1 x, 2 y, 4 z, 8 i)
//   FIN_Y(s) / FIN_Z(s)  the outputs' values from a final state (HAS_Z: two outputs)
//   PASS       1: reduce the input; 2: combine the partial states of pass 1
//   TEAM       who takes one work item: TEAM_THREAD (neighbouring threads on
//              neighbouring outputs: strided "column" reductions),
//              TEAM_SUBGROUP (many short contiguous rows) or TEAM_GROUP
//              (long contiguous rows, or one chunk of one)
//   UNROLL     loads each invocation keeps in flight (bandwidth needs bytes
//              in flight, and one scalar load per thread is too few)
//   CUNROLL    partial states each invocation loads at once to combine them
//   LOADA4(q)  (pass 1 of a team over contiguous rows of floats stored as
//              f32, f16 or bf16; VEC4_TYPE, VEC4_ALIGN) elements 4q .. 4q+3
//              of x as a vec4: with p.wide set, each load moves 4 (below)
// The input is viewed as outputs x reduced elements: out dims (sizes, input
// strides) then reduced dims (sizes, input strides) in p.meta. Pass 1 splits
// each output's d elements into p.s chunks of p.chunk; with p.s > 1 it writes
// partial states (index sp * n + o) that pass 2 combines and finalizes.
// Every order of combination is fixed by the shape (and the device's
// subgroup size), so results are deterministic.
//
// With p.counters set (pass 1 of TEAM_GROUP, p.s > 1), there is no pass 2:
// the workgroup that stores an output's last partial state (counted in
// p.counters, one zeroed word per output) combines them all, in the order
// pass 2's TEAM_GROUP variant would, and writes the output. This saves pass
// 2's dispatch and the barrier before it, a few microseconds that a
// whole-tensor sum on a large GPU feels.
#extension GL_KHR_shader_subgroup_shuffle : require
#extension GL_EXT_control_flow_attributes : require
#define TEAM_THREAD 0
#define TEAM_SUBGROUP 1
#define TEAM_GROUP 2
#define WG_SIZE 256u
layout(local_size_x = 256) in;

struct St {
  A x;
  A y;
  A z;
  int64_t i;
};
// coherent: with p.counters, one workgroup reads the states others wrote.
layout(buffer_reference, std430, buffer_reference_align = 8) coherent buffer States { int64_t v[]; };
layout(buffer_reference, std430, buffer_reference_align = 4) coherent buffer Counters { uint v[]; };

layout(push_constant) uniform Push {
  x_ref x;
  y_ref y;
  z_ref z;
  States st;
  Meta meta;
  uint n;        // outputs
  uint d;        // reduced elements per output
  uint s;        // splits per output
  uint chunk;    // reduced elements per split
  uint outRank;
  uint redRank;
  uint final_;   // pass 1 writes outputs (p.s == 1)
  float count;   // d as a float (mean)
  float param;   // correction (var, std) or p (norm)
  uint wide;     // LOADA4 applies: one reduced dim of stride 1, and every
                 // output's first element, p.chunk and p.d multiples of 4
  Counters counters;  // see above; 0: none
} p;

#ifdef LOADA4
layout(buffer_reference, std430, buffer_reference_align = VEC4_ALIGN) buffer X4 { VEC4_TYPE v[]; };
#endif

#ifdef ACC_FLOAT
#define A_ISNAN(v) isnan(v)
#define A_LOWEST uintBitsToFloat(0xff800000u)
#define A_HIGHEST uintBitsToFloat(0x7f800000u)
#else
#define A_ISNAN(v) false
#define A_LOWEST (-9223372036854775807l - 1l)
#define A_HIGHEST 9223372036854775807l
#endif
#define NO_INDEX 9223372036854775807l

// ---------------------------------------------------------------- per op
#if defined(OP_SUM)
void st_init(inout St s) { s.x = A(0); }
void st_acc(inout St s, A v, int64_t k) { s.x += v; }
void st_comb(inout St s, St t) { s.x += t.x; }
#elif defined(OP_PROD)
void st_init(inout St s) { s.x = A(1); }
void st_acc(inout St s, A v, int64_t k) { s.x *= v; }
void st_comb(inout St s, St t) { s.x *= t.x; }
#elif defined(OP_MAX)
void st_init(inout St s) { s.x = A_LOWEST; }
void st_acc(inout St s, A v, int64_t k) { if (A_ISNAN(v) || v > s.x) s.x = v; }
void st_comb(inout St s, St t) { st_acc(s, t.x, 0l); }
#elif defined(OP_MIN)
void st_init(inout St s) { s.x = A_HIGHEST; }
void st_acc(inout St s, A v, int64_t k) { if (A_ISNAN(v) || v < s.x) s.x = v; }
void st_comb(inout St s, St t) { st_acc(s, t.x, 0l); }
#elif defined(OP_ARGMAX) || defined(OP_ARGMIN)
// (value, index); NaN wins, ties go to the first index.
void st_init(inout St s) {
#ifdef OP_ARGMAX
  s.x = A_LOWEST;
#else
  s.x = A_HIGHEST;
#endif
  s.i = NO_INDEX;
}
void st_acc(inout St s, A v, int64_t k) {
  bool vn = A_ISNAN(v), sn = A_ISNAN(s.x);
  bool take;
  if (vn || sn) take = vn && (!sn || k < s.i);
#ifdef OP_ARGMAX
  else take = v > s.x || (v == s.x && k < s.i);
#else
  else take = v < s.x || (v == s.x && k < s.i);
#endif
  if (take) { s.x = v; s.i = k; }
}
void st_comb(inout St s, St t) { if (t.i != NO_INDEX) st_acc(s, t.x, t.i); }
// st_acc for elements in increasing k (an invocation's own, in
// accumulate()): a later element never wins a tie, and a NaN held stays.
void st_acc_next(inout St s, A v, int64_t k) {
#ifdef OP_ARGMAX
  bool take = A_ISNAN(v) || v > s.x;
#else
  bool take = A_ISNAN(v) || v < s.x;
#endif
  if (s.i == NO_INDEX || (take && !A_ISNAN(s.x))) { s.x = v; s.i = k; }
}
#define HAS_ST_ACC_NEXT
#elif defined(OP_WELFORD)
// (count, mean, M2); Chan et al. to combine.
void st_init(inout St s) { s.x = 0.0; s.y = 0.0; s.z = 0.0; }
void st_acc(inout St s, A v, int64_t k) {
  s.x += 1.0;
  float dl = v - s.y;
  s.y += dl / s.x;
  s.z += dl * (v - s.y);
}
void st_comb(inout St s, St t) {
  if (t.x == 0.0) return;
  if (s.x == 0.0) { s = t; return; }
  float n = s.x + t.x;
  float dl = t.y - s.y;
  s.y += dl * (t.x / n);
  s.z += t.z + dl * dl * (s.x * t.x / n);
  s.x = n;
}
float welford_var(St s) { return s.z / max(s.x - p.param, 0.0); }
#elif defined(OP_NORM)
// p.param: inf (max |v|), -inf (min |v|), 0 (count of non-zeros), else sum of |v|^p.
void st_init(inout St s) { s.x = isinf(p.param) && p.param < 0.0 ? A_HIGHEST : 0.0; }
void st_acc(inout St s, A v, int64_t k) {
  float a = abs(v);
  if (isinf(p.param)) {
    if (isnan(a) || (p.param > 0.0 ? a > s.x : a < s.x)) s.x = a;
  } else if (p.param == 0.0) {
    s.x += a != 0.0 ? 1.0 : 0.0;
  } else if (p.param == 1.0) {
    s.x += a;
  } else if (p.param == 2.0) {
    s.x += a * a;
  } else {
    s.x += pow(a, p.param);
  }
}
void st_comb(inout St s, St t) {
  if (isinf(p.param)) {
    if (isnan(t.x) || (p.param > 0.0 ? t.x > s.x : t.x < s.x)) s.x = t.x;
  } else {
    s.x += t.x;
  }
}
float norm_fin(St s) {
  if (isinf(p.param) || p.param == 0.0 || p.param == 1.0) return s.x;
  if (p.param == 2.0) return sqrt(s.x);
  return pow(s.x, 1.0 / p.param);
}
#elif defined(OP_LSE)
// (max, sum of exp(v - max)).
float lse_ex(float a, float m) { return a == m ? 1.0 : exp(a - m); }
void lse_add(inout St s, float m2, float s2) {
  if (isnan(s.x)) return;
  if (isnan(m2)) { s.x = m2; return; }
  if (m2 == A_LOWEST || s2 == 0.0) return;
  if (s.x == A_LOWEST) { s.x = m2; s.y = s2; return; }
  float m = max(s.x, m2);
  s.y = s.y * lse_ex(s.x, m) + s2 * lse_ex(m2, m);
  s.x = m;
}
void st_init(inout St s) { s.x = A_LOWEST; s.y = 0.0; }
void st_acc(inout St s, A v, int64_t k) { lse_add(s, v, 1.0); }
void st_comb(inout St s, St t) { lse_add(s, t.x, t.y); }
float lse_fin(St s) {
  if (isnan(s.x) || s.x == A_LOWEST || isinf(s.x)) return s.x;
  return s.x + log(s.y);
}
#elif defined(OP_ALL)
void st_init(inout St s) { s.i = 1l; }
void st_acc(inout St s, A v, int64_t k) { if (v == A(0)) s.i = 0l; }
void st_comb(inout St s, St t) { if (t.i == 0l) s.i = 0l; }
#elif defined(OP_ANY)
void st_init(inout St s) { s.i = 0l; }
void st_acc(inout St s, A v, int64_t k) { if (v != A(0)) s.i = 1l; }
void st_comb(inout St s, St t) { if (t.i != 0l) s.i = 1l; }
#elif defined(OP_COUNT)
void st_init(inout St s) { s.i = 0l; }
void st_acc(inout St s, A v, int64_t k) { if (v != A(0)) s.i += 1l; }
void st_comb(inout St s, St t) { s.i += t.i; }
#endif

// Partial states (p.s > 1) are stored field by field, only the fields the op
// uses (ST_FIELDS): a sum's state takes 4 bytes, not the 24 of St. Each
// field is an array of p.n * p.s; i first (8-byte aligned), then x, y, z.
#ifdef ACC_FLOAT
#define ST_ABYTES 4ul
layout(buffer_reference, std430, buffer_reference_align = 4) coherent buffer StatesA { A v[]; };
#else
#define ST_ABYTES 8ul
layout(buffer_reference, std430, buffer_reference_align = 8) coherent buffer StatesA { A v[]; };
#endif

StatesA stField(uint f) {  // 0 x, 1 y, 2 z
  uint64_t m = uint64_t(p.n) * uint64_t(p.s);
  return StatesA(uint64_t(p.st) + 8ul * m + uint64_t(f) * m * ST_ABYTES);
}

void st_store(uint k, St s) {
#if (ST_FIELDS & 1)
  stField(0u).v[k] = s.x;
#endif
#if (ST_FIELDS & 2)
  stField(1u).v[k] = s.y;
#endif
#if (ST_FIELDS & 4)
  stField(2u).v[k] = s.z;
#endif
#if (ST_FIELDS & 8)
  p.st.v[k] = s.i;
#endif
}

St st_load(uint k) {
  St t;
  t.x = A(0); t.y = A(0); t.z = A(0); t.i = 0l;
#if (ST_FIELDS & 1)
  t.x = stField(0u).v[k];
#endif
#if (ST_FIELDS & 2)
  t.y = stField(1u).v[k];
#endif
#if (ST_FIELDS & 4)
  t.z = stField(2u).v[k];
#endif
#if (ST_FIELDS & 8)
  t.i = p.st.v[k];
#endif
  return t;
}

St st_new() {
  St s;
  s.x = A(0); s.y = A(0); s.z = A(0); s.i = 0l;
  st_init(s);
  return s;
}

#ifndef HAS_ST_ACC_NEXT
#define st_acc_next st_acc
#endif

// ---------------------------------------------------------------- addressing
uint outOffset(uint o) {
  uint off = 0u;
  for (int k = int(p.outRank) - 1; k >= 0; --k) {
    uint size = p.meta.v[k];
    off += (o % size) * p.meta.v[p.outRank + uint(k)];
    o /= size;
  }
  return off;
}

uint redOffset(uint r) {
  uint at = 2u * p.outRank;
  uint off = 0u;
  for (int k = int(p.redRank) - 1; k >= 0; --k) {
    uint size = p.meta.v[at + uint(k)];
    off += (r % size) * p.meta.v[at + p.redRank + uint(k)];
    r /= size;
  }
  return off;
}

// Accumulates reduced elements k0 + lane, k0 + lane + w, ... (< k1) of the
// output at `base`, in increasing k. UNROLL loads are issued before their
// values are used.
void accumulate(inout St s, uint base, uint k0, uint k1, uint lane, uint w) {
  uint k = k0 + lane;
  uint span = (UNROLL - 1u) * w;
#ifdef LOADA4
  if (p.wide != 0u) {
    // Groups of 4 elements: invocation `lane` takes groups lane, lane + w, ...,
    // each element still in increasing k.
    uint b4 = base >> 2, q = (k0 >> 2) + lane, q1 = k1 >> 2;
    for (; q + span < q1; q += UNROLL * w) {
      vec4 v[UNROLL];
      [[unroll]] for (uint u = 0u; u < UNROLL; ++u) v[u] = LOADA4(b4 + q + u * w);
      [[unroll]] for (uint u = 0u; u < UNROLL; ++u) {
        [[unroll]] for (uint e = 0u; e < 4u; ++e) st_acc_next(s, v[u][e], int64_t(4u * (q + u * w) + e));
      }
    }
    for (; q < q1; q += w) {
      vec4 v = LOADA4(b4 + q);
      [[unroll]] for (uint e = 0u; e < 4u; ++e) st_acc_next(s, v[e], int64_t(4u * q + e));
    }
    return;
  }
#endif
  if (p.redRank == 1u) {
    uint rs = p.meta.v[2u * p.outRank + 1u];
    for (; k + span < k1; k += UNROLL * w) {
      A v[UNROLL];
      [[unroll]] for (uint u = 0u; u < UNROLL; ++u) v[u] = LOADA(base + (k + u * w) * rs);
      [[unroll]] for (uint u = 0u; u < UNROLL; ++u) st_acc_next(s, v[u], int64_t(k + u * w));
    }
    for (; k < k1; k += w) st_acc_next(s, LOADA(base + k * rs), int64_t(k));
  } else {
    for (; k + span < k1; k += UNROLL * w) {
      A v[UNROLL];
      [[unroll]] for (uint u = 0u; u < UNROLL; ++u) v[u] = LOADA(base + redOffset(k + u * w));
      [[unroll]] for (uint u = 0u; u < UNROLL; ++u) st_acc_next(s, v[u], int64_t(k + u * w));
    }
    for (; k < k1; k += w) st_acc_next(s, LOADA(base + redOffset(k)), int64_t(k));
  }
}

// Output o's partial states, this invocation's share of them (`lane` of
// `w`), in order, CUNROLL loaded before they are combined.
St combineSplits(uint o, uint lane, uint w) {
  St s = st_new();
  // The loads of one state's fields, and of the states after it, wait
  // together.
  uint j = lane;
  for (; j + (CUNROLL - 1u) * w < p.s; j += CUNROLL * w) {
    St t[CUNROLL];
    [[unroll]] for (uint u = 0u; u < CUNROLL; ++u) t[u] = st_load((j + u * w) * p.n + o);
    [[unroll]] for (uint u = 0u; u < CUNROLL; ++u) st_comb(s, t[u]);
  }
  for (; j < p.s; j += w) st_comb(s, st_load(j * p.n + o));
  return s;
}

// One work item's own share: item `item` of pass 1 (output o's split sp) or
// pass 2 (output o), taken by `w` invocations of which this is `lane`.
St work(uint item, uint lane, uint w, out uint o, out uint sp) {
#if PASS == 1
  St s = st_new();
  sp = item / p.n;
  o = item % p.n;
  uint k0 = sp * p.chunk;
  accumulate(s, outOffset(o), k0, min(p.d, k0 + p.chunk), lane, w);
  return s;
#else
  sp = 0u;
  o = item;
  return combineSplits(o, lane, w);
#endif
}

void emitFinal(uint o, St s) {
  STORE_y(o, FIN_Y(s));
#ifdef HAS_Z
  STORE_z(o, FIN_Z(s));
#endif
}

void emit(uint o, uint sp, St s) {
  if (PASS == 2 || p.final_ != 0u) emitFinal(o, s);
  else st_store(sp * p.n + o, s);
}

// ---------------------------------------------------------------- team combines
#if TEAM != TEAM_THREAD
A shuffleA(A v, uint m) {
#ifdef ACC_FLOAT
  return subgroupShuffleXor(v, m);
#else
  return int64_t(pack64(subgroupShuffleXor(unpack32(uint64_t(v)), m)));
#endif
}

St shuffleSt(St s, uint m) {
  St t = s;
#if (ST_FIELDS & 1)
  t.x = shuffleA(s.x, m);
#endif
#if (ST_FIELDS & 2)
  t.y = shuffleA(s.y, m);
#endif
#if (ST_FIELDS & 4)
  t.z = shuffleA(s.z, m);
#endif
#if (ST_FIELDS & 8)
  t.i = int64_t(pack64(subgroupShuffleXor(unpack32(uint64_t(s.i)), m)));
#endif
  return t;
}

// Butterfly over the subgroup; invocation 0 ends with the whole.
St subgroupCombine(St s) {
  for (uint m = 1u; m < gl_SubgroupSize; m <<= 1) st_comb(s, shuffleSt(s, m));
  return s;
}
#endif

#if TEAM == TEAM_GROUP
shared St sh[WG_SIZE];  // one per subgroup
shared bool shLast;     // this workgroup stored its output's last partial state

// Subgroups, then their results in subgroup 0; invocation 0 ends with the whole.
St groupCombine(St s) {
  s = subgroupCombine(s);
  if (gl_SubgroupInvocationID == 0u) sh[gl_SubgroupID] = s;
  barrier();
  St t = st_new();
  if (gl_SubgroupID == 0u) {
    for (uint j = gl_SubgroupInvocationID; j < gl_NumSubgroups; j += gl_SubgroupSize) st_comb(t, sh[j]);
    t = subgroupCombine(t);
  }
  barrier();  // sh is reused by the next item
  return t;
}
#endif

void main() {
  uint wg = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
  uint wgs = gl_NumWorkGroups.x * gl_NumWorkGroups.y;
#if PASS == 1
  uint total = p.n * p.s;
#else
  uint total = p.n;
#endif
  uint o, sp;
#if TEAM == TEAM_GROUP
  for (uint item = wg; item < total; item += wgs) {
    St s = groupCombine(work(item, gl_LocalInvocationID.x, WG_SIZE, o, sp));
    if (gl_LocalInvocationID.x == 0u) emit(o, sp, s);
#if PASS == 1
    if (uint64_t(p.counters) != 0ul) {
      // The state stored, then counted (a release); the workgroup that counts
      // the last one sees every other (an acquire) and combines them.
      if (gl_LocalInvocationID.x == 0u) {
        memoryBarrierBuffer();
        shLast = atomicAdd(p.counters.v[o], 1u) == p.s - 1u;
        memoryBarrierBuffer();
      }
      barrier();
      if (shLast) {
        memoryBarrierBuffer();
        St t = groupCombine(combineSplits(o, gl_LocalInvocationID.x, WG_SIZE));
        if (gl_LocalInvocationID.x == 0u) emitFinal(o, t);
      }
      barrier();  // shLast is reused by the next item
    }
#endif
  }
#elif TEAM == TEAM_SUBGROUP
  for (uint item = wg * gl_NumSubgroups + gl_SubgroupID; item < total; item += wgs * gl_NumSubgroups) {
    St s = subgroupCombine(work(item, gl_SubgroupInvocationID, gl_SubgroupSize, o, sp));
    if (gl_SubgroupInvocationID == 0u) emit(o, sp, s);
  }
#else
  for (uint item = wg * WG_SIZE + gl_LocalInvocationID.x; item < total; item += wgs * WG_SIZE) {
    St s = work(item, 0u, 1u, o, sp);
    emit(o, sp, s);
  }
#endif
}
