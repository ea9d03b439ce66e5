// softmax / log_softmax backward over one dim of a contiguous tensor viewed
// as [outer, d, inner]; a row is one (outer, inner) pair. From the forward
// output y and its gradient g:
//   softmax:      dx = y (g - sum(g y))
//   log_softmax:  dx = g - exp(y) sum(g)       (LOG)
// Needs norm_rows.glsl (row helpers) spliced ahead.
layout(local_size_x = WG) in;
layout(push_constant) uniform Push {
  dx_ref dx;
  g_ref g;
  y_ref y;
  uint rows;
  uint d;
  uint inner;
} p;

void main() {
  FOR_ROWS(row, p.rows) {
    uint base = (row / p.inner) * p.d * p.inner + row % p.inner;
    float s = 0.0;
    for (uint k = LANE; k < p.d; k += TEAM) {
      uint i = base + k * p.inner;
#ifdef LOG
      s += LOAD_g(i);
#else
      s += LOAD_g(i) * LOAD_y(i);
#endif
    }
    s = teamSum(s);
    for (uint k = LANE; k < p.d; k += TEAM) {
      uint i = base + k * p.inner;
#ifdef LOG
      STORE_dx(i, LOAD_g(i) - exp(LOAD_y(i)) * s);
#else
      STORE_dx(i, LOAD_y(i) * (LOAD_g(i) - s));
#endif
    }
  }
}
