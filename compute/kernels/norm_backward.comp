// Backward of layer_norm, rms_norm, group_norm and batch_norm, row by row in
// norm.comp's layout: element k of row r at addr(r, k), its weight and bias
// at affine(r, k). The row's statistics are recomputed as the forward
// computes them; with xhat = (x - mean) * rstd and dxhat = g * w:
//   batch statistics  dx = rstd (dxhat - mean(dxhat) - xhat mean(dxhat xhat))
//   RMS               dx = rstd (dxhat - xhat mean(dxhat xhat))
//   EVAL              dx = rstd dxhat (running statistics are constants)
// BATCH: a row is a channel, so w is constant along it and the weight and
// bias gradients are the row sums sum(g xhat) and sum(g) (HAS_DW, HAS_DB).
// STATS: writes (mean, rstd) of each row for norm_backward_affine.comp.
// Needs norm_rows.glsl.
layout(local_size_x = WG) in;
layout(buffer_reference, std430, buffer_reference_align = 4) buffer Floats { float v[]; };
layout(push_constant) uniform Push {
  dx_ref dx;
  g_ref g;
  x_ref x;
  w_ref w;
  rm_ref rm;
  rv_ref rv;
  dw_ref dw;
  db_ref db;
  Floats stats;
  uint rows;
  uint d;
  uint inner;
  uint outerStride;
  uint groups;
  uint affDiv;
  float eps;
} p;

uint addr(uint r, uint k) { return (k / p.inner) * p.outerStride + r * p.inner + k % p.inner; }

uint affine(uint r, uint k) {
#ifdef BATCH
  return r;
#else
  return ((r % p.groups) * p.d + k) / p.affDiv;
#endif
}

// dxhat / g: the weight of element k (1 without weight).
float weight(uint r, uint k) {
#ifdef HAS_W
  return LOAD_w(affine(r, k));
#else
  return 1.0;
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
    // sg = sum(dxhat), sgx = sum(dxhat xhat); BATCH: of g instead (w factored out).
    float sg = 0.0, sgx = 0.0;
#ifdef NEED_SUMS
    for (uint k = LANE; k < p.d; k += TEAM) {
      uint i = addr(r, k);
#ifdef BATCH
      float gk = LOAD_g(i);
#else
      float gk = LOAD_g(i) * weight(r, k);
#endif
      sg += gk;
      sgx += gk * (LOAD_x(i) - mean) * rstd;
    }
    sg = teamSum(sg);
    sgx = teamSum(sgx);
#endif
#ifdef BATCH
    float wr = weight(r, 0u);
    float mg = sg * wr / float(p.d), mgx = sgx * wr / float(p.d);
#else
    float mg = sg / float(p.d), mgx = sgx / float(p.d);
#endif
    for (uint k = LANE; k < p.d; k += TEAM) {
      uint i = addr(r, k);
      float dxh = LOAD_g(i) * weight(r, k);
#if defined(EVAL)
      STORE_dx(i, dxh * rstd);
#elif defined(RMS)
      STORE_dx(i, rstd * (dxh - LOAD_x(i) * rstd * mgx));
#else
      STORE_dx(i, rstd * (dxh - mg - (LOAD_x(i) - mean) * rstd * mgx));
#endif
    }
    if (LANE == 0u) {
#ifdef HAS_DW
      STORE_dw(r, sgx);
#endif
#ifdef HAS_DB
      STORE_db(r, sg);
#endif
#ifdef STATS
      p.stats.v[2u * r] = mean;
      p.stats.v[2u * r + 1u] = rstd;
#endif
    }
  }
}
