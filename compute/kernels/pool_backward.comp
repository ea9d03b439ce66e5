// Backward of pooling over planes [P, H, W] (template_conv_backward.cpp),
// the same geometry as pool.comp. Every input element gathers the gradient
// of the windows that contain it, so overlapping windows need no atomics.
//
// ARGMAX (max pooling's first pass): one invocation per output element
// writes the plane index (ih * W + iw) of its window's maximum: the first
// maximum in window order, the last NaN if there is one, the first tap when
// every tap is -inf (PyTorch's rule); -1 for a window with no tap inside.
// Otherwise one invocation per input element; MODE (a push constant):
// 0 max (sums the grads of the windows whose argmax it is), 1 avg
// (grad / divisor of each window, as pool.comp divides), 2 adaptive avg.
// Meta (ints): H W OH OW KH KW SH SW PH PW DH DW countIncludePad divisor
layout(local_size_x = 256) in;
layout(buffer_reference, std430, buffer_reference_align = 4) buffer Index { int v[]; };
layout(push_constant) uniform Push {
  y_ref y;  // grad_input (unused by ARGMAX)
  x_ref x;  // input (ARGMAX only)
  g_ref g;  // grad
  Index idx;
  Meta meta;
  uint items;  // ARGMAX: P * OH * OW; otherwise P * H * W
  uint mode;
} p;

#define M(k) int(p.meta.v[k])

void main() {
  const int H = M(0), W = M(1), OH = M(2), OW = M(3), KH = M(4), KW = M(5), SH = M(6), SW = M(7);
  const int PH = M(8), PW = M(9), DH = M(10), DW = M(11), INCLUDE_PAD = M(12), DIVISOR = M(13);
  const uint stride = gl_NumWorkGroups.x * 256u;
  for (uint i = gl_GlobalInvocationID.x; i < p.items; i += stride) {
#ifdef ARGMAX
    const int ow = int(i % uint(OW));
    uint t = i / uint(OW);
    const int oh = int(t % uint(OH));
    const uint base = (t / uint(OH)) * uint(H) * uint(W);
    float best = uintBitsToFloat(0xff800000u);
    int arg = -1;
    for (int kh = 0; kh < KH; ++kh) {
      const int ih = oh * SH - PH + kh * DH;
      if (ih < 0 || ih >= H) continue;
      for (int kw = 0; kw < KW; ++kw) {
        const int iw = ow * SW - PW + kw * DW;
        if (iw < 0 || iw >= W) continue;
        const float v = float(LOAD_x(base + uint(ih * W + iw)));
        if (arg < 0 || v > best || isnan(v)) {
          best = v;
          arg = ih * W + iw;
        }
      }
    }
    p.idx.v[i] = arg;
#else
    const int iw = int(i % uint(W));
    uint t = i / uint(W);
    const int ih = int(t % uint(H));
    const uint plane = t / uint(H);
    const uint gbase = plane * uint(OH) * uint(OW);
    float sum = 0.0;
    if (p.mode == 0u) {
      // The windows holding (ih, iw): oh * SH - PH + kh * DH == ih for some tap kh.
      const int self = ih * W + iw;
      for (int kh = 0; kh < KH; ++kh) {
        const int th = ih + PH - kh * DH;
        if (th < 0 || th % SH != 0 || th / SH >= OH) continue;
        const int oh = th / SH;
        for (int kw = 0; kw < KW; ++kw) {
          const int tw = iw + PW - kw * DW;
          if (tw < 0 || tw % SW != 0 || tw / SW >= OW) continue;
          const uint o = gbase + uint(oh * OW + tw / SW);
          if (p.idx.v[o] == self) sum += float(LOAD_g(o));
        }
      }
    } else {
      // The windows holding (ih, iw) are a rectangle [oh0, oh1] x [ow0, ow1].
      int oh0, oh1, ow0, ow1;
      if (p.mode == 1u) {  // window oh covers [oh * SH - PH, oh * SH - PH + KH)
        const int th = ih + PH - KH + 1, tw = iw + PW - KW + 1;
        oh0 = th <= 0 ? 0 : (th + SH - 1) / SH;
        ow0 = tw <= 0 ? 0 : (tw + SW - 1) / SW;
        oh1 = min((ih + PH) / SH, OH - 1);
        ow1 = min((iw + PW) / SW, OW - 1);
      } else {  // window oh covers [floor(oh * H / OH), ceil((oh + 1) * H / OH))
        oh0 = (ih * OH) / H;
        ow0 = (iw * OW) / W;
        oh1 = ((ih + 1) * OH + H - 1) / H - 1;
        ow1 = ((iw + 1) * OW + W - 1) / W - 1;
      }
      for (int oh = oh0; oh <= oh1; ++oh) {
        for (int ow = ow0; ow <= ow1; ++ow) {
          int count;
          if (p.mode == 1u) {  // pool.comp's divisor of window (oh, ow)
            int h0 = oh * SH - PH, w0 = ow * SW - PW;
            int h1 = min(h0 + KH, H + PH), w1 = min(w0 + KW, W + PW);
            const int padded = (h1 - h0) * (w1 - w0);
            h0 = max(h0, 0);
            w0 = max(w0, 0);
            h1 = min(h1, H);
            w1 = min(w1, W);
            count = DIVISOR > 0 ? DIVISOR : INCLUDE_PAD != 0 ? padded : (h1 - h0) * (w1 - w0);
          } else {
            count = (((oh + 1) * H + OH - 1) / OH - (oh * H) / OH) * (((ow + 1) * W + OW - 1) / OW - (ow * W) / OW);
          }
          sum += float(LOAD_g(gbase + uint(oh * OW + ow))) / float(count);
        }
      }
    }
    STORE_y(i, T(sum));
#endif
  }
}
