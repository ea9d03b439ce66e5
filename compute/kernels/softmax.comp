// softmax / log_softmax over one dim of a contiguous tensor viewed as
// [outer, d, inner]; a row is one (outer, inner) pair. LOG selects
// log_softmax. Needs norm_rows.glsl (row helpers) spliced ahead.
//
// A workgroup's row of up to TEAM * CACHE elements is read once into
// registers (max, exp and sum from there, then one write): one read and one
// write per element, as a fused softmax should. Longer rows take three
// passes over memory.
layout(local_size_x = WG) in;
layout(push_constant) uniform Push {
  y_ref y;
  x_ref x;
  uint rows;
  uint d;
  uint inner;
} p;

#define CACHE 32u

void main() {
  FOR_ROWS(row, p.rows) {
    uint base = (row / p.inner) * p.d * p.inner + row % p.inner;
#ifndef PER_THREAD
    if (p.d <= TEAM * CACHE) {  // uniform: every invocation takes the same branch
      float v[CACHE];
      float m = NEG_INF;
      for (uint j = 0u; j < CACHE; ++j) {
        uint k = LANE + j * TEAM;
        v[j] = k < p.d ? LOAD_x(base + k * p.inner) : NEG_INF;
        m = max(m, v[j]);
      }
      m = teamMax(m);
      float s = 0.0;
      for (uint j = 0u; j < CACHE; ++j) {
#ifdef LOG
        v[j] -= m;
        s += exp(v[j]);  // padding: exp(-inf) = 0
#else
        v[j] = exp(v[j] - m);
        s += v[j];
#endif
      }
      s = teamSum(s);
#ifdef LOG
      float shift = log(s);
      for (uint j = 0u; j < CACHE; ++j) {
        uint k = LANE + j * TEAM;
        if (k < p.d) STORE_y(base + k * p.inner, v[j] - shift);
      }
#else
      float inv = 1.0 / s;
      for (uint j = 0u; j < CACHE; ++j) {
        uint k = LANE + j * TEAM;
        if (k < p.d) STORE_y(base + k * p.inner, v[j] * inv);
      }
#endif
      continue;
    }
#endif
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
