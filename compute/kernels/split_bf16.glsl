// f32 values as three bf16 parts, for the tensor-core matrix product's
// F32_SPLIT (matmul_coop.comp; template_matmul.cpp prepends this file to it).
//
// x = hi + mid + lo exactly, but where mid or lo would fall below f32's
// normal range (|x| below about 2^-100): hi is x rounded to 8 significant
// bits, x - hi then has at most 16 and is exact in f32, mid is it rounded to
// 8 and the rest lo has at most 8. So |mid| <= 2^-8 |x| and |lo| <= 2^-16
// |x|. Adding half a unit to the bit pattern rounds the magnitude (ties away
// from zero). Infinities, NaNs and magnitudes from 0x7F7F8000 up (which round
// to infinity) give parts that are infinities or NaNs, and so are the sums
// they reach: the kernel computes such tiles again in f32 arithmetic.
//
// A product of two split elements is the sum of nine part products; the
// kernel takes the six down to hi*lo, mid*mid and lo*hi. The three left out
// are together at most 2 * 2^-8 * 2^-16 + 2^-32 of the product, about
// 2^-23: what rounding it to f32 costs.

// hi, mid and lo as the upper halves of f32 bit patterns (lower halves zero).
uvec3 split3(float x) {
  const uint hi = (floatBitsToUint(x) + 0x8000u) & 0xFFFF0000u;
  const float r = x - uintBitsToFloat(hi);
  const uint mid = (floatBitsToUint(r) + 0x8000u) & 0xFFFF0000u;
  return uvec3(hi, mid, floatBitsToUint(r - uintBitsToFloat(mid)) & 0xFFFF0000u);
}

// Two elements as one 32-bit word per plane: x0 in the low half, as 16-bit
// tensors are laid out.
uvec3 splitPair(float x0, float x1) { return (split3(x0) >> 16u) | split3(x1); }
