// multinomial: y[row, s] (i64) drawn from the non-negative weights x[row, :].
// With replacement: one invocation per sample, inverse CDF over the row.
// Without: one invocation per row; the samples are the num_samples smallest
// keys -log(u_j) / w_j (Efraimidis-Spirakis), taken in increasing order, so
// no category repeats within a row.
// Meta: rows, n (categories), num_samples, replacement, seed low, seed high.
// Errors: word 0 = 1 (negative/inf/NaN weight), 2 (zero sum), 3 (too few
// positive weights for sampling without replacement); word 1 = row.
layout(local_size_x = 64) in;
layout(push_constant) uniform Push {
  x_ref x;
  y_ref y;
  Meta meta;
  ErrorWords err;
} p;

void fail(uint code, uint row) {
  p.err.v[1] = row;
  p.err.v[0] = code;
}

void main() {
  uint rows = p.meta.v[0], n = p.meta.v[1], ns = p.meta.v[2];
  bool replacement = p.meta.v[3] != 0u;
  uvec2 key = uvec2(p.meta.v[4], p.meta.v[5]);
  uint items = replacement ? rows * ns : rows;
  for (uint it = gl_GlobalInvocationID.x; it < items; it += gl_NumWorkGroups.x * 64u) {
    uint row = replacement ? it / ns : it;
    uint base = row * n;
    float total = 0.0;
    uint positive = 0u;
    bool bad = false;
    for (uint j = 0u; j < n; ++j) {
      float w = LOAD_x(base + j);
      if (!(w >= 0.0) || isinf(w)) bad = true;
      if (w > 0.0) ++positive;
      total += w;
    }
    if (bad || positive == 0u || (!replacement && positive < ns)) {
      fail(bad ? 1u : positive == 0u ? 2u : 3u, row);
      if (replacement) STORE_y(it, 0l);
      else for (uint s = 0u; s < ns; ++s) STORE_y(row * ns + s, 0l);
      continue;
    }
    if (replacement) {
      uvec4 r = philox4x32_10(uvec4(it, 0u, 1u, 0u), key);
      float u = random_unit(r.x, 24u) * total;
      float cum = 0.0;
      uint pick = 0u;
      for (uint j = 0u; j < n; ++j) {
        float w = LOAD_x(base + j);
        if (w > 0.0) pick = j;  // the last positive weight, should rounding leave u >= cum
        cum += w;
        if (w > 0.0 && u < cum) break;
      }
      STORE_y(it, int64_t(pick));
    } else {
      float prevKey = -1.0;
      int prevJ = -1;
      for (uint s = 0u; s < ns; ++s) {
        float best = uintBitsToFloat(0x7f800000u);
        int bestJ = -1;
        for (uint j = 0u; j < n; ++j) {
          float w = LOAD_x(base + j);
          if (!(w > 0.0)) continue;
          uvec4 r = philox4x32_10(uvec4(base + j, 0u, 2u, 0u), key);
          float k = -log(random_unit_open0(r.x)) / w;
          bool after = k > prevKey || (k == prevKey && int(j) > prevJ);
          bool before = bestJ < 0 || k < best || (k == best && int(j) < bestJ);
          if (after && before) {
            best = k;
            bestJ = int(j);
          }
        }
        STORE_y(row * ns + s, int64_t(bestJ));
        prevKey = best;
        prevJ = bestJ;
      }
    }
  }
}
