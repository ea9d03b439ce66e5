// Counter-based random numbers: Philox4x32-10 (Salmon et al., "Parallel
// random numbers: as easy as 1, 2, 3", SC 2011). The same (counter, key)
// gives the same four words on every device; tensord's random ops use the
// counter (element index, 0, stream, 0) and the key (seed low, seed high).
// tests/compute/conformance_creation_test.cpp reproduces it on the CPU.
uvec4 philox4x32_10(uvec4 c, uvec2 k) {
  for (int r = 0; r < 10; ++r) {
    if (r > 0) {
      k.x += 0x9E3779B9u;
      k.y += 0xBB67AE85u;
    }
    uint hi0, lo0, hi1, lo1;
    umulExtended(0xD2511F53u, c.x, hi0, lo0);
    umulExtended(0xCD9E8D57u, c.z, hi1, lo1);
    c = uvec4(hi1 ^ c.y ^ k.x, lo1, hi0 ^ c.w ^ k.y, lo0);
  }
  return c;
}

// Uniform in [0, 1) with `bits` random bits (<= 24), exact in float.
float random_unit(uint word, uint bits) { return float(word >> (32u - bits)) * exp2(-float(bits)); }
// Uniform in (0, 1] with 24 random bits.
float random_unit_open0(uint word) { return (float(word >> 8) + 1.0) * exp2(-24.0); }
