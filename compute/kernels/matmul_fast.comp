// Fast path of the matrix product for f32/f16/bf16 (accumulating in float):
// y = alpha * (a @ b) + beta * c over a batch, where a is a row-major
// [M, K] and b is either [K, N] (unit stride along N) or, with TRANS_B,
// [N, K] (unit stride along K: linear's weight); rows may be longer than
// the product reads (row strides lda >= K, meta word 8, and ldb, word 10 or
// 11: split K's slices). Same push constants and meta words as matmul.comp;
// template_matmul.cpp's record() chooses it.
//
// A workgroup of 256 invocations computes a BM x BN output tile in K steps of
// BK. Tiles of a and b go global -> registers -> shared memory, a (and a
// transposed b) stored k-major (As[k][m]) so the inner loop reads vec4s of
// both operands; each invocation accumulates (BM/64*4) x (BN/64*4) outputs as
// outer products of 4-wide fragments. Two shared buffers: the next K tile is
// loaded into registers while the current one is multiplied, then stored
// into the other buffer, so one barrier per K step suffices.
//
// Layout of the invocations: 8 groups of 32 (one subgroup on most GPUs) in
// 2 (m) x 4 (n), each group 8 (m) x 4 (n) invocations, each invocation a
// grid of 4x4 blocks strided by 32 rows and 16 columns: a subgroup's shared
// reads are 8 (a) and 4 (b) distinct vec4s, each broadcast.
//
// INNER_ONLY: M, N and K are whole numbers of tiles and K steps, so there are
// no edge tiles and only the inner copy of the K loop is compiled.
//
// ALIGNED: every row length and row stride is a multiple of 4 and the bases
// are aligned, so operands move as 4-element vectors (a vector is then wholly
// inside or outside the matrix); otherwise element by element. Edge tiles are
// zero-filled on load and guarded on store.
#extension GL_EXT_control_flow_attributes : require
layout(local_size_x = 256) in;
layout(push_constant) uniform Push {
  a_ref a;
  b_ref b;
  c_ref c;
  y_ref y;
  Meta meta;
} p;

// Four elements as stored <-> vec4 (16-bit types exist only in buffers here).
#if defined(DT_F32)
layout(buffer_reference, std430, buffer_reference_align = 16) buffer Vec4s { vec4 v[]; };
#define FROM_STORED(x) (x)
#define TO_STORED(x) (x)
#elif defined(DT_F16)
layout(buffer_reference, std430, buffer_reference_align = 8) buffer Vec4s { f16vec4 v[]; };
#define FROM_STORED(x) vec4(x)
#define TO_STORED(x) f16vec4(x)
#elif defined(DT_BF16)
layout(buffer_reference, std430, buffer_reference_align = 8) buffer Vec4s { u16vec4 v[]; };
uvec4 toBf16(vec4 x) { return uvec4(float_to_bf16(x.x), float_to_bf16(x.y), float_to_bf16(x.z), float_to_bf16(x.w)); }
#define FROM_STORED(x) uintBitsToFloat(uvec4(x) << 16)
#define TO_STORED(x) u16vec4(toBf16(x))
#endif

// Element i (a multiple of 4) and the three after it.
vec4 load4(uint64_t base, uint i) { return FROM_STORED(Vec4s(base).v[i >> 2]); }

const uint SM = BM / 64u;           // 4x4 blocks per invocation along m
const uint SN = BN / 64u;           // ... and along n
const uint KV = BK / 4u;            // vec4s along k of one row of a k-contiguous tile
const uint AV = BM * BK / 4u;       // vec4s in an A tile
const uint BV = BN * BK / 4u;       // ... in a B tile
const uint LA = (AV + 255u) / 256u; // per invocation
const uint LB = (BV + 255u) / 256u;

// +1 vec4 per row: the transposed stores of a subgroup then hit distinct banks.
shared vec4 As[2][BK][BM / 4u + 1u];
shared vec4 Bs[2][BK][BN / 4u + 1u];
vec4 pa[LA], pb[LB];  // the next K tile, on its way to shared memory

uint M, N, K, lda, ldb;

// Every load below is unconditional. In a tile wholly inside the product
// (`edge` false: main() calls product() with a constant, so the compiler
// makes a copy of the K loop for inner tiles and one for edge tiles) it reads
// its address as is; in an edge tile the address is clamped into the matrix
// and what lies outside is zeroed after the load. With loads behind bounds
// branches (and a fetch skipped on the last K step) an H100 ran this kernel
// at 37 TFLOP/s at 8192, as if the driver's compiler waited for each load
// where it is stored; 44.7 with clamps in every tile, 45.9 as here
// (docs/PERFORMANCE.md).

// 4 elements of a k-contiguous matrix (a, or b with TRANS_B) at (row, k..k+3).
vec4 loadRowK(uint64_t base, uint off, uint row, uint rows, uint k, uint ld, bool isA, bool edge) {
#ifdef ALIGNED
  if (!edge) return load4(base, off + row * ld + k);
#else
  if (!edge) {
    uint j = off + row * ld + k;
    return isA ? vec4(LOAD_a(j), LOAD_a(j + 1u), LOAD_a(j + 2u), LOAD_a(j + 3u))
               : vec4(LOAD_b(j), LOAD_b(j + 1u), LOAD_b(j + 2u), LOAD_b(j + 3u));
  }
#endif
  uint at = off + min(row, rows - 1u) * ld;
#ifdef ALIGNED
  vec4 v = load4(base, at + min(k, K - 4u));  // K is a multiple of 4 here
  return row < rows && k < K ? v : vec4(0.0);
#else
  vec4 v;
  [[unroll]] for (uint i = 0u; i < 4u; ++i) {
    uint j = at + min(k + i, K - 1u);
    float x = isA ? LOAD_a(j) : LOAD_b(j);
    v[i] = row < rows && k + i < K ? x : 0.0;
  }
  return v;
#endif
}

void fetch(uint aoff, uint boff, uint m0, uint n0, uint k0, uint t, bool edge) {
  [[unroll]] for (uint j = 0u; j < LA; ++j) {
    uint idx = t + 256u * j;
    if (idx < AV) pa[j] = loadRowK(uint64_t(p.a), aoff, m0 + idx / KV, M, k0 + (idx % KV) * 4u, lda, true, edge);
  }
  [[unroll]] for (uint j = 0u; j < LB; ++j) {
    uint idx = t + 256u * j;
    if (idx >= BV) continue;
#ifdef TRANS_B
    pb[j] = loadRowK(uint64_t(p.b), boff, n0 + idx / KV, N, k0 + (idx % KV) * 4u, ldb, false, edge);
#else
    uint gk = k0 + idx / (BN / 4u), gn = n0 + (idx % (BN / 4u)) * 4u;
    if (!edge) {  // 4 consecutive elements of row gk, as loadRowK reads them
      pb[j] = loadRowK(uint64_t(p.b), boff, gk, K, gn, ldb, false, false);
      continue;
    }
    uint at = boff + min(gk, K - 1u) * ldb;
#ifdef ALIGNED
    vec4 v = load4(uint64_t(p.b), at + min(gn, N - 4u));  // N is a multiple of 4 here
    pb[j] = gk < K && gn < N ? v : vec4(0.0);
#else
    vec4 v;
    [[unroll]] for (uint i = 0u; i < 4u; ++i) {
      float x = LOAD_b(at + min(gn + i, N - 1u));
      v[i] = gk < K && gn + i < N ? x : 0.0;
    }
    pb[j] = v;
#endif
#endif
  }
}

void stash(uint buf, uint t) {
  [[unroll]] for (uint j = 0u; j < LA; ++j) {
    uint idx = t + 256u * j;
    if (idx >= AV) continue;
    uint row = idx / KV, kq = (idx % KV) * 4u;
    [[unroll]] for (uint i = 0u; i < 4u; ++i) As[buf][kq + i][row >> 2][row & 3u] = pa[j][i];
  }
  [[unroll]] for (uint j = 0u; j < LB; ++j) {
    uint idx = t + 256u * j;
    if (idx >= BV) continue;
#ifdef TRANS_B
    uint col = idx / KV, kq = (idx % KV) * 4u;
    [[unroll]] for (uint i = 0u; i < 4u; ++i) Bs[buf][kq + i][col >> 2][col & 3u] = pb[j][i];
#else
    Bs[buf][idx / (BN / 4u)][idx % (BN / 4u)] = pb[j];
#endif
  }
}

vec4 acc[SM * 4u][SN];  // this invocation's outputs

// acc += this tile's rows of a @ its columns of b, K step by K step.
void product(uint aoff, uint boff, uint m0, uint n0, uint t, uint kTiles, uint row0, uint col0, bool edge) {
  fetch(aoff, boff, m0, n0, 0u, t, edge);
  stash(0u, t);
  barrier();
  for (uint kt = 0u; kt < kTiles; ++kt) {
    uint cur = kt & 1u;
    // The last step fetches and stores its own tile again, into the
    // buffer nobody reads any more (no branch around the loads).
    fetch(aoff, boff, m0, n0, min(kt + 1u, kTiles - 1u) * BK, t, edge);
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
    stash(cur ^ 1u, t);
    barrier();
  }
}

void main() {
  M = p.meta.v[0], N = p.meta.v[1], K = p.meta.v[2];
  uint batch = p.meta.v[3], batchRank = p.meta.v[4];
  bool hasBias = p.meta.v[5] != 0u;
  float alpha = uintBitsToFloat(p.meta.v[6]), beta = uintBitsToFloat(p.meta.v[7]);
  uint scm = p.meta.v[12], scn = p.meta.v[13];
  lda = p.meta.v[8];
#ifdef TRANS_B
  ldb = p.meta.v[11];
#else
  ldb = p.meta.v[10];
#endif
  uint t = gl_LocalInvocationIndex, group = t >> 5u, lane = t & 31u;
  // This invocation's first row and column (vec4 index) inside the tile.
  uint row0 = (group >> 2u) * (BM / 2u) + (lane >> 2u) * 4u;
  uint col0 = ((group & 3u) * (BN / 4u) + (lane & 3u) * 4u) >> 2u;
  uint kTiles = (K + BK - 1u) / BK;
  for (uint bi = gl_WorkGroupID.z; bi < batch; bi += gl_NumWorkGroups.z) {
    uint aoff = 0u, boff = 0u, coff = 0u, rem = bi;
    for (int d = int(batchRank) - 1; d >= 0; --d) {
      uint size = p.meta.v[14 + d];
      uint idx = rem % size;
      rem /= size;
      aoff += idx * p.meta.v[18 + d];
      boff += idx * p.meta.v[22 + d];
      coff += idx * p.meta.v[26 + d];
    }
    uint yoff = bi * M * N;
    for (uint m0 = gl_WorkGroupID.y * BM; m0 < M; m0 += gl_NumWorkGroups.y * BM) {
      for (uint n0 = gl_WorkGroupID.x * BN; n0 < N; n0 += gl_NumWorkGroups.x * BN) {
        [[unroll]] for (uint r = 0u; r < SM * 4u; ++r) {
          [[unroll]] for (uint c = 0u; c < SN; ++c) acc[r][c] = vec4(0.0);
        }
        // Specialized twice: inner tiles load without clamping.
#ifdef INNER_ONLY
        product(aoff, boff, m0, n0, t, kTiles, row0, col0, false);  // every tile is inner (template_matmul.cpp)
#else
        if (m0 + BM <= M && n0 + BN <= N && K % BK == 0u) product(aoff, boff, m0, n0, t, kTiles, row0, col0, false);
        else product(aoff, boff, m0, n0, t, kTiles, row0, col0, true);
#endif
        [[unroll]] for (uint s = 0u; s < SM; ++s) {
          [[unroll]] for (uint i = 0u; i < 4u; ++i) {
            uint gm = m0 + row0 + 32u * s + i;
            if (gm >= M) continue;
            [[unroll]] for (uint c = 0u; c < SN; ++c) {
              uint gn = n0 + (col0 + 4u * c) * 4u;
              if (gn >= N) continue;
              vec4 v = acc[s * 4u + i][c] * alpha;
              if (hasBias) {
                [[unroll]] for (uint e = 0u; e < 4u; ++e) {
                  if (gn + e < N) v[e] += beta * LOAD_c(coff + gm * scm + (gn + e) * scn);
                }
              }
#ifdef ALIGNED
              Vec4s(uint64_t(p.y)).v[(yoff + gm * N + gn) >> 2] = TO_STORED(v);
#else
              [[unroll]] for (uint e = 0u; e < 4u; ++e) {
                if (gn + e < N) STORE_y(yoff + gm * N + gn + e, v[e]);
              }
#endif
            }
          }
        }
      }
    }
  }
}
