// Convolution as an implicit GEMM (template_conv.cpp chooses it over
// conv.comp for shapes with enough output channels): for one group and one
// output phase, Y[o, m] = sum over k of W[o, k] * X[k, m] with
//   o  an output channel of the group           (GEMM rows, tile BM)
//   m  an output pixel (n, i, j) of the phase    (GEMM columns, tile BN)
//   k  (ci, th, tw): an input channel of the group and a kernel tap
// X is never stored: its tile is gathered from the input on the fly (zero
// outside it: padding), so the GEMM costs no memory beyond the operands.
//
// conv1d/conv2d have one phase: pixel (n, i, j) is output (n, i, j) and
// reads input row i * ISH - IPH + th * MH (ISH the stride, IPH the padding,
// MH the dilation). conv_transpose has one phase per output residue
// (rh, rw) modulo the stride: its outputs rh + SH * i only take the taps
// kh = WH0 + th * WSH whose input row i + BH + th * MH is a whole one, so
// each phase is a plain convolution of stride 1 with fewer taps (some
// phases with none: their outputs are the bias).
//
// The workgroup of 256 invocations computes a BM x BN output tile in K steps
// of BK, as matmul_fast.comp does: both tiles go global -> registers ->
// shared memory (k-major), double-buffered, one barrier per step; each
// invocation accumulates (BM/64*4) x (BN/64*4) outputs in f32 as outer
// products of 4-wide fragments. Index decomposition stays out of the inner
// loop: each invocation loads the W tile at one k (column KA) and the X tile
// at one k (row KB) per step, and carries both k's (ci, th, tw) from step to
// step with two carries instead of divisions; the pixels it gathers are
// decomposed once per tile.
//
// Meta (ints): 0 N, 1 C, 2 H, 3 W, 4 O, 5 OH, 6 OW, 7 G, 8 CG, 9 OG,
// 10 ISH, 11 ISW, 12 IPH, 13 IPW, 14 OSH, 15 OSW, 16 WSO (weight stride per
// output channel), 17 WCI (per input channel), 18 WG (per group), 19 KW
// (the weight's taps per row), 20 has bias, 21 phases; then 16 per phase at
// 24 + 16 * phase: RH RW OHP OWP KHP KWP BH MH BW MW WH0 WSH WW0 WSW.
// Workgroups: x over pixel tiles, y over channel tiles, z over phase * G + g.
#extension GL_EXT_control_flow_attributes : require
layout(local_size_x = 256) in;
layout(push_constant) uniform Push {
  y_ref y;
  x_ref x;
  w_ref w;
  b_ref b;
  Meta meta;
} p;

#define MI(k) int(p.meta.v[k])

const uint SM = BM / 64u;           // 4x4 blocks per invocation along o
const uint SN = BN / 64u;           // ... and along m
const uint TPR = 256u / BK;         // invocations per k row of the X tile
const uint LA = BM * BK / 256u;     // W elements each invocation loads per step
const uint LB = BN / TPR;           // X elements ...

shared vec4 As[2][BK][BM / 4u + 1u];
shared vec4 Bs[2][BK][BN / 4u + 1u];
float pb[LB];  // the next K tile, on its way to shared memory

#ifdef WEIGHT_VEC4
// A conv's weight rows are [CG * KH * KW] contiguous: with K a multiple of 4
// and an aligned weight, its tile moves as 4-element vectors along k (a
// vector is then wholly inside or outside the row), as in matmul_fast.comp.
#if defined(DT_F32)
layout(buffer_reference, std430, buffer_reference_align = 16) buffer Vec4s { vec4 v[]; };
#define FROM_STORED(x) (x)
#elif defined(DT_F16)
layout(buffer_reference, std430, buffer_reference_align = 8) buffer Vec4s { f16vec4 v[]; };
#define FROM_STORED(x) vec4(x)
#elif defined(DT_BF16)
layout(buffer_reference, std430, buffer_reference_align = 8) buffer Vec4s { u16vec4 v[]; };
#define FROM_STORED(x) uintBitsToFloat(uvec4(x) << 16)
#endif
const uint KV = BK / 4u;                 // vec4s along k of one weight row of the tile
const uint AV = BM * KV;                 // vec4s in the weight tile
const uint LAV = (AV + 255u) / 256u;     // per invocation
vec4 pa[LAV];
#else
float pa[LA];
#endif

// Geometry of the current (phase, group).
int H, W, HW, OG, K, WSO, WCI, KW;
int KHP, KWP, BH, MH, BW, MW, WH0, WSH, WW0, WSW;
uint xg, wg;  // the group's first input element and weight
// k = (ci * KHP + th) * KWP + tw of the two k's this invocation loads, and
// the step that carries them BK further.
ivec3 ka, kb, kstep;
int kaIdx, kbIdx;
// The pixels of the X tile this invocation gathers: the input element of
// tap (0, 0) of channel 0 (may lie outside), its row and column.
int pbase[LB], prow[LB], pcol[LB];

ivec3 decompose(int k) {
  const int taps = KHP * KWP;
  const int ci = k / taps, r = k - ci * taps;
  const int th = r / KWP;
  return ivec3(ci, th, r - th * KWP);
}

ivec3 advance(ivec3 d) {
  d.z += kstep.z;
  const int cw = d.z >= KWP ? 1 : 0;
  d.z -= cw * KWP;
  d.y += kstep.y + cw;
  const int ch = d.y >= KHP ? 1 : 0;
  d.y -= ch * KHP;
  d.x += kstep.x + ch;
  return d;
}

// X_ALL_INSIDE (no padding, not transposed: every tap of every pixel lies
// in the input; only pixels past the last, k past K and channels past OG
// are outside): every load is unconditional, from the operand's first
// element for what lies outside, zeroed after the load, and the last K
// step fetches too (a tile of zeros). Loads behind branches had held
// matmul_fast.comp well below its rate on an H100; here ResNet-50's last
// 1x1 convolution (7x7 images, too few pixels for the matmul route) went
// from 15.8-16.3 to 19.3 TFLOP/s. With padding, where many of the
// gather's loads fall outside, the same cost 11-14% (the 7x7 stride-2 stem,
// conv_transpose2d 4x4 stride 2), so the branches stay there.
#ifdef X_ALL_INSIDE
#define LOAD_IF(cond, dst, T, load_at, at, zero) \
  {                                              \
    const bool in_ = (cond);                     \
    const T v_ = load_at(in_ ? (at) : 0u);       \
    dst = in_ ? v_ : (zero);                     \
  }
#else
#define LOAD_IF(cond, dst, T, load_at, at, zero) \
  {                                              \
    dst = (zero);                                \
    if (cond) dst = load_at(at);                 \
  }
#endif

#ifdef WEIGHT_VEC4
vec4 loadW4(uint i) { return FROM_STORED(Vec4s(uint64_t(p.w)).v[i >> 2]); }
#endif
float loadW(uint i) { return float(LOAD_w(i)); }
float loadX(uint i) { return float(LOAD_x(i)); }

void fetch(uint o0, uint k0, uint t) {
#ifdef WEIGHT_VEC4
  [[unroll]] for (uint j = 0u; j < LAV; ++j) {
    const uint idx = t + 256u * j;
    const uint o = o0 + idx / KV, k = k0 + (idx % KV) * 4u;
    LOAD_IF(idx < AV && o < uint(OG) && k < uint(K), pa[j], vec4, loadW4, wg + o * uint(WSO) + k, vec4(0.0));
  }
#else
  {
    const bool valid = kaIdx < K;
    const uint woff = wg + uint(ka.x * WCI + (WH0 + ka.y * WSH) * KW + WW0 + ka.z * WSW);
    [[unroll]] for (uint j = 0u; j < LA; ++j) {
      const uint o = o0 + t / BK + (256u / BK) * j;
      LOAD_IF(valid && o < uint(OG), pa[j], float, loadW, woff + o * uint(WSO), 0.0);
    }
  }
#endif
  {
    const bool valid = kbIdx < K;
    const int dh = BH + kb.y * MH, dw = BW + kb.z * MW;
    const int koff = int(xg) + kb.x * HW + dh * W + dw;
    [[unroll]] for (uint j = 0u; j < LB; ++j) {
      const bool inside = valid && uint(prow[j] + dh) < uint(H) && uint(pcol[j] + dw) < uint(W);
      LOAD_IF(inside, pb[j], float, loadX, uint(pbase[j] + koff), 0.0);
    }
  }
  ka = advance(ka);
  kb = advance(kb);
  kaIdx += int(BK);
  kbIdx += int(BK);
}

void stash(uint buf, uint t) {
#ifdef WEIGHT_VEC4
  [[unroll]] for (uint j = 0u; j < LAV; ++j) {
    const uint idx = t + 256u * j;
    if (idx >= AV) continue;
    const uint row = idx / KV, kq = (idx % KV) * 4u;
    [[unroll]] for (uint i = 0u; i < 4u; ++i) As[buf][kq + i][row >> 2][row & 3u] = pa[j][i];
  }
#else
  const uint kA = t % BK;
  [[unroll]] for (uint j = 0u; j < LA; ++j) {
    const uint row = t / BK + (256u / BK) * j;
    As[buf][kA][row >> 2][row & 3u] = pa[j];
  }
#endif
  const uint kB = t / TPR;
  [[unroll]] for (uint j = 0u; j < LB; ++j) {
    const uint col = t % TPR + TPR * j;
    Bs[buf][kB][col >> 2][col & 3u] = pb[j];
  }
}

void main() {
  const int N = MI(0), C = MI(1), O = MI(4), OH = MI(5), OW = MI(6), G = MI(7), CG = MI(8);
  const int ISH = MI(10), ISW = MI(11), IPH = MI(12), IPW = MI(13), OSH = MI(14), OSW = MI(15), WG = MI(18);
  const bool hasBias = MI(20) != 0;
  const int phases = MI(21);
  H = MI(2), W = MI(3), HW = H * W, OG = MI(9), WSO = MI(16), WCI = MI(17), KW = MI(19);
  const uint t = gl_LocalInvocationIndex, group = t >> 5u, lane = t & 31u;
  // This invocation's first row and column (vec4 index) inside the tile.
  const uint row0 = (group >> 2u) * (BM / 2u) + (lane >> 2u) * 4u;
  const uint col0 = ((group & 3u) * (BN / 4u) + (lane & 3u) * 4u) >> 2u;
  for (uint z = gl_WorkGroupID.z; z < uint(phases * G); z += gl_NumWorkGroups.z) {
    const int ph = int(z) / G, g = int(z) - ph * G;
    const int q = 24 + 16 * ph;
    const int RH = MI(q), RW = MI(q + 1), OHP = MI(q + 2), OWP = MI(q + 3);
    KHP = MI(q + 4), KWP = MI(q + 5), BH = MI(q + 6), MH = MI(q + 7), BW = MI(q + 8), MW = MI(q + 9);
    WH0 = MI(q + 10), WSH = MI(q + 11), WW0 = MI(q + 12), WSW = MI(q + 13);
    K = CG * KHP * KWP;
    const int plane = OHP * OWP;
    const uint pixels = uint(N * plane);
    if (pixels == 0u) continue;
    xg = uint(g * CG) * uint(HW);
    wg = uint(g * WG);
    kstep = K > 0 ? decompose(int(BK)) : ivec3(0);
    const uint kTiles = (uint(K) + BK - 1u) / BK;
    for (uint o0 = gl_WorkGroupID.y * BM; o0 < uint(OG); o0 += gl_NumWorkGroups.y * BM) {
      for (uint m0 = gl_WorkGroupID.x * BN; m0 < pixels; m0 += gl_NumWorkGroups.x * BN) {
        [[unroll]] for (uint j = 0u; j < LB; ++j) {
          const uint m = m0 + t % TPR + TPR * j;
          if (m < pixels) {
            const int n = int(m) / plane, r = int(m) - n * plane;
            const int i = r / OWP, jj = r - i * OWP;
            prow[j] = i * ISH - IPH;
            pcol[j] = jj * ISW - IPW;
            pbase[j] = n * C * HW + prow[j] * W + pcol[j];
          } else {
            prow[j] = -0x20000000;  // outside for every tap
            pcol[j] = 0;
            pbase[j] = 0;
          }
        }
        kaIdx = int(t % BK);
        kbIdx = int(t / TPR);
        if (K > 0) {
          ka = decompose(kaIdx);
          kb = decompose(kbIdx);
        }
        vec4 acc[SM * 4u][SN];
        [[unroll]] for (uint r = 0u; r < SM * 4u; ++r) {
          [[unroll]] for (uint c = 0u; c < SN; ++c) acc[r][c] = vec4(0.0);
        }
        if (kTiles > 0u) {
          fetch(o0, 0u, t);
          stash(0u, t);
        }
        barrier();
        for (uint kt = 0u; kt < kTiles; ++kt) {
          const uint cur = kt & 1u;
#ifdef X_ALL_INSIDE
          const bool more = true;  // past K the fetch loads zeros (see LOAD_IF)
#else
          const bool more = kt + 1u < kTiles;
#endif
          if (more) fetch(o0, (kt + 1u) * BK, t);
          [[unroll]] for (uint k = 0u; k < BK; ++k) {
            vec4 av[SM], bv[SN];
            [[unroll]] for (uint s = 0u; s < SM; ++s) av[s] = As[cur][k][(row0 >> 2u) + 8u * s];
            [[unroll]] for (uint s = 0u; s < SN; ++s) bv[s] = Bs[cur][k][col0 + 4u * s];
            [[unroll]] for (uint s = 0u; s < SM; ++s) {
              [[unroll]] for (uint i = 0u; i < 4u; ++i) {
                [[unroll]] for (uint c = 0u; c < SN; ++c) acc[s * 4u + i][c] += av[s][i] * bv[c];
              }
            }
          }
          if (more) stash(cur ^ 1u, t);
          barrier();
        }
        // Where each of this invocation's pixels goes in y (channel 0 of the group).
        int ypix[SN * 4u];
        [[unroll]] for (uint c = 0u; c < SN; ++c) {
          [[unroll]] for (uint e = 0u; e < 4u; ++e) {
            const uint m = m0 + (col0 + 4u * c) * 4u + e;
            const int n = int(m) / plane, r = int(m) - n * plane;
            const int i = r / OWP, jj = r - i * OWP;
            ypix[c * 4u + e] = m < pixels ? (n * O + g * OG) * OH * OW + (RH + OSH * i) * OW + RW + OSW * jj : -1;
          }
        }
        [[unroll]] for (uint s = 0u; s < SM; ++s) {
          [[unroll]] for (uint i = 0u; i < 4u; ++i) {
            const uint o = o0 + row0 + 32u * s + i;
            if (o >= uint(OG)) continue;
            float bias = 0.0;
            if (hasBias) bias = float(LOAD_b(uint(g * OG) + o));
            const uint yo = o * uint(OH * OW);
            [[unroll]] for (uint c = 0u; c < SN; ++c) {
              [[unroll]] for (uint e = 0u; e < 4u; ++e) {
                const int at = ypix[c * 4u + e];
                if (at >= 0) STORE_y(uint(at) + yo, acc[s * 4u + i][c][e] + bias);
              }
            }
          }
        }
      }
    }
  }
}
