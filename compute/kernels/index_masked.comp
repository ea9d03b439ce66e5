// masked_fill (template_index.cpp): y[i] = mask[bcast(i)] ? value : x[i].
// The value is the scalar FILL or element 0 of the 0-d tensor val.
// Meta: 4 fill words, then per dim 2 words: size, mask stride.
layout(local_size_x = 256) in;
layout(push_constant) uniform Push {
  y_ref y;
  x_ref x;
  mask_ref mask;
  val_ref val;
  Meta meta;
  uint n;
  uint rank;
  uint tensorValue;
} p;

#if defined(IS_FLOAT)
#define FILL uintBitsToFloat(p.meta.v[0])
#elif defined(DT_I32)
#define FILL int(p.meta.v[1])
#elif defined(DT_I64)
#define FILL int64_t(uint64_t(p.meta.v[2]) | (uint64_t(p.meta.v[3]) << 32))
#elif defined(DT_U8)
#define FILL p.meta.v[1]
#else
#define FILL (p.meta.v[1] != 0u)
#endif

void main() {
  uint stride = gl_NumWorkGroups.x * 256u;
  for (uint i = gl_GlobalInvocationID.x; i < p.n; i += stride) {
    uint rem = i;
    uint mo = 0u;
    for (int k = int(p.rank) - 1; k >= 0; --k) {
      uint b = 4u + 2u * uint(k);
      uint size = p.meta.v[b];
      uint c = rem % size;
      rem /= size;
      mo += c * p.meta.v[b + 1u];
    }
    if (RAW_mask(mo)) {
      T value = p.tensorValue != 0u ? LOAD_val(0) : T(FILL);
      STORE_y(i, value);
    } else {
      p.y.v[i] = p.x.v[i];
    }
  }
}
