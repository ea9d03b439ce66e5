// layer_norm, rms_norm, group_norm and batch_norm. A row is the set of
// elements normalized together; element k of row r lives at
//   (k / inner) * outerStride + r * inner + k % inner
// (layer/rms/group: inner = d, outerStride = 0; batch: a row is a channel,
// inner = H*W..., outerStride = C*inner). The affine index of element k is
// the channel r (BATCH) or ((r % groups) * d + k) / affDiv.
// Defines: RMS (no mean), BATCH, EVAL (batch stats from running stats),
// UPDATE (write running stats), HAS_W, HAS_B. Needs norm_rows.glsl.
#extension GL_EXT_control_flow_attributes : require
layout(local_size_x = WG) in;
layout(push_constant) uniform Push {
  y_ref y;
  x_ref x;
  w_ref w;
  b_ref b;
  rm_ref rm;
  rv_ref rv;
  uint rows;
  uint d;
  uint inner;
  uint outerStride;
  uint groups;
  uint affDiv;
  float eps;
  float momentum;
} p;

uint addr(uint r, uint k) { return (k / p.inner) * p.outerStride + r * p.inner + k % p.inner; }

uint affine(uint r, uint k) {
#ifdef BATCH
  return r;
#else
  return ((r % p.groups) * p.d + k) / p.affDiv;
#endif
}

// Rows of at most CACHE elements per invocation, stored whole (layer, rms
// and group norms: element k of row r at r * d + k), are read once into
// registers, not once per pass.
#define CACHE 8u

void main() {
  FOR_ROWS(r, p.rows) {
    float mean = 0.0, var;
#if !defined(EVAL) && !defined(BATCH)
    if (p.outerStride == 0u && p.inner == p.d && p.d <= CACHE * TEAM) {
      const uint base = r * p.d;
      float v[CACHE];
      [[unroll]] for (uint j = 0u; j < CACHE; ++j) {
        uint k = LANE + j * TEAM;
        v[j] = k < p.d ? LOAD_x(base + k) : 0.0;
      }
#ifdef RMS
      float s2 = 0.0;
      [[unroll]] for (uint j = 0u; j < CACHE; ++j) s2 += v[j] * v[j];
      var = teamSum(s2) / float(p.d);
#else
      float s = 0.0;
      [[unroll]] for (uint j = 0u; j < CACHE; ++j) s += v[j];
      mean = teamSum(s) / float(p.d);
      float s2 = 0.0;
      [[unroll]] for (uint j = 0u; j < CACHE; ++j) {
        float t = v[j] - mean;
        if (LANE + j * TEAM < p.d) s2 += t * t;
      }
      var = teamSum(s2) / float(p.d);
#endif
      float rstd = 1.0 / sqrt(var + p.eps);
      [[unroll]] for (uint j = 0u; j < CACHE; ++j) {
        uint k = LANE + j * TEAM;
        if (k >= p.d) break;
        float y = (v[j] - mean) * rstd;
#ifdef HAS_W
        y *= LOAD_w(affine(r, k));
#endif
#ifdef HAS_B
        y += LOAD_b(affine(r, k));
#endif
        STORE_y(base + k, y);
      }
      continue;
    }
#endif
#if defined(EVAL)
    mean = LOAD_rm(r);
    var = LOAD_rv(r);
#elif defined(RMS)
    float s2 = 0.0;
    for (uint k = LANE; k < p.d; k += TEAM) { float v = LOAD_x(addr(r, k)); s2 += v * v; }
    var = teamSum(s2) / float(p.d);
#else
    float s = 0.0;
    for (uint k = LANE; k < p.d; k += TEAM) s += LOAD_x(addr(r, k));
    mean = teamSum(s) / float(p.d);
    float s2 = 0.0;
    for (uint k = LANE; k < p.d; k += TEAM) { float v = LOAD_x(addr(r, k)) - mean; s2 += v * v; }
    var = teamSum(s2) / float(p.d);
#endif
    float rstd = 1.0 / sqrt(var + p.eps);
    for (uint k = LANE; k < p.d; k += TEAM) {
      uint i = addr(r, k);
      float v = (LOAD_x(i) - mean) * rstd;
#ifdef HAS_W
      v *= LOAD_w(affine(r, k));
#endif
#ifdef HAS_B
      v += LOAD_b(affine(r, k));
#endif
      STORE_y(i, v);
    }
#ifdef UPDATE
    if (LANE == 0u) {
      float unbiased = var * float(p.d) / float(p.d - 1u);
      STORE_rm(r, (1.0 - p.momentum) * LOAD_rm(r) + p.momentum * mean);
      STORE_rv(r, (1.0 - p.momentum) * LOAD_rv(r) + p.momentum * unbiased);
    }
#endif
  }
}
