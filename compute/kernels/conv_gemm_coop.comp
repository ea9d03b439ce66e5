// Tensor-core path of the implicit-GEMM convolution for f16 and bf16
// (cooperative matrices, accumulating in f32): the same GEMM as
// conv_gemm.comp, Y[o, m] = sum over k of W[o, k] * X[k, m] per group and
// output phase, with the same push constants, meta words and workgroup grid
// (x over pixel tiles, y over channel tiles, z over phase * G + g);
// template_conv.cpp chooses it for f16 on devices that report the 16x16x16
// f16 -> f32 subgroup product (DeviceFeatures::coopMatrixF16), and for bf16
// as BF16_OPERANDS below says.
//
// A workgroup of NT invocations (NT / 32 subgroups in a WARPS_M x WARPS_N
// grid, each owning WM x WN outputs as 16x16 f32 accumulator fragments)
// computes a BM x BN output tile in K steps of BK. Both tiles go global ->
// registers -> shared memory as f16, W as [BM][BK] and the gathered X as
// [BK][BN], rows padded by 8 halves so the fragment loads of 8 rows hit
// distinct banks; double-buffered, one barrier per step, as in
// conv_gemm.comp. The index decomposition is conv_gemm.comp's: each
// invocation carries the k of the W column and the X row it loads from step
// to step. The epilogue passes each fragment through shared memory so every
// store of a subgroup writes 16 consecutive pixels of two channels; where
// each pixel goes in y is worked out once per tile (Ypix).
//
// BF16_OPERANDS (bf16 tensors, TAP_MAJOR only, DeviceFeatures::coopMatrixBf16):
// the operands move as the same 16-bit words and the kernel cache makes the
// fragments bf16 in the SPIR-V (spirv_coop.h).
//
// TAP_MAJOR (a conv whose input channels per group are a multiple of BK):
// K runs over the taps, and inside a tap over the channels, so a K step is
// BK channels at one tap. A pixel's bounds test and address are then worked
// out once per step, and its BK / 4 loads each add one channel stride; each
// invocation gathers two adjacent pixels per channel and stores them as one
// 32-bit word. Both tiles are then kept as pairs of halves (uints).
#extension GL_EXT_control_flow_attributes : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_NV_cooperative_matrix : require
#extension GL_KHR_shader_subgroup_basic : require
layout(local_size_x = NT) in;
layout(push_constant) uniform Push {
  y_ref y;
  x_ref x;
  w_ref w;
  b_ref b;
  Meta meta;
} p;

#define MI(k) int(p.meta.v[k])

const int kScope = 3;  // gl_ScopeSubgroup
// B's scope is a specialization constant so that B's fragments are a type of
// their own, which spirv_coop.h needs to rewrite them for the KHR extension.
layout(constant_id = 0) const int kScopeB = 3;
#define FragA fcoopmatNV<16, kScope, 16, 16>
#define FragB fcoopmatNV<16, kScopeB, 16, 16>
#define FragAcc fcoopmatNV<32, kScope, 16, 16>

const uint WARPS_M = BM / WM, WARPS_N = BN / WN;  // NT / 32 subgroups in all
const uint FM = WM / 16u, FN = WN / 16u;          // fragments per subgroup
const uint TPR = NT / BK;                         // invocations per k row of the X tile
const uint LA = BM * BK / NT;                     // W elements each invocation loads per step
const uint LB = BN / TPR;                         // X elements ...
const uint AS = BK + 8u, BS = BN + 8u;            // row strides (halves) of the shared tiles
const uint ATILE = BM * AS, BTILE = BK * BS;

// A stored element's 16 bits (f16, or bf16 stored as uint16_t).
#ifdef BF16_OPERANDS
#define BITS(x) uint(x)
#else
#define BITS(x) packFloat2x16(f16vec2(x, float16_t(0.0)))
#endif

#ifdef TAP_MAJOR
const uint UNIT = 2u;                   // halves per element of the shared tiles
const uint PAIRS = BN / 2u;             // pixel pairs of a tile row
const uint CPT = BK / (NT / PAIRS);     // channels each invocation gathers per step
const uint LAP = BM * BK / 2u / NT;     // weight pairs each invocation loads per step
shared uint As[2u * ATILE / 2u];
shared uint Bs[2u * BTILE / 2u];
uint pa[LAP], pb[CPT];                  // the next K tile, on its way to shared memory
int th, tw, c0;                         // the tap and first channel of the K step fetched next
int pbase[2], prow[2], pcol[2];         // this invocation's two pixels, as below
#else
const uint UNIT = 1u;
shared float16_t As[2u * ATILE];
shared float16_t Bs[2u * BTILE];
float16_t pb[LB];
#endif
#ifdef TAP_MAJOR
// One 16x16 f32 fragment per subgroup on its way out, in As (free by then;
// BM * (BK + 8) words, at least the 256 per subgroup this needs for the
// tiles template_conv.cpp uses).
#define Cs As
#define CS_LOAD(i) uintBitsToFloat(As[i])
#else
shared float Cs[NT * 8u];  // one 16x16 fragment per subgroup on its way out
#define CS_LOAD(i) Cs[i]
#endif
shared int Ypix[BN];         // where each pixel of the tile goes in y (channel 0 of the group), -1 past the end

#if defined(TAP_MAJOR)
#elif defined(WEIGHT_VEC4)
// Weight rows contiguous along k, K a multiple of 4, an aligned weight: the
// W tile moves as 4-element vectors (wholly inside or outside a row).
layout(buffer_reference, std430, buffer_reference_align = 8) buffer Vec4s { f16vec4 v[]; };
const uint KV = BK / 4u;              // vectors along k of one weight row of the tile
const uint AV = BM * KV;              // vectors in the weight tile
const uint LAV = (AV + NT - 1u) / NT;  // per invocation
f16vec4 pa[LAV];
#else
float16_t pa[LA];
#endif

// Geometry of the current (phase, group).
int H, W, HW, OG, K, WSO, WCI, KW;
int KHP, KWP, BH, MH, BW, MW, WH0, WSH, WW0, WSW;
uint xg, wg;  // the group's first input element and weight
#ifndef TAP_MAJOR
// k = (ci * KHP + th) * KWP + tw of the two k's this invocation loads, and
// the step that carries them BK further.
ivec3 ka, kb, kstep;
int kaIdx, kbIdx;
// The pixels of the X tile this invocation gathers: the input element of
// tap (0, 0) of channel 0 (may lie outside), its row and column.
int pbase[LB], prow[LB], pcol[LB];
#endif

#ifdef TAP_MAJOR
void fetch(uint o0, uint k0, uint t) {
  const int dh = BH + th * MH, dw = BW + tw * MW;
  const uint woff = wg + uint(c0 * WCI + (WH0 + th * WSH) * KW + WW0 + tw * WSW);
  [[unroll]] for (uint j = 0u; j < LAP; ++j) {
    const uint idx = t + NT * j, o = o0 + idx / (BK / 2u), at = woff + (idx % (BK / 2u)) * 2u * uint(WCI);
    pa[j] = 0u;
    if (o < uint(OG)) pa[j] = BITS(p.w.v[at + o * uint(WSO)]) | BITS(p.w.v[at + o * uint(WSO) + uint(WCI)]) << 16;
  }
  const int c = c0 + int((t / PAIRS) * CPT);
  bool inside[2];
  int at[2];
  [[unroll]] for (uint e = 0u; e < 2u; ++e) {
    inside[e] = uint(prow[e] + dh) < uint(H) && uint(pcol[e] + dw) < uint(W);
    at[e] = int(xg) + pbase[e] + dh * W + dw + c * HW;
  }
  [[unroll]] for (uint i = 0u; i < CPT; ++i) {
    uint v = 0u;
    if (inside[0]) v = BITS(p.x.v[uint(at[0] + int(i) * HW)]);
    if (inside[1]) v |= BITS(p.x.v[uint(at[1] + int(i) * HW)]) << 16;
    pb[i] = v;
  }
  c0 += int(BK);
  if (c0 >= K / (KHP * KWP)) {
    c0 = 0;
    if (++tw == KWP) {
      tw = 0;
      ++th;
    }
  }
}

void stash(uint buf, uint t) {
  [[unroll]] for (uint j = 0u; j < LAP; ++j) {
    const uint idx = t + NT * j;
    As[(buf * ATILE + (idx / (BK / 2u)) * AS) / 2u + idx % (BK / 2u)] = pa[j];
  }
  const uint at = (buf * BTILE + (t / PAIRS) * CPT * BS) / 2u + t % PAIRS;
  [[unroll]] for (uint i = 0u; i < CPT; ++i) Bs[at + i * (BS / 2u)] = pb[i];
}
#else
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

void fetch(uint o0, uint k0, uint t) {
#ifdef WEIGHT_VEC4
  [[unroll]] for (uint j = 0u; j < LAV; ++j) {
    const uint idx = t + NT * j;
    const uint o = o0 + idx / KV, k = k0 + (idx % KV) * 4u;
    pa[j] = f16vec4(0.0);
    if (idx < AV && o < uint(OG) && k < uint(K)) pa[j] = Vec4s(uint64_t(p.w)).v[(wg + o * uint(WSO) + k) >> 2];
  }
#else
  {
    const bool valid = kaIdx < K;
    const uint woff = wg + uint(ka.x * WCI + (WH0 + ka.y * WSH) * KW + WW0 + ka.z * WSW);
    [[unroll]] for (uint j = 0u; j < LA; ++j) {
      const uint o = o0 + t / BK + (NT / BK) * j;
      pa[j] = float16_t(0.0);
      if (valid && o < uint(OG)) pa[j] = p.w.v[woff + o * uint(WSO)];
    }
  }
#endif
  {
    const bool valid = kbIdx < K;
    const int dh = BH + kb.y * MH, dw = BW + kb.z * MW;
    const int koff = int(xg) + kb.x * HW + dh * W + dw;
    [[unroll]] for (uint j = 0u; j < LB; ++j) {
      const bool inside = valid && uint(prow[j] + dh) < uint(H) && uint(pcol[j] + dw) < uint(W);
      pb[j] = float16_t(0.0);
      if (inside) pb[j] = p.x.v[uint(pbase[j] + koff)];
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
    const uint idx = t + NT * j;
    if (idx >= AV) continue;
    const uint at = buf * ATILE + (idx / KV) * AS + (idx % KV) * 4u;
    [[unroll]] for (uint i = 0u; i < 4u; ++i) As[at + i] = pa[j][i];
  }
#else
  const uint kA = t % BK;
  [[unroll]] for (uint j = 0u; j < LA; ++j) As[buf * ATILE + (t / BK + (NT / BK) * j) * AS + kA] = pa[j];
#endif
  const uint at = buf * BTILE + (t / TPR) * BS + t % TPR;
  [[unroll]] for (uint j = 0u; j < LB; ++j) Bs[at + TPR * j] = pb[j];
}
#endif

void main() {
  const int N = MI(0), C = MI(1), O = MI(4), OH = MI(5), OW = MI(6), G = MI(7), CG = MI(8);
  const int ISH = MI(10), ISW = MI(11), IPH = MI(12), IPW = MI(13), OSH = MI(14), OSW = MI(15), WG = MI(18);
  const bool hasBias = MI(20) != 0;
  const int phases = MI(21);
  H = MI(2), W = MI(3), HW = H * W, OG = MI(9), WSO = MI(16), WCI = MI(17), KW = MI(19);
  const uint t = gl_LocalInvocationIndex, warp = t >> 5u, lane = t & 31u;
  const uint wm = (warp / WARPS_N) * WM, wn = (warp % WARPS_N) * WN;  // this subgroup's outputs in the tile
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
#ifndef TAP_MAJOR
    kstep = K > 0 ? decompose(int(BK)) : ivec3(0);
#endif
    const uint kTiles = (uint(K) + BK - 1u) / BK;
    for (uint o0 = gl_WorkGroupID.y * BM; o0 < uint(OG); o0 += gl_NumWorkGroups.y * BM) {
      for (uint m0 = gl_WorkGroupID.x * BN; m0 < pixels; m0 += gl_NumWorkGroups.x * BN) {
#ifdef TAP_MAJOR
        [[unroll]] for (uint e = 0u; e < 2u; ++e) {
          const uint m = m0 + (t % PAIRS) * 2u + e;
#else
        [[unroll]] for (uint e = 0u; e < LB; ++e) {
          const uint m = m0 + t % TPR + TPR * e;
#endif
          if (m < pixels) {
            const int n = int(m) / plane, r = int(m) - n * plane;
            const int i = r / OWP, jj = r - i * OWP;
            prow[e] = i * ISH - IPH;
            pcol[e] = jj * ISW - IPW;
            pbase[e] = n * C * HW + prow[e] * W + pcol[e];
          } else {
            prow[e] = -0x20000000;  // outside for every tap
            pcol[e] = 0;
            pbase[e] = 0;
          }
        }
        for (uint c = t; c < BN; c += NT) {
          const uint m = m0 + c;
          const int n = int(m) / plane, r = int(m) - n * plane;
          const int i = r / OWP, jj = r - i * OWP;
          Ypix[c] = m < pixels ? (n * O + g * OG) * OH * OW + (RH + OSH * i) * OW + RW + OSW * jj : -1;
        }
#ifdef TAP_MAJOR
        th = 0, tw = 0, c0 = 0;
#else
        kaIdx = int(t % BK);
        kbIdx = int(t / TPR);
        if (K > 0) {
          ka = decompose(kaIdx);
          kb = decompose(kbIdx);
        }
#endif
        FragAcc acc[FM][FN];
        [[unroll]] for (uint i = 0u; i < FM; ++i) {
          [[unroll]] for (uint j = 0u; j < FN; ++j) acc[i][j] = FragAcc(0.0);
        }
        if (kTiles > 0u) {
          fetch(o0, 0u, t);
          stash(0u, t);
        }
        barrier();
        for (uint kt = 0u; kt < kTiles; ++kt) {
          const uint cur = kt & 1u;
          const bool more = kt + 1u < kTiles;
          if (more) fetch(o0, (kt + 1u) * BK, t);
          [[unroll]] for (uint kk = 0u; kk < BK; kk += 16u) {
            FragA fa[FM];
            FragB fb[FN];
            [[unroll]] for (uint i = 0u; i < FM; ++i) {
              coopMatLoadNV(fa[i], As, (cur * ATILE + (wm + 16u * i) * AS + kk) / UNIT, AS / UNIT, false);
            }
            [[unroll]] for (uint j = 0u; j < FN; ++j) {
              coopMatLoadNV(fb[j], Bs, (cur * BTILE + kk * BS + wn + 16u * j) / UNIT, BS / UNIT, false);
            }
            [[unroll]] for (uint i = 0u; i < FM; ++i) {
              [[unroll]] for (uint j = 0u; j < FN; ++j) acc[i][j] = coopMatMulAddNV(fa[i], fb[j], acc[i][j]);
            }
          }
          if (more) stash(cur ^ 1u, t);
          barrier();
        }
        // Epilogue: lane l takes column l % 16 of the fragment, rows l / 16,
        // l / 16 + 2, ...: each store writes 16 consecutive pixels of two channels.
        const uint frag = warp * 256u, col = lane & 15u, row0 = lane >> 4u;
        [[unroll]] for (uint i = 0u; i < FM; ++i) {
          [[unroll]] for (uint j = 0u; j < FN; ++j) {
            coopMatStoreNV(acc[i][j], Cs, frag, 16u, false);
            subgroupMemoryBarrierShared();
            subgroupBarrier();
            const int at = Ypix[wn + 16u * j + col];
            [[unroll]] for (uint e = 0u; e < 8u; ++e) {
              const uint row = row0 + 2u * e, o = o0 + wm + 16u * i + row;
              if (at < 0 || o >= uint(OG)) continue;
              float v = CS_LOAD(frag + row * 16u + col);
              if (hasBias) v += LOAD_b(uint(g * OG) + o);
              STORE_y(uint(at) + o * uint(OH * OW), v);
            }
            subgroupMemoryBarrierShared();
            subgroupBarrier();
          }
        }
        barrier();  // Ypix and the first buffers belong to the next tile
      }
    }
  }
}
