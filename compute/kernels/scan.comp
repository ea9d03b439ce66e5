// Scan template (cumsum, cumprod) over one dim of the input viewed as
// [outer, len, inner]. Defined by the generator (template_scan.cpp):
//   A, LOADA(i)  accumulator type (float or int64_t) and a load converted to it
//   OP_CUMSUM / OP_CUMPROD
//   ROWS  1: inner == 1, a workgroup per row: each thread scans a segment,
//            segment totals are scanned in shared memory, then each segment
//            is rescanned from its carry; 0: a thread per line (coalesced
//            when inner > 1).
layout(local_size_x = 256) in;
layout(push_constant) uniform Push {
  x_ref x;
  y_ref y;
  uint outer;
  uint len;
  uint inner;
} p;

#ifdef OP_CUMSUM
#define ID A(0)
#define OP(a, b) ((a) + (b))
#else
#define ID A(1)
#define OP(a, b) ((a) * (b))
#endif

#if ROWS
shared A tot[256];
#endif

void main() {
  uint lid = gl_LocalInvocationID.x;
  uint wg = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
  uint wgs = gl_NumWorkGroups.x * gl_NumWorkGroups.y;
#if ROWS
  uint seg = (p.len + 255u) / 256u;
  uint start = min(lid * seg, p.len), end = min(start + seg, p.len);
  for (uint row = wg; row < p.outer; row += wgs) {
    uint base = row * p.len;
    A acc = ID;
    for (uint k = start; k < end; ++k) acc = OP(acc, LOADA(base + k));
    tot[lid] = acc;
    barrier();
    if (lid == 0u) {
      A run = ID;
      for (uint j = 0u; j < 256u; ++j) {
        A t = tot[j];
        tot[j] = run;
        run = OP(run, t);
      }
    }
    barrier();
    A c = tot[lid];
    for (uint k = start; k < end; ++k) {
      c = OP(c, LOADA(base + k));
      STORE_y(base + k, c);
    }
    barrier();
  }
#else
  uint lines = p.outer * p.inner;
  for (uint item = wg * 256u + lid; item < lines; item += wgs * 256u) {
    uint o = item / p.inner, i = item % p.inner;
    uint base = o * p.len * p.inner + i;
    A acc = ID;
    for (uint k = 0u; k < p.len; ++k) {
      acc = OP(acc, LOADA(base + k * p.inner));
      STORE_y(base + k * p.inner, acc);
    }
  }
#endif
}
