// Winograd F(2x2, 3x3) convolution: the transforms around a batched product
// (template_conv.cpp chooses it for f32 conv2d with 3x3 kernels, stride 1,
// dilation 1 and one group). With tiles of 2x2 outputs, each reading a 4x4
// patch of the input (zero outside it: padding):
//   V[e][c][t] = (B^T d B)[e]   d: tile t's patch of input channel c
//   U[e][o][c] = (G g G^T)[e]   g: the 3x3 kernel of output channel o, input c
//   M[e]       = U[e] @ V[e]    (the matmul kernels, 16 products)
//   y          = A^T m A + bias m: M[.][o][t] as 4x4; 2x2 outputs
// so the product does 16 multiplications per tile and channel pair where a
// direct convolution does 36. e = 4 * row + column of the 4x4 transform.
//
// Tiles: t = (n * TH + ty) * TW + tx for t < T = N * TH * TW; V and M have
// TP >= T columns (a multiple of 8, so the product can take vector loads),
// and the columns past T are zero in V.
//
// Modes (one per dispatch, invocation per item, grid-stride):
//   WG_INPUT:  items C * TP; y = V, x = the input [N, C, H, W]
//   WG_WEIGHT: items O * C;  y = U, x = the weight [O, C, 3, 3]
//   WG_OUTPUT: items O * TP; y = the output [N, O, OH, OW], x = M, b = bias
// Meta (uints): 0 N, 1 C, 2 H, 3 W, 4 O, 5 OH, 6 OW, 7 PH, 8 PW, 9 TH,
// 10 TW, 11 T, 12 TP, 13 has bias, 14 items.
//
// SCALE (0.25 for f16): V and U are stored times SCALE and the output
// transform divides the products by SCALE^2 (powers of two: exact in f32).
// A transformed input sums up to four inputs and a transformed weight is up
// to 2.25 times the kernel's largest entry, so in f16 they could overflow
// where the direct convolution's result does not; a quarter of them cannot.
// The price: transformed values below 2^-12 (not 2^-14) are stored as f16
// subnormals, with an absolute error of at most about 2^-23.
#extension GL_EXT_control_flow_attributes : require
layout(local_size_x = 256) in;
#ifndef SCALE
#define SCALE 1.0
#endif
layout(push_constant) uniform Push {
  y_ref y;
  x_ref x;
  b_ref b;
  Meta meta;
} p;

void main() {
  const uint C = p.meta.v[1], O = p.meta.v[4], TP = p.meta.v[12], items = p.meta.v[14];
  const uint stride = gl_NumWorkGroups.x * 256u;
  for (uint id = gl_GlobalInvocationID.x; id < items; id += stride) {
#if defined(WG_INPUT)
    const uint c = id / TP, t = id % TP;
    float d[4][4];
    [[unroll]] for (uint i = 0u; i < 4u; ++i) {
      [[unroll]] for (uint j = 0u; j < 4u; ++j) d[i][j] = 0.0;
    }
    if (t < p.meta.v[11]) {
      const uint H = p.meta.v[2], W = p.meta.v[3], TH = p.meta.v[9], TW = p.meta.v[10];
      const uint n = t / (TH * TW), r = t % (TH * TW);
      const int h0 = int(2u * (r / TW)) - int(p.meta.v[7]), w0 = int(2u * (r % TW)) - int(p.meta.v[8]);
      const uint base = (n * C + c) * H * W;
      [[unroll]] for (int i = 0; i < 4; ++i) {
        const int h = h0 + i;
        if (h < 0 || h >= int(H)) continue;
        [[unroll]] for (int j = 0; j < 4; ++j) {
          const int w = w0 + j;
          if (w >= 0 && w < int(W)) d[i][j] = LOAD_x(base + uint(h) * W + uint(w));
        }
      }
    }
    // B^T d, then (B^T d) B; B^T = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1].
    float s[4][4];
    [[unroll]] for (uint j = 0u; j < 4u; ++j) {
      s[0][j] = d[0][j] - d[2][j];
      s[1][j] = d[1][j] + d[2][j];
      s[2][j] = d[2][j] - d[1][j];
      s[3][j] = d[1][j] - d[3][j];
    }
    const uint plane = C * TP, at = c * TP + t;
    [[unroll]] for (uint i = 0u; i < 4u; ++i) {
      STORE_y((4u * i + 0u) * plane + at, SCALE * (s[i][0] - s[i][2]));
      STORE_y((4u * i + 1u) * plane + at, SCALE * (s[i][1] + s[i][2]));
      STORE_y((4u * i + 2u) * plane + at, SCALE * (s[i][2] - s[i][1]));
      STORE_y((4u * i + 3u) * plane + at, SCALE * (s[i][1] - s[i][3]));
    }
#elif defined(WG_WEIGHT)
    const uint o = id / C, c = id % C;
    float g[3][3];
    [[unroll]] for (uint i = 0u; i < 3u; ++i) {
      [[unroll]] for (uint j = 0u; j < 3u; ++j) g[i][j] = LOAD_x(id * 9u + 3u * i + j);
    }
    // G g, then (G g) G^T; G = [1 0 0; 1/2 1/2 1/2; 1/2 -1/2 1/2; 0 0 1].
    float s[4][3];
    [[unroll]] for (uint j = 0u; j < 3u; ++j) {
      s[0][j] = g[0][j];
      s[1][j] = 0.5 * (g[0][j] + g[1][j] + g[2][j]);
      s[2][j] = 0.5 * (g[0][j] - g[1][j] + g[2][j]);
      s[3][j] = g[2][j];
    }
    const uint plane = O * C, at = o * C + c;
    [[unroll]] for (uint i = 0u; i < 4u; ++i) {
      STORE_y((4u * i + 0u) * plane + at, SCALE * s[i][0]);
      STORE_y((4u * i + 1u) * plane + at, SCALE * 0.5 * (s[i][0] + s[i][1] + s[i][2]));
      STORE_y((4u * i + 2u) * plane + at, SCALE * 0.5 * (s[i][0] - s[i][1] + s[i][2]));
      STORE_y((4u * i + 3u) * plane + at, SCALE * s[i][2]);
    }
#else  // WG_OUTPUT
    const uint o = id / TP, t = id % TP;
    if (t >= p.meta.v[11]) continue;
    const uint plane = O * TP, at = o * TP + t;
    float m[4][4];
    [[unroll]] for (uint e = 0u; e < 16u; ++e) m[e / 4u][e % 4u] = LOAD_x(e * plane + at);
    // A^T m, then (A^T m) A; A^T = [1 1 1 0; 0 1 -1 -1].
    float s[2][4];
    [[unroll]] for (uint j = 0u; j < 4u; ++j) {
      s[0][j] = m[0][j] + m[1][j] + m[2][j];
      s[1][j] = m[1][j] - m[2][j] - m[3][j];
    }
    const float bias = p.meta.v[13] != 0u ? LOAD_b(o) : 0.0;
    const uint OH = p.meta.v[5], OW = p.meta.v[6], TH = p.meta.v[9], TW = p.meta.v[10];
    const uint n = t / (TH * TW), r = t % (TH * TW);
    const uint oy = 2u * (r / TW), ox = 2u * (r % TW);
    const uint base = (n * O + o) * OH * OW;
    [[unroll]] for (uint i = 0u; i < 2u; ++i) {
      if (oy + i >= OH) continue;
      const float v0 = s[i][0] + s[i][1] + s[i][2], v1 = s[i][1] - s[i][2] - s[i][3];
      const float unscale = 1.0 / (SCALE * SCALE);
      STORE_y(base + (oy + i) * OW + ox, v0 * unscale + bias);
      if (ox + 1u < OW) STORE_y(base + (oy + i) * OW + ox + 1u, v1 * unscale + bias);
    }
#endif
  }
}
