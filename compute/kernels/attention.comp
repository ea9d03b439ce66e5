// scaled_dot_product_attention, one workgroup per query row (b, l): the
// row's scores go to this workgroup's slot of `scores` (scratch, S floats),
// then a stable softmax, then out[j] = sum_s p_s v[s, j]. A row with every
// score masked gives zeros. Meta: nb, batch shape[nb], then batch strides
// (elements, 0 where broadcast) of q, k, v and the mask, then the mask's
// strides over L and S. MASK_BOOL / MASK_FLOAT: attn_mask given.
// Needs norm_rows.glsl.
layout(local_size_x = WG) in;
layout(buffer_reference, std430, buffer_reference_align = 4) coherent buffer Scores { float v[]; };
layout(push_constant) uniform Push {
  o_ref o;
  q_ref q;
  k_ref k;
  v_ref v;
  m_ref m;
  Scores scores;
  Meta meta;
  uint rows;
  uint L;
  uint S;
  uint E;
  uint Ev;
  float scale;
  uint causal;
} p;

void main() {
  uint nb = p.meta.v[0];
  uint slot = gl_WorkGroupID.x * p.S;
  FOR_ROWS(row, p.rows) {
    uint b = row / p.L, l = row % p.L;
    uint bq = 0u, bk = 0u, bv = 0u, bm = 0u, rem = b;
    for (int d = int(nb) - 1; d >= 0; --d) {
      uint size = p.meta.v[1u + uint(d)];
      uint idx = rem % size;
      rem /= size;
      bq += idx * p.meta.v[1u + nb + uint(d)];
      bk += idx * p.meta.v[1u + 2u * nb + uint(d)];
      bv += idx * p.meta.v[1u + 3u * nb + uint(d)];
      bm += idx * p.meta.v[1u + 4u * nb + uint(d)];
    }
    uint msL = p.meta.v[1u + 5u * nb], msS = p.meta.v[2u + 5u * nb];
    float mx = NEG_INF;
    for (uint s = LANE; s < p.S; s += TEAM) {
      float sc = NEG_INF;
      if (p.causal == 0u || s <= l) {
        float dot = 0.0;
        for (uint e = 0u; e < p.E; ++e) dot += LOAD_q(bq + l * p.E + e) * LOAD_k(bk + s * p.E + e);
        sc = dot * p.scale;
#if defined(MASK_BOOL)
        if (!RAW_m(bm + l * msL + s * msS)) sc = NEG_INF;
#elif defined(MASK_FLOAT)
        sc += LOAD_m(bm + l * msL + s * msS);
#endif
      }
      p.scores.v[slot + s] = sc;
      mx = max(mx, sc);
    }
    mx = teamMax(mx);
    float sum = 0.0;
    for (uint s = LANE; s < p.S; s += TEAM) {
      float e = mx == NEG_INF ? 0.0 : exp(p.scores.v[slot + s] - mx);
      p.scores.v[slot + s] = e;
      sum += e;
    }
    memoryBarrierBuffer();
    sum = teamSum(sum);
    float inv = sum > 0.0 ? 1.0 / sum : 0.0;
    for (uint j = LANE; j < p.Ev; j += TEAM) {
      float acc = 0.0;
      for (uint s = 0u; s < p.S; ++s) acc += p.scores.v[slot + s] * LOAD_v(bv + s * p.Ev + j);
      STORE_o(row * p.Ev + j, acc * inv);
    }
    memoryBarrierBuffer();
    barrier();
  }
}
