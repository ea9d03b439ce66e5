// Weight gradient of a convolution (template_conv_backward.cpp), a
// correlation of two activations A and B:
//   dW[a, b, kh, kw] = sum over n, ah, aw of
//       A[n, a, ah, aw] * B[n, g * BG + b, ah * SH - PH + kh * DH, aw * SW - PW + kw * DW]
// with g = a / AG (a's group) and B zero outside its bounds. conv2d:
// A = grad, B = input (dW [O, C/G, KH, KW]); conv_transpose2d: A = input,
// B = grad (dW [C, O/G, KH, KW]). 1-D convs have AH = BH = KH = 1.
//
// The sum is split over the N * AH * AW positions of A into chunks of PER
// positions, and a sum over chunks follows (a step of the graph). One
// invocation owns, for one chunk, the taps (b, kh, kw) of CAB neighbouring
// channels a of one group: each B element it loads feeds CAB products.
// Neighbouring invocations are neighbouring taps of one channel block, so
// they read neighbouring elements of B and the same elements of A. It
// writes part[a][b][kh][kw][chunk] (f32): the sum over chunks is then one
// over rows, which reductions do fastest.
// Meta (ints): N CA AH AW CB BH BW KH KW SH SW PH PW DH DW AG BG PER BPG CHUNKS
// (BPG: channel blocks per group, ceil(AG / CAB)).
layout(local_size_x = 256) in;
layout(push_constant) uniform Push {
  part_ref part;
  a_ref a;
  b_ref b;
  Meta meta;
  uint items;  // chunks * (CA / AG) * BPG * BG * KH * KW
} p;

#define M(k) int(p.meta.v[k])

// [lo, hi): the positions x in [0, count) with 0 <= x * s + off < size.
ivec2 inside(int count, int s, int off, int size) {
  const int lo = off >= 0 ? 0 : (s - 1 - off) / s;
  const int last = size - 1 - off;  // x * s <= last
  const int hi = last < 0 ? 0 : min(count, last / s + 1);
  return ivec2(lo, max(lo, hi));
}

void main() {
  const int N = M(0), CA = M(1), AH = M(2), AW = M(3), CB = M(4), BH = M(5), BW = M(6), KH = M(7), KW = M(8);
  const int SH = M(9), SW = M(10), PH = M(11), PW = M(12), DH = M(13), DW = M(14), AG = M(15), BG = M(16);
  const int PER = M(17), BPG = M(18), CHUNKS = M(19);
  const uint perChunk = uint((CA / AG) * BPG * BG * KH * KW);
  const uint planeA = uint(AH * AW);
  const uint stride = gl_NumWorkGroups.x * 256u;
  for (uint i = gl_GlobalInvocationID.x; i < p.items; i += stride) {
    const uint e = i % perChunk;
    const int kw = int(e % uint(KW));
    uint t = e / uint(KW);
    const int kh = int(t % uint(KH));
    t /= uint(KH);
    const int bl = int(t % uint(BG));
    const int blk = int(t / uint(BG));
    const int g = blk / BPG;
    const int al0 = (blk - g * BPG) * CAB;  // first channel of the block, within the group
    const int jn = min(CAB, AG - al0);
    const int ca0 = g * AG + al0, cb = g * BG + bl;
    const int offw = kw * DW - PW;  // bw = aw * SW + offw
    const ivec2 ws = inside(AW, SW, offw, BW);
    // Positions [q0, q1) of the chunk, row by row (a row is one (n, ah)).
    const int chunk = int(i / perChunk);
    const int q0 = chunk * PER, q1 = min(q0 + PER, N * AH * AW);
    float acc[CAB];
    for (int j = 0; j < CAB; ++j) acc[j] = 0.0;
    for (int r = q0 / AW; r * AW < q1; ++r) {
      const int n = r / AH, ah = r - n * AH;
      const int bh = ah * SH - PH + kh * DH;
      if (bh < 0 || bh >= BH) continue;
      const uint arow = (uint(n * CA + ca0) * uint(AH) + uint(ah)) * uint(AW);
      const uint brow = (uint(n * CB + cb) * uint(BH) + uint(bh)) * uint(BW);
      const int lo = max(ws.x, q0 - r * AW), hi = min(ws.y, q1 - r * AW);
      for (int aw = lo; aw < hi; ++aw) {
        const float bv = float(LOAD_b(brow + uint(aw * SW + offw)));
        for (int j = 0; j < CAB; ++j) acc[j] += float(LOAD_a(arow + uint(min(j, jn - 1)) * planeA + uint(aw))) * bv;
      }
    }
    const uint tap = uint(kh * KW + kw);
    for (int j = 0; j < jn; ++j) {
      const uint weight = (uint(ca0 + j) * uint(BG) + uint(bl)) * uint(KH * KW) + tap;
      STORE_part(weight * uint(CHUNKS) + uint(chunk), acc[j]);
    }
  }
}
