// Pooling over the last two dims of planes [P, H, W] (template_conv.cpp);
// one invocation per output element. MODE (a push constant): 0 max (NaN
// propagates, padding is -inf), 1 avg (PyTorch's window clipping,
// count_include_pad, divisor_override), 2 adaptive avg (window
// [floor(o * H / OH), ceil((o + 1) * H / OH))).
// Meta (ints): H W OH OW KH KW SH SW PH PW DH DW countIncludePad divisor
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
  const int H = M(0), W = M(1), OH = M(2), OW = M(3), KH = M(4), KW = M(5), SH = M(6), SW = M(7);
  const int PH = M(8), PW = M(9), DH = M(10), DW = M(11), INCLUDE_PAD = M(12), DIVISOR = M(13);
  const uint stride = gl_NumWorkGroups.x * 256u;
  for (uint i = gl_GlobalInvocationID.x; i < p.items; i += stride) {
    const int ow = int(i % uint(OW));
    uint t = i / uint(OW);
    const int oh = int(t % uint(OH));
    const uint base = (t / uint(OH)) * uint(H) * uint(W);
    float result;
    if (p.mode == 0u) {
      float best = uintBitsToFloat(0xff800000u);
      for (int kh = 0; kh < KH; ++kh) {
        const int ih = oh * SH - PH + kh * DH;
        if (ih < 0 || ih >= H) continue;
        for (int kw = 0; kw < KW; ++kw) {
          const int iw = ow * SW - PW + kw * DW;
          if (iw < 0 || iw >= W) continue;
          const float v = float(LOAD_x(base + uint(ih * W + iw)));
          if (v > best || isnan(v)) best = v;
        }
      }
      result = best;
    } else {
      int h0, h1, w0, w1, count;
      if (p.mode == 1u) {
        h0 = oh * SH - PH;
        w0 = ow * SW - PW;
        h1 = min(h0 + KH, H + PH);
        w1 = min(w0 + KW, W + PW);
        const int padded = (h1 - h0) * (w1 - w0);
        h0 = max(h0, 0);
        w0 = max(w0, 0);
        h1 = min(h1, H);
        w1 = min(w1, W);
        count = DIVISOR > 0 ? DIVISOR : INCLUDE_PAD != 0 ? padded : (h1 - h0) * (w1 - w0);
      } else {
        h0 = (oh * H) / OH;
        h1 = ((oh + 1) * H + OH - 1) / OH;
        w0 = (ow * W) / OW;
        w1 = ((ow + 1) * W + OW - 1) / OW;
        count = (h1 - h0) * (w1 - w0);
      }
      float sum = 0.0;
      for (int ih = h0; ih < h1; ++ih) {
        for (int iw = w0; iw < w1; ++iw) sum += float(LOAD_x(base + uint(ih * W + iw)));
      }
      result = (h0 >= h1 || w0 >= w1) ? 0.0 : sum / float(count);
    }
    STORE_y(i, T(result));
  }
}
