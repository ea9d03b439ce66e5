// softmax / log_softmax over one dim of a contiguous tensor viewed as
// [outer, d, inner]; a row is one (outer, inner) pair. LOG selects
// log_softmax. Needs norm_rows.glsl (row helpers) spliced ahead.
layout(local_size_x = WG) in;
layout(push_constant) uniform Push {
  y_ref y;
  x_ref x;
  uint rows;
  uint d;
  uint inner;
} p;

void main() {
  FOR_ROWS(row, p.rows) {
    uint base = (row / p.inner) * p.d * p.inner + row % p.inner;
    float m = NEG_INF;
    for (uint k = LANE; k < p.d; k += TEAM) m = max(m, LOAD_x(base + k * p.inner));
    m = teamMax(m);
    float s = 0.0;
    for (uint k = LANE; k < p.d; k += TEAM) s += exp(LOAD_x(base + k * p.inner) - m);
    s = teamSum(s);
#ifdef LOG
    float lse = m + log(s);
    for (uint k = LANE; k < p.d; k += TEAM) STORE_y(base + k * p.inner, LOAD_x(base + k * p.inner) - lse);
#else
    float inv = 1.0 / s;
    for (uint k = LANE; k < p.d; k += TEAM) STORE_y(base + k * p.inner, exp(LOAD_x(base + k * p.inner) - m) * inv);
#endif
  }
}
