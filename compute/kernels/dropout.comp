// dropout: element i is kept when the 24-bit hash of (seed, i) is at least
// `threshold` (= ceil(p * 2^24)), and scaled by `scale` (= 1 / (1 - p)).
// The hash (lowbias32 rounds, see dropoutHash in template_nn.cpp) is the
// same on every device, so one seed gives one mask everywhere.
layout(local_size_x = 256) in;
layout(push_constant) uniform Push {
  y_ref y;
  x_ref x;
  uint n;
  uint seedLo;
  uint seedHi;
  uint threshold;
  float scale;
} p;

uint mix32(uint x) {
  x ^= x >> 16; x *= 0x7feb352du;
  x ^= x >> 15; x *= 0x846ca68bu;
  x ^= x >> 16;
  return x;
}

void main() {
  uint key = mix32(p.seedLo ^ mix32(p.seedHi ^ 0x9e3779b9u));
  uint stride = gl_NumWorkGroups.x * 256u;
  for (uint i = gl_GlobalInvocationID.x; i < p.n; i += stride) {
    uint u = mix32(mix32(i + key) ^ key) >> 8;
    STORE_y(i, u >= p.threshold ? LOAD_x(i) * p.scale : 0.0);
  }
}
