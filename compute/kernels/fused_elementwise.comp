// Fused elementwise kernel: several elementwise calls computed per element in
// registers, only the results needed elsewhere written (template_fused.cpp).
// Defined by the generator: INPUTS (tensor inputs x0.., at most 8),
// LOAD_DENSE(e, i) and LOAD_AT(e, idx) (every input's element into e[]), and
// FUSED_BODY, the calls over e[] (each one `T v<k>; { T a = ...; v<k> = ...; }`)
// followed by the stores to y0..y3.
// Meta: shape[rank], then one stride row per input, then the scalars (4 words
// each, as elementwise.comp's).
layout(local_size_x = 256) in;
layout(push_constant) uniform Push {
  x0_ref x0;
  x1_ref x1;
  x2_ref x2;
  x3_ref x3;
  x4_ref x4;
  x5_ref x5;
  x6_ref x6;
  x7_ref x7;
  y0_ref y0;
  y1_ref y1;
  y2_ref y2;
  y3_ref y3;
  Meta meta;
  uint n;
  uint rank;
  uint dense;   // 1: every input is contiguous with the outputs' shape
  uint scalars; // word offset of the scalars in meta
} p;

#define SCALAR_F(k) uintBitsToFloat(p.meta.v[p.scalars + 4u * (k)])

// `f` rounded to the nearest f16 value (ties to even), as a store to an f16
// tensor rounds it, in integer operations: float(float16_t(f)) is not kept
// by every compiler (one drops the round trip).
float round_f16(float f) {
  float a = abs(f);
  if (isnan(f)) return f;
  if (a >= 65520.0) return f > 0.0 ? uintBitsToFloat(0x7f800000u) : uintBitsToFloat(0xff800000u);
  if (a < 6.103515625e-05) return roundEven(f * 16777216.0) * 5.9604644775390625e-08;  // subnormal: steps of 2^-24
  uint u = floatBitsToUint(f);
  u += 0xfffu + ((u >> 13) & 1u);  // 23 mantissa bits to 10, ties to even
  return uintBitsToFloat(u & 0xffffe000u);
}

void fused_element(uint i, T e[INPUTS]) {
  FUSED_BODY
}

// As elementwise.comp: the dense loop keeps UNROLL elements' loads in
// flight, each workgroup on a contiguous chunk of UNROLL x 256 per pass.
#define UNROLL 4u
#define CHUNK (UNROLL * 256u)

void main() {
  if (p.dense != 0u) {
    for (uint i0 = gl_WorkGroupID.x * CHUNK + gl_LocalInvocationID.x; i0 < p.n; i0 += gl_NumWorkGroups.x * CHUNK) {
      T ev[UNROLL][INPUTS];
      for (uint j = 0u; j < UNROLL; ++j) {
        uint i = i0 + j * 256u;
        if (i < p.n) {
          LOAD_DENSE(ev[j], i);
        }
      }
      for (uint j = 0u; j < UNROLL; ++j) {
        uint i = i0 + j * 256u;
        if (i < p.n) fused_element(i, ev[j]);
      }
    }
    return;
  }
  uint stride = gl_NumWorkGroups.x * 256u;
  for (uint i = gl_GlobalInvocationID.x; i < p.n; i += stride) {
    uint idx[INPUTS];
    for (uint k = 0u; k < INPUTS; ++k) idx[k] = 0u;
    uint rem = i;
    uint r = p.rank;
    for (int d = int(r) - 1; d >= 0; --d) {
      uint size = p.meta.v[d];
      uint at = rem % size;
      rem /= size;
      for (uint k = 0u; k < INPUTS; ++k) idx[k] += at * p.meta.v[(k + 1u) * r + uint(d)];
    }
    T e[INPUTS];
    LOAD_AT(e, idx);
    fused_element(i, e);
  }
}
