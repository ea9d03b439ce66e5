// Creation template: y[i] for i < n from the element index alone (fills,
// ranges, eye, random numbers) or from x[i] (bernoulli's probabilities).
// Defined by the generator (template_creation.cpp): MODE (one of the MODE_*
// below), INT_TO_T(x) (int64_t to T), FLOAT_TO_T(x) (float to T), RAND_BITS
// (random mantissa bits of the output dtype).
// Meta: n, m (eye's columns; linspace's first half), seed low, seed high,
// int path flag (arange), 3 pad words, then scalars of 4 words each (float
// bits, int32, int64 low, int64 high).
#define MODE_FILL 0
#define MODE_ARANGE 1
#define MODE_LINSPACE 2
#define MODE_EYE 3
#define MODE_RAND 4
#define MODE_RANDN 5
#define MODE_RANDINT 6
#define MODE_BERNOULLI 7
layout(local_size_x = 256) in;
layout(push_constant) uniform Push {
  y_ref y;
  x_ref x;
  Meta meta;
  uint n;
} p;

#define VAL_F(k) uintBitsToFloat(p.meta.v[8u + 4u * (k)])
#define VAL_L(k) (int64_t(uint64_t(p.meta.v[8u + 4u * (k) + 2u]) | (uint64_t(p.meta.v[8u + 4u * (k) + 3u]) << 32)))

void main() {
  uint stride = gl_NumWorkGroups.x * 256u;
  uvec2 key = uvec2(p.meta.v[2], p.meta.v[3]);
  for (uint i = gl_GlobalInvocationID.x; i < p.n; i += stride) {
#if MODE == MODE_FILL
#ifdef IS_FLOAT
    STORE_y(i, FLOAT_TO_T(VAL_F(0)));
#else
    STORE_y(i, INT_TO_T(VAL_L(0)));
#endif
#elif MODE == MODE_ARANGE
    if (p.meta.v[4] != 0u) {
      STORE_y(i, INT_TO_T(VAL_L(0) + int64_t(i) * VAL_L(1)));
    } else {
      STORE_y(i, FLOAT_TO_T(fma(float(i), VAL_F(1), VAL_F(0))));
    }
#elif MODE == MODE_LINSPACE
    // PyTorch's symmetric formula: the first half from start, the rest from end.
    uint steps = p.n;
    float v = i < p.meta.v[1] ? VAL_F(0) + VAL_F(2) * float(i) : VAL_F(1) - VAL_F(2) * float(steps - 1u - i);
    STORE_y(i, FLOAT_TO_T(v));
#elif MODE == MODE_EYE
    uint m = p.meta.v[1];
    STORE_y(i, INT_TO_T(i / m == i % m ? 1l : 0l));
#else
    uvec4 r = philox4x32_10(uvec4(i, 0u, 0u, 0u), key);
#if MODE == MODE_RAND
    STORE_y(i, FLOAT_TO_T(random_unit(r.x, RAND_BITS)));
#elif MODE == MODE_RANDN
    float u1 = random_unit_open0(r.x), u2 = random_unit(r.y, 24u);
    STORE_y(i, FLOAT_TO_T(sqrt(-2.0 * log(u1)) * cos(6.2831853071795865 * u2)));
#elif MODE == MODE_RANDINT
    uint64_t range = uint64_t(VAL_L(1) - VAL_L(0));
    uint64_t bits = (uint64_t(r.y) << 32) | uint64_t(r.x);
    STORE_y(i, INT_TO_T(VAL_L(0) + int64_t(bits % range)));
#elif MODE == MODE_BERNOULLI
    STORE_y(i, FLOAT_TO_T(random_unit(r.x, 24u) < LOAD_x(i) ? 1.0 : 0.0));
#endif
#endif
  }
}
