// Gradient of nll_loss (KIND 6) and cross_entropy (KIND 7) for input
// [N, C, d...] (or [C]): sample i = (n, pos), class k at base + k * inner.
// With c the sample's target, w_k the class weights (1 without HAS_W), gi
// the sample's share of the gradient (grad[i] for 'none', grad for 'sum',
// grad / sum of the non-ignored samples' w_c for 'mean') and e the label
// smoothing:
//   nll_loss       dx_k = -gi w_c [k == c]
//   cross_entropy  dx_k = gi ((1 - e) w_c (p_k - [k == c]) + e / C (W p_k - w_k)),
//                  p = softmax over the classes, W = sum of all w_k
// Ignored samples get zeros. TOTAL: per-workgroup sums of the samples' w_c
// into `part` (the 'mean' denominator); the main kernel adds up `partials`
// of them first. Target checks and error words as loss.comp. Needs
// norm_rows.glsl.
layout(local_size_x = WG) in;
layout(buffer_reference, std430, buffer_reference_align = 4) buffer Floats { float v[]; };
layout(push_constant) uniform Push {
  dx_ref dx;
  g_ref g;
  x_ref x;
  t_ref t;
  w_ref w;
  Floats part;
  ErrorWords err;
  uint n;         // samples
  uint classes;   // C
  uint inner;     // positions per sample after the class dim
  int ignoreIndex;
  float smoothing;
  uint scalarGrad;  // 1: grad is 0-d ('mean', 'sum')
  uint partials;    // 'mean': the number of TOTAL sums; 0 otherwise
} p;

// The target class of sample i; -1 when ignored, -2 (and the error words set) when out of range.
int targetOf(uint i) {
#ifdef IDX64
  int64_t c64 = RAW_t(i);
  bool small = c64 >= -2147483647l && c64 <= 2147483647l;
  int c = int(c64);
  uint lo = uint(uint64_t(c64)), hi = uint(uint64_t(c64) >> 32);
#else
  int c = RAW_t(i);
  bool small = true;
  uint lo = uint(c), hi = c < 0 ? 0xffffffffu : 0u;
#endif
  if (small && c == p.ignoreIndex) return -1;
  if (!small || c < 0 || uint(c) >= p.classes) {
    if (atomicCompSwap(p.err.v[0], 0u, 1u) == 0u) {
      p.err.v[1] = lo;
      p.err.v[2] = hi;
    }
    return -2;
  }
  return c;
}

float classWeight(uint k) {
#ifdef HAS_W
  return LOAD_w(k);
#else
  return 1.0;
#endif
}

void main() {
#ifdef TOTAL
  uint stride = gl_NumWorkGroups.x * uint(WG);
  float acc = 0.0;
  for (uint i = gl_GlobalInvocationID.x; i < p.n; i += stride) {
    int c = targetOf(i);
    if (c >= 0) acc += classWeight(uint(c));
  }
  acc = teamSum(acc);
  if (LANE == 0u) p.part.v[gl_WorkGroupID.x] = acc;
#else
  float total = 0.0;
  for (uint k = 0u; k < p.partials; ++k) total += p.part.v[k];
  FOR_ROWS(i, p.n) {
    uint base = (i / p.inner) * p.classes * p.inner + i % p.inner;
    int c = targetOf(i);
    if (c < 0) {
      for (uint k = LANE; k < p.classes; k += TEAM) STORE_dx(base + k * p.inner, 0.0);
      continue;
    }
    float gi = p.scalarGrad != 0u ? LOAD_g(0u) : LOAD_g(i);
    if (p.partials != 0u) gi /= total;
    float wc = classWeight(uint(c));
#if KIND == 6
    for (uint k = LANE; k < p.classes; k += TEAM) STORE_dx(base + k * p.inner, k == uint(c) ? -gi * wc : 0.0);
#else
    float m = NEG_INF;
    for (uint k = LANE; k < p.classes; k += TEAM) m = max(m, LOAD_x(base + k * p.inner));
    m = teamMax(m);
    float s = 0.0, sw = 0.0;
    for (uint k = LANE; k < p.classes; k += TEAM) {
      s += exp(LOAD_x(base + k * p.inner) - m);
      sw += classWeight(k);
    }
    s = teamSum(s);
    sw = teamSum(sw);
    float inv = 1.0 / s, e = p.smoothing, ec = p.smoothing / float(p.classes);
    for (uint k = LANE; k < p.classes; k += TEAM) {
      uint at = base + k * p.inner;
      float pk = exp(LOAD_x(at) - m) * inv;
      float v = (1.0 - e) * wc * (pk - (k == uint(c) ? 1.0 : 0.0)) + ec * (sw * pk - classWeight(k));
      STORE_dx(at, gi * v);
    }
#endif
  }
#endif
}
