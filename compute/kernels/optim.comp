// Optimizer steps, clip_grad_norm_ and zero_ (template_optim.cpp). One
// dispatch works through a table of tensors: each entry names up to five
// operands (t: the param, or the grad being clipped, or the tensor zeroed;
// g: the grad; s0..s2: state tensors) and owns the tiles [firstTile,
// firstTile + ceil(n / TILE)) of the grid; entries own at least one tile.
// A workgroup takes whole tiles, so every tile belongs to one entry. Math is
// in f32; ROUND(v) is v as the tensors' dtype stores it.
// KIND: 0 sgd, 1 adam / adamw, 2 norm partials, 3 norm final, 4 scale, 5 zero.
// Defined by the generator: WG, ITEMS (per invocation and tile: TILE = WG *
// ITEMS), KIND, ROUND(v), ZERO (the dtype's zero, KIND 5). Needs
// norm_rows.glsl (teamSum, teamMax).
#define KIND_SGD 0
#define KIND_ADAM 1
#define KIND_NORM_PARTIAL 2
#define KIND_NORM_FINAL 3
#define KIND_SCALE 4
#define KIND_ZERO 5
#define TILE (uint(WG) * uint(ITEMS))

// Step flags; template_optim.cpp has the same values.
#define FLAG_MAXIMIZE 1u
#define FLAG_NESTEROV 2u
#define FLAG_FIRST_STEP 4u  // sgd: the momentum buffer starts as the gradient
#define FLAG_AMSGRAD 8u
#define FLAG_DECOUPLED 16u  // adamw: weight decay scales the param, not the gradient

layout(local_size_x = WG) in;

struct Entry {
  uint64_t t;
  uint64_t g;
  uint64_t s0;
  uint64_t s1;
  uint64_t s2;
  uint firstTile;
  uint n;
};
layout(buffer_reference, std430, buffer_reference_align = 8) buffer Table { Entry e[]; };
layout(buffer_reference, std430, buffer_reference_align = 4) buffer Floats { float v[]; };

#if KIND == KIND_SGD || KIND == KIND_ADAM
layout(push_constant) uniform Push {
  Table table;
  uint entries;
  uint tiles;
  uint flags;
  // 1 - x terms come from the host, in double as PyTorch computes them.
  float lr;                 // sgd: lr; adam: the step size lr / (1 - beta1^step)
  float weightDecay;        // L2, added to the gradient (sgd, adam)
  float momentum;           // sgd
  float oneMinusDampening;  // sgd
  float decay;              // adamw: 1 - lr * weight_decay
  float oneMinusBeta1;      // adam: exp_avg's lerp weight
  float beta2;
  float oneMinusBeta2;
  float bc2Sqrt;            // sqrt(1 - beta2^step)
  float eps;
} pc;
#else
layout(push_constant) uniform Push {
  Table table;
  Floats partial;  // per-workgroup partials, then at [partials] the clip coefficient
  uint64_t y;      // total_norm (KIND 3)
  ErrorWords err;
  uint entries;
  uint tiles;
  uint partialBase;  // where this dispatch's partials start (KIND 2)
  uint partials;     // how many there are in all (KIND 3, 4)
  uint errorIfNonfinite;
  float normType;
  float maxNorm;
} pc;
#endif

// The operands the LOAD_ / STORE_ macros name `p.<operand>`: here a local
// struct pointing at the current entry's tensors, not the push constants.
struct Operands {
#if KIND == KIND_SGD
  t_ref t; g_ref g; s0_ref s0;
#elif KIND == KIND_ADAM
  t_ref t; g_ref g; s0_ref s0; s1_ref s1; s2_ref s2;
#elif KIND == KIND_NORM_FINAL
  y_ref y;
#else
  t_ref t;
#endif
};

// The entry owning `tile`: the last one whose first tile is <= tile.
uint entryOf(uint tile) {
  uint lo = 0u, hi = pc.entries - 1u;
  while (lo < hi) {
    uint mid = (lo + hi + 1u) >> 1;
    if (pc.table.e[mid].firstTile <= tile) lo = mid;
    else hi = mid - 1u;
  }
  return lo;
}

#if KIND != KIND_NORM_FINAL
Operands operandsOf(Entry e) {
#if KIND == KIND_SGD
  return Operands(t_ref(e.t), g_ref(e.g), s0_ref(e.s0));
#elif KIND == KIND_ADAM
  return Operands(t_ref(e.t), g_ref(e.g), s0_ref(e.s0), s1_ref(e.s1), s2_ref(e.s2));
#else
  return Operands(t_ref(e.t));
#endif
}

#endif

// torch.maximum: NaN wins.
float maxNan(float a, float b) { return isnan(a) ? a : isnan(b) ? b : max(a, b); }

#if KIND == KIND_SGD
// torch.optim.SGD, _single_tensor_sgd.
void update(Operands p, uint i) {
  float w = LOAD_t(i), g = LOAD_g(i);
  if ((pc.flags & FLAG_MAXIMIZE) != 0u) g = -g;
  if (pc.weightDecay != 0.0) g += pc.weightDecay * w;
  if (pc.momentum != 0.0) {
    float buf = (pc.flags & FLAG_FIRST_STEP) != 0u ? g : LOAD_s0(i) * pc.momentum + pc.oneMinusDampening * g;
    buf = ROUND(buf);
    STORE_s0(i, buf);
    g = (pc.flags & FLAG_NESTEROV) != 0u ? g + pc.momentum * buf : buf;
  }
  STORE_t(i, w - pc.lr * g);
}
#elif KIND == KIND_ADAM
// torch.optim.Adam / AdamW, _single_tensor_adam.
void update(Operands p, uint i) {
  float w = LOAD_t(i), g = LOAD_g(i);
  if ((pc.flags & FLAG_MAXIMIZE) != 0u) g = -g;
  if ((pc.flags & FLAG_DECOUPLED) != 0u) w = ROUND(w * pc.decay);
  else if (pc.weightDecay != 0.0) g += pc.weightDecay * w;
  float m = LOAD_s0(i);
  m = ROUND(m + pc.oneMinusBeta1 * (g - m));  // exp_avg.lerp_(grad, 1 - beta1)
  float v = ROUND(LOAD_s1(i) * pc.beta2 + pc.oneMinusBeta2 * g * g);
  STORE_s0(i, m);
  STORE_s1(i, v);
  if ((pc.flags & FLAG_AMSGRAD) != 0u) {
    v = maxNan(LOAD_s2(i), v);
    STORE_s2(i, v);
  }
  float denom = sqrt(v) / pc.bc2Sqrt + pc.eps;
  STORE_t(i, w + (-pc.lr * m) / denom);  // param.addcdiv_(exp_avg, denom, value=-step_size)
}
#endif

#if KIND == KIND_NORM_PARTIAL || KIND == KIND_NORM_FINAL
// The norm's running state: sum |x|^p, or max |x| (NaN wins) for p = inf.
float accumulate(float acc, float a) {
  if (isinf(pc.normType)) return (isnan(a) || a > acc) ? a : acc;
  return acc + a;
}
float powered(float x) {
  float a = abs(x);
  if (isinf(pc.normType) || pc.normType == 1.0) return a;
  return pc.normType == 2.0 ? a * a : pow(a, pc.normType);
}
// The workgroup's combined state (all invocations must call it).
float teamCombine(float acc) {
  if (!isinf(pc.normType)) return teamSum(acc);
  // subgroupMax leaves NaN to the device, so NaN is counted on its own.
  float nans = teamSum(isnan(acc) ? 1.0 : 0.0);
  float m = teamMax(isnan(acc) ? 0.0 : acc);
  return nans > 0.0 ? uintBitsToFloat(0x7fc00000u) : m;
}
#endif

void main() {
#if KIND == KIND_NORM_FINAL
  // One workgroup: the partials give total_norm and the clip coefficient.
  float acc = 0.0;
  for (uint k = gl_LocalInvocationID.x; k < pc.partials; k += uint(WG)) acc = accumulate(acc, pc.partial.v[k]);
  acc = teamCombine(acc);
  if (gl_LocalInvocationID.x == 0u) {
    float total = acc;
    if (!isinf(pc.normType) && pc.normType != 1.0) total = pc.normType == 2.0 ? sqrt(acc) : pow(acc, 1.0 / pc.normType);
    Operands p = Operands(y_ref(pc.y));
    STORE_y(0, total);
    float coef = pc.maxNorm / (total + 1e-6);
    coef = coef > 1.0 ? 1.0 : coef;  // torch.clamp(max=1): NaN stays NaN
    if (pc.errorIfNonfinite != 0u && (isnan(total) || isinf(total))) {
      pc.err.v[1] = floatBitsToUint(total);
      pc.err.v[0] = 1u;
      coef = 1.0;  // the op fails: leave the gradients as they were
    }
    pc.partial.v[pc.partials] = coef;
  }
#else
#if KIND == KIND_NORM_PARTIAL
  float acc = 0.0;
#elif KIND == KIND_SCALE
  float coef = pc.partial.v[pc.partials];
#endif
  // A contiguous run of tiles per workgroup: the table (host memory) is
  // searched once, then walked, rather than searched for every tile.
  uint per = (pc.tiles + gl_NumWorkGroups.x - 1u) / gl_NumWorkGroups.x;
  uint begin = gl_WorkGroupID.x * per, end = min(begin + per, pc.tiles);
  uint k = begin < end ? entryOf(begin) : 0u;
  Entry e = pc.table.e[k];
  for (uint tile = begin; tile < end; ++tile) {
    while (tile >= e.firstTile + (e.n + TILE - 1u) / TILE) e = pc.table.e[++k];
    Operands p = operandsOf(e);
    uint base = (tile - e.firstTile) * TILE;
    for (uint j = 0u; j < uint(ITEMS); ++j) {
      uint i = base + j * uint(WG) + gl_LocalInvocationID.x;  // neighbouring invocations, neighbouring elements
      if (i >= e.n) break;
#if KIND == KIND_SGD || KIND == KIND_ADAM
      update(p, i);
#elif KIND == KIND_NORM_PARTIAL
      acc = accumulate(acc, powered(LOAD_t(i)));
#elif KIND == KIND_SCALE
      STORE_t(i, LOAD_t(i) * coef);
#elif KIND == KIND_ZERO
      STORE_t(i, ZERO);
#endif
    }
  }
#if KIND == KIND_NORM_PARTIAL
  acc = teamCombine(acc);
  if (gl_LocalInvocationID.x == 0u) pc.partial.v[pc.partialBase + gl_WorkGroupID.x] = acc;
#endif
#endif
}
