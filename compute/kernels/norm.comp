// layer_norm, rms_norm, group_norm and batch_norm. A row is the set of
// elements normalized together; element k of row r lives at
//   (k / inner) * outerStride + r * inner + k % inner
// (layer/rms/group: inner = d, outerStride = 0; batch: a row is a channel,
// inner = H*W..., outerStride = C*inner). The affine index of element k is
// the channel r (BATCH) or ((r % groups) * d + k) / affDiv.
// Defines: RMS (no mean), BATCH, EVAL (batch stats from running stats),
// UPDATE (write running stats), HAS_W, HAS_B. Needs norm_rows.glsl.
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

void main() {
  FOR_ROWS(r, p.rows) {
    float mean = 0.0, var;
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
