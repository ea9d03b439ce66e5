// The losses. Each item i (an element, or a sample of nll_loss /
// cross_entropy) has a loss l and a weight w (its share of the 'mean'
// denominator). REDUCE: each workgroup writes its (sum l, sum w) pair to
// `partial`, and the FINAL kernel (one workgroup) turns the pairs into the
// scalar: sum, sum / sum w (mean) or sum / divisor (batchmean). Otherwise
// y[i] = l. KIND: 0 mse, 1 l1, 2 smooth_l1, 3 binary_cross_entropy,
// 4 binary_cross_entropy_with_logits, 5 kl_div, 6 nll_loss, 7 cross_entropy.
// Meta (KIND 3, 4): rank, shape[rank], weight strides[rank], pos_weight
// strides[rank] (0 where broadcast). Needs norm_rows.glsl.
layout(local_size_x = WG) in;
layout(buffer_reference, std430, buffer_reference_align = 4) buffer Partials { float v[]; };
layout(push_constant) uniform Push {
  y_ref y;
  x_ref x;
  t_ref t;
  w_ref w;
  pw_ref pw;
  Partials partial;
  Meta meta;
  ErrorWords err;
  uint n;        // items (FINAL: partial pairs)
  uint classes;  // C (nll_loss, cross_entropy)
  uint inner;    // D: positions per sample after the class dim
  int ignoreIndex;
  float s0;      // smooth_l1: beta; cross_entropy: label_smoothing
  float divisor; // FINAL: batchmean divisor
} p;

float log1p_f(float z) {
  float u = 1.0 + z;
  return u == 1.0 ? z : log(u) * (z / (u - 1.0));
}

#if KIND == 3 || KIND == 4
uint bcast(uint i, uint which) {
  uint rank = p.meta.v[0];
  uint off = 0u;
  for (int k = int(rank) - 1; k >= 0; --k) {
    uint size = p.meta.v[1u + uint(k)];
    off += (i % size) * p.meta.v[1u + (which + 1u) * rank + uint(k)];
    i /= size;
  }
  return off;
}
#endif

void item(uint i, out float l, out float w) {
  w = 1.0;
#if KIND <= 5
  float x = LOAD_x(i), t = LOAD_t(i);
#endif
#if KIND == 0
  l = (x - t) * (x - t);
#elif KIND == 1
  l = abs(x - t);
#elif KIND == 2
  float d = abs(x - t);
  l = d < p.s0 ? 0.5 * d * d / p.s0 : d - 0.5 * p.s0;
#elif KIND == 3
  l = -(t * max(log(x), -100.0) + (1.0 - t) * max(log(1.0 - x), -100.0));
#ifdef HAS_W
  l *= LOAD_w(bcast(i, 0u));
#endif
#elif KIND == 4
  float sp = log1p_f(exp(-abs(x))) + max(-x, 0.0);  // log(1 + exp(-x))
#ifdef HAS_PW
  float lw = (LOAD_pw(bcast(i, 1u)) - 1.0) * t + 1.0;
  l = (1.0 - t) * x + lw * sp;
#else
  l = (1.0 - t) * x + sp;
#endif
#ifdef HAS_W
  l *= LOAD_w(bcast(i, 0u));
#endif
#elif KIND == 5
#ifdef LOG_TARGET
  l = exp(t) * (t - x);
#else
  l = (t > 0.0 ? t * log(t) : (t == 0.0 ? 0.0 : t * log(t))) - t * x;
#endif
#else
  // nll_loss / cross_entropy: sample i = (n, pos); input element (n, c, pos).
  uint n = i / p.inner, pos = i % p.inner;
  uint base = n * p.classes * p.inner + pos;
  // No int -> int64 conversions: lavapipe does not sign-extend them reliably.
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
  if (small && c == p.ignoreIndex) { l = 0.0; w = 0.0; return; }
  if (!small || c < 0 || uint(c) >= p.classes) {
    if (atomicCompSwap(p.err.v[0], 0u, 1u) == 0u) {
      p.err.v[1] = lo;
      p.err.v[2] = hi;
    }
    l = 0.0; w = 0.0; return;
  }
  uint ci = uint(c);
#ifdef HAS_W
  w = LOAD_w(ci);
#endif
#if KIND == 6
  l = -w * LOAD_x(base + ci * p.inner);
#else
  float m = NEG_INF;
  for (uint k = 0u; k < p.classes; ++k) m = max(m, LOAD_x(base + k * p.inner));
  float s = 0.0;
  for (uint k = 0u; k < p.classes; ++k) s += exp(LOAD_x(base + k * p.inner) - m);
  float lse = m + log(s);
  l = -w * (LOAD_x(base + ci * p.inner) - lse);
  if (p.s0 > 0.0) {
    float sm = 0.0;
    for (uint k = 0u; k < p.classes; ++k) {
#ifdef HAS_W
      sm -= LOAD_w(k) * (LOAD_x(base + k * p.inner) - lse);
#else
      sm -= LOAD_x(base + k * p.inner) - lse;
#endif
    }
    l = (1.0 - p.s0) * l + p.s0 / float(p.classes) * sm;
  }
#endif
#endif
}

void main() {
#ifdef FINAL
  float s = 0.0, sw = 0.0;
  for (uint k = LANE; k < p.n; k += TEAM) { s += p.partial.v[2u * k]; sw += p.partial.v[2u * k + 1u]; }
  s = teamSum(s);
  sw = teamSum(sw);
  if (LANE == 0u) {
#if FINAL == 0
    STORE_y(0u, s);
#elif FINAL == 1
    STORE_y(0u, s / sw);
#else
    STORE_y(0u, s / p.divisor);
#endif
  }
#else
  uint stride = gl_NumWorkGroups.x * uint(WG);
  float acc = 0.0, accw = 0.0;
  for (uint i = gl_GlobalInvocationID.x; i < p.n; i += stride) {
    float l, w;
    item(i, l, w);
#ifdef REDUCE
    acc += l;
    accw += w;
#else
    STORE_y(i, l);
#endif
  }
#ifdef REDUCE
  acc = teamSum(acc);
  accw = teamSum(accw);
  if (LANE == 0u) {
    p.partial.v[2u * gl_WorkGroupID.x] = acc;
    p.partial.v[2u * gl_WorkGroupID.x + 1u] = accw;
  }
#endif
#endif
}
