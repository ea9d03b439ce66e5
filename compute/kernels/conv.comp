// Direct convolution (template_conv.cpp), a gather: every invocation owns OCB
// neighbouring output channels of one group at one output position and sums
// their terms over (input channel of the group, kh, kw) in f32 registers, so
// each input element it loads feeds OCB products. Neighbouring invocations
// share n and the channel block (the fastest index is ow), so their weight
// loads coincide. No atomics; output written once. template_conv.cpp runs
// it for shapes too small for the implicit GEMM (conv_gemm.comp): few output
// channels per group (depthwise convs) or few products per output.
//
// TRANSPOSED: conv_transpose2d. weight [C, OG, KH, KW]; output position oh
// takes input row ih where oh = ih * SH - PH + kh * DH.
// Otherwise: weight [O, CG, KH, KW]; ih = oh * SH - PH + kh * DH.
//
// Meta (ints): N C H W O KH KW OH OW SH SW PH PW DH DW G CG OG BPG
// (BPG: channel blocks per group, ceil(OG / OCB)).
layout(local_size_x = 256) in;
layout(push_constant) uniform Push {
  y_ref y;
  x_ref x;
  w_ref w;
  b_ref b;
  Meta meta;
  uint items;    // N * G * BPG * OH * OW
  uint hasBias;
} p;

#define M(k) int(p.meta.v[k])

void main() {
  const int C = M(1), H = M(2), W = M(3), O = M(4), KH = M(5), KW = M(6), OH = M(7), OW = M(8);
  const int SH = M(9), SW = M(10), PH = M(11), PW = M(12), DH = M(13), DW = M(14);
  const int G = M(15), CG = M(16), OG = M(17), BPG = M(18);
  const uint stride = gl_NumWorkGroups.x * 256u;
  for (uint i = gl_GlobalInvocationID.x; i < p.items; i += stride) {
    const int ow = int(i % uint(OW));
    uint t = i / uint(OW);
    const int oh = int(t % uint(OH));
    t /= uint(OH);
    const int blk = int(t % uint(G * BPG));
    const int n = int(t / uint(G * BPG));
    const int g = blk / BPG;
    const int ocl0 = (blk % BPG) * OCB;  // first output channel of the block, within the group
    const int jn = min(OCB, OG - ocl0);
    float acc[OCB];
    for (int j = 0; j < OCB; ++j) acc[j] = 0.0;
#ifdef TRANSPOSED
    // Taps outer, channels inner: which taps land on a whole input position
    // (a division and a remainder each) is worked out once per tap, not once
    // per channel and tap.
    const uint plane = uint(H) * uint(W), taps = uint(KH * KW);
    const uint xn = uint(n * C + g * CG) * plane;
    for (int kh = 0; kh < KH; ++kh) {
      const int th = oh + PH - kh * DH;
      if (th < 0 || th % SH != 0) continue;
      const int ih = th / SH;
      if (ih >= H) continue;
      for (int kw = 0; kw < KW; ++kw) {
        const int tw = ow + PW - kw * DW;
        if (tw < 0 || tw % SW != 0) continue;
        const int iw = tw / SW;
        if (iw >= W) continue;
        uint xi = xn + uint(ih * W + iw);
        uint wk = (uint(g * CG) * uint(OG) + uint(ocl0)) * taps + uint(kh * KW + kw);
        for (int ci = 0; ci < CG; ++ci, xi += plane, wk += uint(OG) * taps) {
          const float xv = float(LOAD_x(xi));
          for (int j = 0; j < OCB; ++j) acc[j] += xv * float(LOAD_w(wk + uint(min(j, jn - 1)) * taps));
        }
      }
    }
#else
    for (int ci = 0; ci < CG; ++ci) {
      const int c = g * CG + ci;
      const uint xbase = uint(n * C + c) * uint(H) * uint(W);
      const uint wbase = (uint(g * OG + ocl0) * uint(CG) + uint(ci)) * uint(KH * KW);
      const uint wstep = uint(CG * KH * KW);
      for (int kh = 0; kh < KH; ++kh) {
        const int ih = oh * SH - PH + kh * DH;
        if (ih < 0 || ih >= H) continue;
        for (int kw = 0; kw < KW; ++kw) {
          const int iw = ow * SW - PW + kw * DW;
          if (iw < 0 || iw >= W) continue;
          const float xv = float(LOAD_x(xbase + uint(ih * W + iw)));
          const uint wk = wbase + uint(kh * KW + kw);
          for (int j = 0; j < OCB; ++j) {
            acc[j] += xv * float(LOAD_w(wk + uint(min(j, jn - 1)) * wstep));
          }
        }
      }
    }
#endif
    for (int j = 0; j < jn; ++j) {
      const int oc = g * OG + ocl0 + j;
      float v = acc[j];
      if (p.hasBias != 0u) v += float(LOAD_b(uint(oc)));
      STORE_y((uint(n * O + oc) * uint(OH) + uint(oh)) * uint(OW) + uint(ow), T(v));
    }
  }
}
