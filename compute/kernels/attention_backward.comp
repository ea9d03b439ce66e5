// The softmax step of scaled_dot_product_attention's backward. A row is one
// query (b, l) of the scores [..., L, S] (q k^T * scale, masks already
// applied) and of dp = grad_out v^T. Recomputes the forward's probabilities
// P (CAUSAL keys s > l masked; a row with every score masked gives zeros,
// as the forward) and writes P and dS = P (dp - sum(P dp)).
// Needs norm_rows.glsl.
layout(local_size_x = WG) in;
layout(push_constant) uniform Push {
  pr_ref pr;
  ds_ref ds;
  sc_ref sc;
  dp_ref dp;
  uint rows;
  uint L;
  uint S;
  uint causal;
} p;

void main() {
  FOR_ROWS(row, p.rows) {
    uint l = row % p.L, base = row * p.S;
    uint end = p.causal != 0u ? min(p.S, l + 1u) : p.S;  // keys [0, end) may attend
    float mx = NEG_INF;
    for (uint s = LANE; s < end; s += TEAM) mx = max(mx, LOAD_sc(base + s));
    mx = teamMax(mx);
    float sum = 0.0;
    if (mx != NEG_INF) {
      for (uint s = LANE; s < end; s += TEAM) sum += exp(LOAD_sc(base + s) - mx);
    }
    sum = teamSum(sum);
    float inv = sum > 0.0 ? 1.0 / sum : 0.0;
    float dot = 0.0;
    if (inv > 0.0) {
      for (uint s = LANE; s < end; s += TEAM) dot += exp(LOAD_sc(base + s) - mx) * inv * LOAD_dp(base + s);
    }
    dot = teamSum(dot);
    for (uint s = LANE; s < p.S; s += TEAM) {
      float pv = (s < end && inv > 0.0) ? exp(LOAD_sc(base + s) - mx) * inv : 0.0;
      STORE_pr(base + s, pv);
      STORE_ds(base + s, pv * (LOAD_dp(base + s) - dot));
    }
  }
}
