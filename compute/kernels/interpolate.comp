// Resampling of planes [P, H, W] to [P, OH, OW] (template_conv.cpp), one
// invocation per output element, PyTorch's index mapping (scales are
// input/output or 1/scale_factor, as float). MODE (a push constant):
// 0 nearest (src = min(floor(o * scale), in - 1)), 1 nearest-exact
// (floor((o + 0.5) * scale)), 2 bilinear (align_corners: src = o * scale;
// else max((o + 0.5) * scale - 0.5, 0)).
// Meta: H W OH OW (ints), scaleH scaleW (float bits), alignCorners
// (sourceIndex, nearestIndex: resize_index.glsl)
layout(local_size_x = 256) in;
layout(push_constant) uniform Push {
  y_ref y;
  x_ref x;
  Meta meta;
  uint items;  // P * OH * OW
  uint mode;
} p;

#define M(k) int(p.meta.v[k])

void main() {
  const int H = M(0), W = M(1), OH = M(2), OW = M(3);
  const float scaleH = uintBitsToFloat(p.meta.v[4]), scaleW = uintBitsToFloat(p.meta.v[5]);
  const bool alignCorners = p.meta.v[6] != 0u;
  const uint stride = gl_NumWorkGroups.x * 256u;
  for (uint i = gl_GlobalInvocationID.x; i < p.items; i += stride) {
    const int ow = int(i % uint(OW));
    uint t = i / uint(OW);
    const int oh = int(t % uint(OH));
    const uint base = (t / uint(OH)) * uint(H) * uint(W);
    float result;
    if (p.mode != 2u) {
      const bool exact = p.mode == 1u;
      const int ih = nearestIndex(oh, scaleH, H, exact), iw = nearestIndex(ow, scaleW, W, exact);
      result = float(LOAD_x(base + uint(ih * W + iw)));
    } else {
      const float sh = sourceIndex(oh, scaleH, alignCorners), sw = sourceIndex(ow, scaleW, alignCorners);
      const int h0 = min(int(floor(sh)), H - 1), w0 = min(int(floor(sw)), W - 1);
      const float lh = clamp(sh - float(h0), 0.0, 1.0), lw = clamp(sw - float(w0), 0.0, 1.0);
      const int h1 = h0 < H - 1 ? h0 + 1 : h0, w1 = w0 < W - 1 ? w0 + 1 : w0;
      const float v00 = float(LOAD_x(base + uint(h0 * W + w0))), v01 = float(LOAD_x(base + uint(h0 * W + w1)));
      const float v10 = float(LOAD_x(base + uint(h1 * W + w0))), v11 = float(LOAD_x(base + uint(h1 * W + w1)));
      result = (1.0 - lh) * ((1.0 - lw) * v00 + lw * v01) + lh * ((1.0 - lw) * v10 + lw * v11);
    }
    STORE_y(i, T(result));
  }
}
