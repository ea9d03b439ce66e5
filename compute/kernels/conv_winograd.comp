// Winograd F(m x m, 3x3) convolution, m = WG_M (2 or 4): the transforms
// around a batched product (template_conv.cpp chooses it for conv2d with 3x3
// kernels, stride 1, dilation 1 and one group). With tiles of m x m outputs,
// each reading an a x a patch of the input (a = m + 2; zero outside it:
// padding):
//   V[e][c][t] = (B^T d B)[e]   d: tile t's patch of input channel c
//   U[e][o][c] = (G g G^T)[e]   g: the 3x3 kernel of output channel o, input c
//   M[e]       = U[e] @ V[e]    (the matmul kernels, a * a products)
//   y          = A^T m A + bias m: M[.][o][t] as a x a; m x m outputs
// so the product does a * a multiplications per tile and channel pair where
// a direct convolution does 9 * m * m: 16 for 36 (F(2x2, 3x3)), 36 for 144
// (F(4x4, 3x3)). e = a * row + column of the a x a transform.
//
// F(2x2, 3x3) takes the points 0, 1, -1 and infinity. F(4x4, 3x3) takes 0,
// 1, -1, 2, -1/2 and infinity: on random operands its rounding errors were
// about two thirds of those of the usual 0, +-1, +-2 (docs/design.md,
// "Winograd convolutions").
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
// SCALE (0.25 for f16, which takes F(2x2, 3x3) only): V and U are stored
// times SCALE and the output transform divides the products by SCALE^2
// (powers of two: exact in f32). A transformed input sums up to four inputs
// and a transformed weight is up to 2.25 times the kernel's largest entry,
// so in f16 they could overflow where the direct convolution's result does
// not; a quarter of them cannot. The price: transformed values below 2^-12
// (not 2^-14) are stored as f16 subnormals, with an absolute error of at
// most about 2^-23.
#extension GL_EXT_control_flow_attributes : require
layout(local_size_x = 256) in;
#ifndef SCALE
#define SCALE 1.0
#endif
#ifndef WG_M
#define WG_M 2
#endif
#define WG_A (WG_M + 2)
layout(push_constant) uniform Push {
  y_ref y;
  x_ref x;
  b_ref b;
  Meta meta;
} p;

// The one-dimensional transforms: B^T d, G g and A^T m.
#if WG_M == 2
// B^T = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1]
void inputRows(const float d[4], out float s[4]) {
  s[0] = d[0] - d[2];
  s[1] = d[1] + d[2];
  s[2] = d[2] - d[1];
  s[3] = d[1] - d[3];
}
// G = [1 0 0; 1/2 1/2 1/2; 1/2 -1/2 1/2; 0 0 1]
void weightRows(const float g[3], out float s[4]) {
  s[0] = g[0];
  s[1] = 0.5 * (g[0] + g[1] + g[2]);
  s[2] = 0.5 * (g[0] - g[1] + g[2]);
  s[3] = g[2];
}
// A^T = [1 1 1 0; 0 1 -1 -1]
void outputRows(const float m[4], out float s[2]) {
  s[0] = m[0] + m[1] + m[2];
  s[1] = m[1] - m[2] - m[3];
}
#else
// B^T = [1  3/2  -2  -3/2    1  0;
//        0   -1 -5/2 -1/2    1  0;
//        0    1  1/2 -5/2    1  0;
//        0 -1/2   -1  1/2    1  0;
//        0    2   -1   -2    1  0;
//        0    1  3/2   -2 -3/2  1]
void inputRows(const float d[6], out float s[6]) {
  s[0] = d[0] + 1.5 * (d[1] - d[3]) - 2.0 * d[2] + d[4];
  s[1] = d[4] - d[1] - 2.5 * d[2] - 0.5 * d[3];
  s[2] = d[4] + d[1] + 0.5 * d[2] - 2.5 * d[3];
  s[3] = d[4] - d[2] + 0.5 * (d[3] - d[1]);
  s[4] = d[4] - d[2] + 2.0 * (d[1] - d[3]);
  s[5] = d[1] + d[5] + 1.5 * (d[2] - d[4]) - 2.0 * d[3];
}
// G = [1 0 0; -1/3 -1/3 -1/3; 1/3 -1/3 1/3; 1/15 2/15 4/15;
//      -16/15 8/15 -4/15; 0 0 1]
void weightRows(const float g[3], out float s[6]) {
  s[0] = g[0];
  s[1] = -(g[0] + g[1] + g[2]) / 3.0;
  s[2] = (g[0] - g[1] + g[2]) / 3.0;
  s[3] = (g[0] + 2.0 * g[1] + 4.0 * g[2]) / 15.0;
  s[4] = (-16.0 * g[0] + 8.0 * g[1] - 4.0 * g[2]) / 15.0;
  s[5] = g[2];
}
// A^T = [1 1 1 1 1 0; 0 1 -1 2 -1/2 0; 0 1 1 4 1/4 0; 0 1 -1 8 -1/8 1]
void outputRows(const float m[6], out float s[4]) {
  s[0] = m[0] + m[1] + m[2] + m[3] + m[4];
  s[1] = m[1] - m[2] + 2.0 * m[3] - 0.5 * m[4];
  s[2] = m[1] + m[2] + 4.0 * m[3] + 0.25 * m[4];
  s[3] = m[1] - m[2] + 8.0 * m[3] - 0.125 * m[4] + m[5];
}
#endif

void main() {
  const uint C = p.meta.v[1], O = p.meta.v[4], TP = p.meta.v[12], items = p.meta.v[14];
  const uint stride = gl_NumWorkGroups.x * 256u;
  for (uint id = gl_GlobalInvocationID.x; id < items; id += stride) {
#if defined(WG_INPUT)
    const uint c = id / TP, t = id % TP;
    float d[WG_A][WG_A];
    [[unroll]] for (uint i = 0u; i < WG_A; ++i) {
      [[unroll]] for (uint j = 0u; j < WG_A; ++j) d[i][j] = 0.0;
    }
    if (t < p.meta.v[11]) {
      const uint H = p.meta.v[2], W = p.meta.v[3], TH = p.meta.v[9], TW = p.meta.v[10];
      const uint n = t / (TH * TW), r = t % (TH * TW);
      const int h0 = int(WG_M * (r / TW)) - int(p.meta.v[7]), w0 = int(WG_M * (r % TW)) - int(p.meta.v[8]);
      const uint base = (n * C + c) * H * W;
      [[unroll]] for (int i = 0; i < WG_A; ++i) {
        const int h = h0 + i;
        if (h < 0 || h >= int(H)) continue;
        [[unroll]] for (int j = 0; j < WG_A; ++j) {
          const int w = w0 + j;
          if (w >= 0 && w < int(W)) d[i][j] = LOAD_x(base + uint(h) * W + uint(w));
        }
      }
    }
    // B^T d (each column), then (B^T d) B (each row).
    float s[WG_A][WG_A];
    [[unroll]] for (uint j = 0u; j < WG_A; ++j) {
      float col[WG_A], out_[WG_A];
      [[unroll]] for (uint i = 0u; i < WG_A; ++i) col[i] = d[i][j];
      inputRows(col, out_);
      [[unroll]] for (uint i = 0u; i < WG_A; ++i) s[i][j] = out_[i];
    }
    const uint plane = C * TP, at = c * TP + t;
    [[unroll]] for (uint i = 0u; i < WG_A; ++i) {
      float v[WG_A];
      inputRows(s[i], v);
      [[unroll]] for (uint j = 0u; j < WG_A; ++j) STORE_y((WG_A * i + j) * plane + at, SCALE * v[j]);
    }
#elif defined(WG_WEIGHT)
    const uint o = id / C, c = id % C;
    float g[3][3];
    [[unroll]] for (uint i = 0u; i < 3u; ++i) {
      [[unroll]] for (uint j = 0u; j < 3u; ++j) g[i][j] = LOAD_x(id * 9u + 3u * i + j);
    }
    // G g (each column), then (G g) G^T (each row).
    float s[WG_A][3];
    [[unroll]] for (uint j = 0u; j < 3u; ++j) {
      float col[3] = {g[0][j], g[1][j], g[2][j]}, out_[WG_A];
      weightRows(col, out_);
      [[unroll]] for (uint i = 0u; i < WG_A; ++i) s[i][j] = out_[i];
    }
    const uint plane = O * C, at = o * C + c;
    [[unroll]] for (uint i = 0u; i < WG_A; ++i) {
      float u[WG_A];
      weightRows(s[i], u);
      [[unroll]] for (uint j = 0u; j < WG_A; ++j) STORE_y((WG_A * i + j) * plane + at, SCALE * u[j]);
    }
#else  // WG_OUTPUT
    const uint o = id / TP, t = id % TP;
    if (t >= p.meta.v[11]) continue;
    const uint plane = O * TP, at = o * TP + t;
    float m[WG_A][WG_A];
    [[unroll]] for (uint e = 0u; e < WG_A * WG_A; ++e) m[e / WG_A][e % WG_A] = LOAD_x(e * plane + at);
    // A^T m (each column), then (A^T m) A (each row).
    float s[WG_M][WG_A];
    [[unroll]] for (uint j = 0u; j < WG_A; ++j) {
      float col[WG_A], out_[WG_M];
      [[unroll]] for (uint i = 0u; i < WG_A; ++i) col[i] = m[i][j];
      outputRows(col, out_);
      [[unroll]] for (uint i = 0u; i < WG_M; ++i) s[i][j] = out_[i];
    }
    const float bias = p.meta.v[13] != 0u ? LOAD_b(o) : 0.0;
    const float unscale = 1.0 / (SCALE * SCALE);
    const uint OH = p.meta.v[5], OW = p.meta.v[6], TH = p.meta.v[9], TW = p.meta.v[10];
    const uint n = t / (TH * TW), r = t % (TH * TW);
    const uint oy = WG_M * (r / TW), ox = WG_M * (r % TW);
    const uint base = (n * O + o) * OH * OW;
    [[unroll]] for (uint i = 0u; i < WG_M; ++i) {
      if (oy + i >= OH) continue;
      float y[WG_M];
      outputRows(s[i], y);
      [[unroll]] for (uint j = 0u; j < WG_M; ++j) {
        if (ox + j < OW) STORE_y(base + (oy + i) * OW + ox + j, y[j] * unscale + bias);
      }
    }
#endif
  }
}
