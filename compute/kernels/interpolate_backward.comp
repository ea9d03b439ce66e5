// Backward of interpolate (template_conv_backward.cpp): planes [P, OH, OW] of
// grad back to [P, H, W], one invocation per input element. The forward is
// separable: output (oh, ow) reads input rows by oh alone and columns by ow
// alone, with weights wh(oh, ih) * ww(ow, iw). The outputs that read row ih
// are a range of oh (the row an output reads first never decreases with
// oh), found by binary search over the forward's own index mapping
// (resize_index.glsl), so no inverse formula can disagree with it.
// MODE (a push constant) as interpolate.comp: 0 nearest, 1 nearest-exact,
// 2 bilinear.
// Meta: H W OH OW (ints), scaleH scaleW (float bits), alignCorners
layout(local_size_x = 256) in;
layout(push_constant) uniform Push {
  y_ref y;  // grad_input
  g_ref g;  // grad
  Meta meta;
  uint items;  // P * H * W
  uint mode;
} p;

#define M(k) int(p.meta.v[k])

// The input index output o reads first (bilinear: the lower of its two).
int firstRead(int o, float scale, int size, bool alignCorners) {
  if (p.mode == 2u) return min(int(floor(sourceIndex(o, scale, alignCorners))), size - 1);
  return nearestIndex(o, scale, size, p.mode == 1u);
}

// The first output o in [0, count) with firstRead(o) >= target (count if none).
int firstOutputFrom(int target, float scale, int size, int count, bool alignCorners) {
  int lo = 0, hi = count;
  while (lo < hi) {
    const int mid = (lo + hi) / 2;
    if (firstRead(mid, scale, size, alignCorners) < target) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

// Weight of input index i in output o, as the forward computes it.
float weightOf(int o, int i, float scale, int size, bool alignCorners) {
  if (p.mode != 2u) return 1.0;  // the range holds exactly the outputs that read i
  const float s = sourceIndex(o, scale, alignCorners);
  const int i0 = min(int(floor(s)), size - 1);
  const float l = clamp(s - float(i0), 0.0, 1.0);
  const int i1 = i0 < size - 1 ? i0 + 1 : i0;
  return (i0 == i ? 1.0 - l : 0.0) + (i1 == i ? l : 0.0);
}

void main() {
  const int H = M(0), W = M(1), OH = M(2), OW = M(3);
  const float scaleH = uintBitsToFloat(p.meta.v[4]), scaleW = uintBitsToFloat(p.meta.v[5]);
  const bool alignCorners = p.meta.v[6] != 0u;
  // Bilinear output o also reads the index after its first one.
  const int reach = p.mode == 2u ? 1 : 0;
  const uint stride = gl_NumWorkGroups.x * 256u;
  for (uint i = gl_GlobalInvocationID.x; i < p.items; i += stride) {
    const int iw = int(i % uint(W));
    uint t = i / uint(W);
    const int ih = int(t % uint(H));
    const uint gbase = (t / uint(H)) * uint(OH) * uint(OW);
    const int oh0 = firstOutputFrom(ih - reach, scaleH, H, OH, alignCorners);
    const int oh1 = firstOutputFrom(ih + 1, scaleH, H, OH, alignCorners);
    const int ow0 = firstOutputFrom(iw - reach, scaleW, W, OW, alignCorners);
    const int ow1 = firstOutputFrom(iw + 1, scaleW, W, OW, alignCorners);
    float sum = 0.0;
    for (int oh = oh0; oh < oh1; ++oh) {
      const float wh = weightOf(oh, ih, scaleH, H, alignCorners);
      if (wh == 0.0) continue;
      float row = 0.0;
      for (int ow = ow0; ow < ow1; ++ow) {
        row += weightOf(ow, iw, scaleW, W, alignCorners) * float(LOAD_g(gbase + uint(oh * OW + ow)));
      }
      sum += wh * row;
    }
    STORE_y(i, T(sum));
  }
}
