// Reduction template: every reduction (sum ... count_nonzero) is this file
// with one OP_* block selected. Defined by the generator (template_reduce.cpp):
//   A          accumulator type: float (float inputs) or int64_t (int, bool)
//   LOADA(i)   element i of x converted to A
//   OP_*       which accumulate / combine / finalize to use
//   FIN_Y(s) / FIN_Z(s)  the outputs' values from a final state (HAS_Z: two outputs)
//   PASS       1: reduce the input; 2: combine the partial states of pass 1
//   ROWS       1: a workgroup per work item (tree in shared memory); 0: a thread per item
// The input is viewed as outputs x reduced elements: out dims (sizes, input
// strides) then reduced dims (sizes, input strides) in p.meta. Pass 1 splits
// each output's d elements into p.s chunks of p.chunk; with p.s > 1 it writes
// partial states (index sp * n + o) that pass 2 combines and finalizes.
layout(local_size_x = 256) in;

struct St {
  A x;
  A y;
  A z;
  int64_t i;
};
layout(buffer_reference, std430, buffer_reference_align = 8) buffer States { St v[]; };

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
} p;

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

St st_new() {
  St s;
  s.x = A(0); s.y = A(0); s.z = A(0); s.i = 0l;
  st_init(s);
  return s;
}

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
  if (p.redRank == 1u) return r * p.meta.v[at + 1u];
  uint off = 0u;
  for (int k = int(p.redRank) - 1; k >= 0; --k) {
    uint size = p.meta.v[at + uint(k)];
    off += (r % size) * p.meta.v[at + p.redRank + uint(k)];
    r /= size;
  }
  return off;
}

void emit(uint o, uint sp, St s) {
  if (PASS == 2 || p.final_ != 0u) {
    STORE_y(o, FIN_Y(s));
#ifdef HAS_Z
    STORE_z(o, FIN_Z(s));
#endif
  } else {
    p.st.v[sp * p.n + o] = s;
  }
}

#if ROWS
shared St sh[256];
#endif

void main() {
  uint lid = gl_LocalInvocationID.x;
  uint wg = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
  uint wgs = gl_NumWorkGroups.x * gl_NumWorkGroups.y;
#if PASS == 1
  uint total = p.n * p.s;
#else
  uint total = p.n;
#endif
#if ROWS
  // A workgroup per item: output o's split sp (pass 1) or output o (pass 2).
  for (uint item = wg; item < total; item += wgs) {
    St s = st_new();
#if PASS == 1
    uint sp = item / p.n, o = item % p.n;
    uint k0 = sp * p.chunk, k1 = min(p.d, k0 + p.chunk);
    uint base = outOffset(o);
    for (uint k = k0 + lid; k < k1; k += 256u) st_acc(s, LOADA(base + redOffset(k)), int64_t(k));
#else
    uint sp = 0u, o = item;
    for (uint j = lid; j < p.s; j += 256u) st_comb(s, p.st.v[j * p.n + o]);
#endif
    sh[lid] = s;
    barrier();
    if (lid < 16u) {
      St t = sh[lid * 16u];
      for (uint j = 1u; j < 16u; ++j) st_comb(t, sh[lid * 16u + j]);
      sh[lid * 16u] = t;
    }
    barrier();
    if (lid == 0u) {
      St t = sh[0];
      for (uint j = 1u; j < 16u; ++j) st_comb(t, sh[j * 16u]);
      emit(o, sp, t);
    }
    barrier();
  }
#else
  // A thread per item; neighbouring threads take neighbouring outputs.
  for (uint item = wg * 256u + lid; item < total; item += wgs * 256u) {
    St s = st_new();
#if PASS == 1
    uint sp = item / p.n, o = item % p.n;
    uint k0 = sp * p.chunk, k1 = min(p.d, k0 + p.chunk);
    uint base = outOffset(o);
    for (uint k = k0; k < k1; ++k) st_acc(s, LOADA(base + redOffset(k)), int64_t(k));
#else
    uint sp = 0u, o = item;
    for (uint j = 0u; j < p.s; ++j) st_comb(s, p.st.v[j * p.n + o]);
#endif
    emit(o, sp, s);
  }
#endif
}
