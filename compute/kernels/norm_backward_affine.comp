// Weight and bias gradients of layer_norm, rms_norm and group_norm: the
// input viewed as [outer, A, inner], affine index a (a normalized element of
// layer/rms norm, a channel of group norm), and
//   dw[a] = sum over (o, i) of g xhat,   db[a] = sum over (o, i) of g
// where element (o, a, i) belongs to statistics row o * groups + a / cpg
// (norm_backward.comp's STATS). Two kernels, no atomics: the default one
// sums share c of the (o, i) range for each a into part[c][a]; FINAL sums
// the shares of each a, a workgroup per a. Loads stay coalesced: with inner 1 (layer/rms
// norm) adjacent invocations take adjacent a and share c is a run of rows;
// otherwise adjacent invocations take adjacent c of one a, and share c is
// every chunks-th (o, i), so they read adjacent i. Needs norm_rows.glsl.
layout(local_size_x = WG) in;
layout(buffer_reference, std430, buffer_reference_align = 4) buffer Floats { float v[]; };
layout(push_constant) uniform Push {
  g_ref g;
  x_ref x;
  dw_ref dw;
  db_ref db;
  Floats part;   // [2][chunks][A]: weight sums, then bias sums
  Floats stats;  // (mean, rstd) per statistics row
  uint A;
  uint inner;
  uint items;    // outer * inner
  uint groups;
  uint cpg;      // affine indices per group
  uint chunks;
  uint chunkLen;  // inner 1: rows per share
} p;

void main() {
#ifdef FINAL
  FOR_ROWS(a, p.A) {
    float sw = 0.0, sb = 0.0;
    for (uint c = LANE; c < p.chunks; c += TEAM) {
      sw += p.part.v[c * p.A + a];
      sb += p.part.v[(p.chunks + c) * p.A + a];
    }
    sw = teamSum(sw);
    sb = teamSum(sb);
    if (LANE == 0u) {
#ifdef HAS_DW
      STORE_dw(a, sw);
#endif
#ifdef HAS_DB
      STORE_db(a, sb);
#endif
    }
  }
#else
  uint stride = gl_NumWorkGroups.x * uint(WG);
  bool rows = p.inner == 1u;
  for (uint t = gl_GlobalInvocationID.x; t < p.chunks * p.A; t += stride) {
    uint a = rows ? t % p.A : t / p.chunks, c = rows ? t / p.A : t % p.chunks;
    uint first = rows ? c * p.chunkLen : c, end = rows ? min(p.items, (c + 1u) * p.chunkLen) : p.items;
    uint step = rows ? 1u : p.chunks;
    float sw = 0.0, sb = 0.0;
    for (uint j = first; j < end; j += step) {
      uint o = j / p.inner, i = j % p.inner;
      uint e = (o * p.A + a) * p.inner + i;
      uint row = o * p.groups + a / p.cpg;
      float gk = LOAD_g(e);
      sw += gk * (LOAD_x(e) - p.stats.v[2u * row]) * p.stats.v[2u * row + 1u];
      sb += gk;
    }
    p.part.v[c * p.A + a] = sw;
    p.part.v[(p.chunks + c) * p.A + a] = sb;
  }
#endif
}
