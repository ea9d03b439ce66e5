// Tensor-core path of the matrix product for f16 and bf16, and for f32 split
// into bf16 parts (F32_SPLIT below) (VK_NV_cooperative_matrix, accumulating
// in f32): y = alpha * (a @ b) + beta * c over a batch, where a
// is a contiguous row-major [M, K] and b is [K, N] or, with TRANS_B, [N, K]
// (linear's weight). Same push constants and meta words as matmul.comp;
// template_matmul.cpp's record() chooses it on devices that report the
// 16x16x16 f16 -> f32 subgroup product (DeviceFeatures::coopMatrixF16).
// With BF16_OPERANDS (bf16 tensors, DeviceFeatures::coopMatrixBf16) the
// operands move as the same 16-bit words, the kernel cache makes the A and B
// fragments bf16 in the SPIR-V (spirv_coop.h), and results are stored as bf16.
// With Y_F32 results are stored as f32 (y 16-byte aligned; for other
// templates' intermediates, template_matmul.h).
//
// Needs K and N multiples of 8 and 16-byte aligned a, b and y: operands move
// as uvec4s of 8 halves, each wholly inside or outside the matrix (with
// F32_SPLIT, N need only be a multiple of 4: f32 moves as vec4s). M and N
// need not fill a tile: edge tiles are zero-filled on load, guarded on store.
// A_UNALIGNED, B_UNALIGNED (F32_SPLIT only) and Y_UNALIGNED lift that for a,
// b and y: their elements are loaded or stored one at a time, each checked
// against the matrix; the shared tiles and products are the same.
//
// One workgroup per output tile (a 1-D grid over the tiles of a matrix,
// GROUP_M tile rows at a time), batches over z. A workgroup of NT / 32
// subgroups of 32 computes a BM x BN output tile in K steps of BK; the
// subgroups form a WARPS_M x WARPS_N grid, each owning WM x WN outputs as
// (WM/16) x (WN/16) f32 accumulator fragments. Tiles of a and b go
// global -> registers -> shared memory (rows padded by 8 halves so the
// fragment loads of 8 rows hit distinct banks) and fragments are loaded from
// there. The next K tile is fetched into registers while the current one is
// multiplied; with two shared buffers it is then stored into the other one,
// so one barrier per K step suffices. SINGLE_BUF keeps one buffer (room for a
// K step twice as long within the 48 KiB of shared memory) and stores the
// tile between two barriers. The epilogue passes each accumulator fragment
// through shared memory (the A buffers, no longer needed) so every
// invocation holds 8 consecutive outputs of a row: alpha, beta * c, the
// conversion to f16 and one 16-byte store.
//
// F32_SPLIT (with BF16_OPERANDS and Y_F32): f32 operands on bf16 tensor
// cores. Each element x is split as it is stored into shared memory into
// three bf16 parts, x = hi + mid + lo exactly (split_bf16.glsl), kept as
// three planes of the tile (each row of a tile k-contiguous holds the planes
// side by side; a b tile [BK][BN] holds them one below the other). Of the
// nine part products of two elements the six down to hi*lo, mid*mid and
// lo*hi are taken, about as accurate as f32 arithmetic. Each K step's
// products are summed on the tensor cores from zero and added to the tile's
// sums in f32 arithmetic (MMA_TILE). A tile any of whose sums comes out an
// infinity or a NaN (from an operand that is one, or that the split rounds
// past f32's largest, or a sum that overflowed, which the parts can where
// f32 would not) is computed again in f32 arithmetic (productIeee), so those
// come out as IEEE arithmetic has them.
#extension GL_EXT_control_flow_attributes : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_NV_cooperative_matrix : require
#extension GL_KHR_shader_subgroup_basic : require
layout(local_size_x = NT) in;
layout(push_constant) uniform Push {
  a_ref a;
  b_ref b;
  c_ref c;
  y_ref y;
  Meta meta;
} p;

layout(buffer_reference, std430, buffer_reference_align = 16) buffer Vec8s { uvec4 v[]; };  // 8 halves each
layout(buffer_reference, std430, buffer_reference_align = 16) buffer Vec4f { vec4 v[]; };  // Y_F32: 4 floats each

const int kScope = 3;  // gl_ScopeSubgroup
// B's scope is a specialization constant so that B's fragments are a type of
// their own, which spirv_coop.h needs to rewrite them for the KHR extension.
layout(constant_id = 0) const int kScopeB = 3;
#define FragA fcoopmatNV<16, kScope, 16, 16>
#define FragB fcoopmatNV<16, kScopeB, 16, 16>
#define FragAcc fcoopmatNV<32, kScope, 16, 16>

const uint WARPS_M = BM / WM, WARPS_N = BN / WN;  // NT / 32 subgroups in all
const uint FM = WM / 16u, FN = WN / 16u;          // fragments per subgroup
const uint KV = BK / 8u;                          // uvec4s along k of one tile row
#ifdef F32_SPLIT
const uint NP = 3u;     // planes of the shared tiles: hi, mid, lo
const uint ESIZE = 4u;  // bytes per element in memory
#else
const uint NP = 1u;
const uint ESIZE = 2u;
#endif

// Strides (uvec4s) of the shared tiles: a as [BM][BK], b as [BK][BN] or,
// with TRANS_B, [BN][BK]; 8 halves of padding per row. Plane `pl` of a
// k-contiguous tile starts pl * KV uvec4s into each row, of b's [BK][BN]
// tile pl * BK rows down.
const uint AS = NP * KV + 1u;
#define A_PLANE(pl) ((pl) * KV)
#ifdef TRANS_B
const uint BS = NP * KV + 1u;
const uint BTILE = BN * BS;
#define B_PLANE(pl) ((pl) * KV)
#else
const uint BS = BN / 8u + 1u;
const uint BTILE = NP * BK * BS;
#define B_PLANE(pl) ((pl) * BK * BS)
#endif
const uint ATILE = BM * AS;
const uint AV = BM * KV, BV = BN * KV;  // uvec4s of a tile in global memory
const uint LA = (AV + NT - 1u) / NT, LB = (BV + NT - 1u) / NT;  // per invocation

#ifdef SINGLE_BUF
const uint NBUF = 1u;
#else
const uint NBUF = 2u;
#endif
shared uvec4 As[max(NBUF * ATILE, NT * 2u)];  // the epilogue needs 64 per subgroup
shared uvec4 Bs[NBUF * BTILE];

uint M, N, K, lda, ldb;

// The next K tile, on its way to shared memory: 8 elements per slot, as
// one uvec4 of 16-bit words, or with F32_SPLIT two vec4s (slot j at 2j).
// LOAD_SLOT(dst, j, base, i, ok) loads elements i .. i + 7 (i a multiple of
// 8) of the operand at `base` into slot j, zeros where `ok` is false;
// LOAD_SLOT_AT(dst, j, address) the 8 at a byte address.
#ifdef F32_SPLIT
vec4 pa[2u * LA], pb[2u * LB];
// ... and LOAD_SLOT2 the two halves of a slot under conditions of their own:
// b as [K, N] needs N only a multiple of 4 here.
#define LOAD_SLOT2(dst, j, base, i, ok0, ok1)                                  \
  {                                                                           \
    dst[2u * (j)] = (ok0) ? Vec4f(base).v[(i) >> 2] : vec4(0.0);              \
    dst[2u * (j) + 1u] = (ok1) ? Vec4f(base).v[((i) >> 2) + 1u] : vec4(0.0);  \
  }
#define LOAD_SLOT(dst, j, base, i, ok)     \
  {                                        \
    const bool ok_ = (ok);                 \
    LOAD_SLOT2(dst, j, base, i, ok_, ok_)  \
  }
#define LOAD_SLOT_AT(dst, j, address)            \
  {                                              \
    dst[2u * (j)] = Vec4f(address).v[0];         \
    dst[2u * (j) + 1u] = Vec4f(address).v[1];    \
  }
#else
uvec4 pa[LA], pb[LB];
#define LOAD_SLOT(dst, j, base, i, ok) dst[j] = (ok) ? Vec8s(base).v[(i) >> 3] : uvec4(0u)
#define LOAD_SLOT_AT(dst, j, address) dst[j] = Vec8s(address).v[0]
#endif

// The row of a k-contiguous tile (a, or b with TRANS_B) that slot `idx`
// holds. A row of 16-bit operands in K steps of 32 is 4 uvec4s, stored 5
// apart: the 8 invocations of one phase of a 16-byte shared store would
// take two neighbouring rows, whose first and last uvec4s share banks.
// Taking rows 4 apart instead (0, 4, 1, 5, ... in each block of 8 rows)
// puts them in distinct banks; each invocation's loads from memory stay
// whole 64-byte row segments (measured: template_matmul.cpp, kCoopTile).
// F32_SPLIT keeps rows in order: its three planes' stores have the same
// conflict, but on an H100 f32 8192 ran 3% slower with the spread.
uint tileRow(uint idx) {
  const uint r = idx / KV;
  return NP == 1u && KV == 4u ? (r & ~7u) | ((r & 1u) << 2) | ((r >> 1) & 3u) : r;
}

// A_UNALIGNED, B_UNALIGNED: that operand's elements are loaded one at a
// time (LOAD_SLOT_N), so its rows need not be 16-byte aligned nor its row
// length (K for a and for b as [N, K], N for b as [K, N]) a multiple of 8.
// LOAD_SLOT_N(dst, j, ref, i, n): elements i .. i + 7 of operand `ref` (p.a
// or p.b) into slot j, the first n of them (those inside the matrix), zeros
// for the rest.
#if defined(A_UNALIGNED) || defined(B_UNALIGNED)
#ifdef F32_SPLIT
#define LOAD_SLOT_N(dst, j, ref, i, n)                   \
  [[unroll]] for (uint e_ = 0u; e_ < 8u; ++e_) {         \
    float v_ = 0.0;                                      \
    if (e_ < (n)) v_ = ref.v[(i) + e_];                  \
    dst[2u * (j) + e_ / 4u][e_ % 4u] = v_;               \
  }
#else
// 16-bit operands one at a time ran slower than the FMA kernel (f16 4095 on
// an H100: 26 against 38 TFLOP/s), so template_matmul.cpp does not ask.
#error "A_UNALIGNED and B_UNALIGNED need F32_SPLIT"
#endif
#endif

void fetch(uint aoff, uint boff, uint m0, uint n0, uint k0, uint t) {
  [[unroll]] for (uint j = 0u; j < LA; ++j) {
    uint idx = t + NT * j;
    uint row = m0 + tileRow(idx), k = k0 + (idx % KV) * 8u;
#ifdef A_UNALIGNED
    LOAD_SLOT_N(pa, j, p.a, aoff + row * lda + k, idx < AV && row < M && k < K ? min(8u, K - k) : 0u);
#else
    LOAD_SLOT(pa, j, uint64_t(p.a), aoff + row * lda + k, idx < AV && row < M && k < K);
#endif
  }
  [[unroll]] for (uint j = 0u; j < LB; ++j) {
    uint idx = t + NT * j;
#ifdef TRANS_B
    uint col = n0 + tileRow(idx), k = k0 + (idx % KV) * 8u;
#ifdef B_UNALIGNED
    LOAD_SLOT_N(pb, j, p.b, boff + col * ldb + k, idx < BV && col < N && k < K ? min(8u, K - k) : 0u);
#else
    LOAD_SLOT(pb, j, uint64_t(p.b), boff + col * ldb + k, idx < BV && col < N && k < K);
#endif
#else
    uint k = k0 + idx / (BN / 8u), col = n0 + (idx % (BN / 8u)) * 8u;
#if defined(B_UNALIGNED)
    LOAD_SLOT_N(pb, j, p.b, boff + k * ldb + col, idx < BV && k < K && col < N ? min(8u, N - col) : 0u);
#elif defined(F32_SPLIT)
    const bool ok = idx < BV && col < N && k < K;
    LOAD_SLOT2(pb, j, uint64_t(p.b), boff + k * ldb + col, ok, ok && col + 4u < N);
#else
    LOAD_SLOT(pb, j, uint64_t(p.b), boff + k * ldb + col, idx < BV && col < N && k < K);
#endif
#endif
  }
}

// Tiles wholly inside the product (K a whole number of steps) load without
// bounds checks, from addresses worked out once per tile: on an H100 f16
// 8192 went from 278-280 to 284-289 TFLOP/s, linear f16 from 244-258 to
// 310-313.
uint64_t ga[LA], gb[LB];  // this invocation's loads of the tile's first K step

void setupInner(uint aoff, uint boff, uint m0, uint n0, uint t) {
  [[unroll]] for (uint j = 0u; j < LA; ++j) {
    uint idx = t + NT * j;
    ga[j] = uint64_t(p.a) + ESIZE * uint64_t(aoff + (m0 + tileRow(idx)) * lda + (idx % KV) * 8u);
  }
  [[unroll]] for (uint j = 0u; j < LB; ++j) {
    uint idx = t + NT * j;
#ifdef TRANS_B
    gb[j] = uint64_t(p.b) + ESIZE * uint64_t(boff + (n0 + tileRow(idx)) * ldb + (idx % KV) * 8u);
#else
    gb[j] = uint64_t(p.b) + ESIZE * uint64_t(boff + (idx / (BN / 8u)) * ldb + n0 + (idx % (BN / 8u)) * 8u);
#endif
  }
}

void fetchInner(uint k0, uint t) {
  [[unroll]] for (uint j = 0u; j < LA; ++j) {
    if (t + NT * j < AV) LOAD_SLOT_AT(pa, j, ga[j] + ESIZE * uint64_t(k0));
  }
#ifdef TRANS_B
  uint64_t bstep = ESIZE * uint64_t(k0);
#else
  uint64_t bstep = ESIZE * uint64_t(k0) * uint64_t(ldb);
#endif
  [[unroll]] for (uint j = 0u; j < LB; ++j) {
    if (t + NT * j < BV) LOAD_SLOT_AT(pb, j, gb[j] + bstep);
  }
}

#ifdef F32_SPLIT

// Slot j of `src` (8 f32s) as its three planes of 8 bf16s (split_bf16.glsl).
void splitSlot(vec4 v0, vec4 v1, out uvec4 hi, out uvec4 mid, out uvec4 lo) {
  [[unroll]] for (uint i = 0u; i < 4u; ++i) {
    const vec4 v = i < 2u ? v0 : v1;
    const uint e = (i & 1u) * 2u;
    const uvec3 w = splitPair(v[e], v[e + 1u]);
    hi[i] = w.x, mid[i] = w.y, lo[i] = w.z;
  }
}
#define STORE_SLOT(dst, at, src, j, planeStride)                         \
  {                                                                      \
    uvec4 hi_, mid_, lo_;                                                \
    splitSlot(src[2u * (j)], src[2u * (j) + 1u], hi_, mid_, lo_);        \
    dst[at] = hi_;                                                       \
    dst[(at) + (planeStride)] = mid_;                                    \
    dst[(at) + 2u * (planeStride)] = lo_;                                \
  }
#else
#define STORE_SLOT(dst, at, src, j, planeStride) dst[at] = src[j]
#endif

void stash(uint buf, uint t) {
  [[unroll]] for (uint j = 0u; j < LA; ++j) {
    uint idx = t + NT * j;
    if (idx < AV) STORE_SLOT(As, buf * ATILE + tileRow(idx) * AS + idx % KV, pa, j, A_PLANE(1u));
  }
  [[unroll]] for (uint j = 0u; j < LB; ++j) {
    uint idx = t + NT * j;
#ifdef TRANS_B
    if (idx < BV) STORE_SLOT(Bs, buf * BTILE + tileRow(idx) * BS + idx % KV, pb, j, B_PLANE(1u));
#else
    if (idx < BV) STORE_SLOT(Bs, buf * BTILE + (idx / (BN / 8u)) * BS + idx % (BN / 8u), pb, j, B_PLANE(1u));
#endif
  }
}

// One K tile of the product out of shared buffer `cur`: 16 halves of k per
// step, all of this subgroup's A and B fragments, then every pair.
#ifdef TRANS_B
#define LOAD_B_FRAG_PLANE(f, cur, kk, j, pl) \
  coopMatLoadNV(f, Bs, (cur) * BTILE + (wn + 16u * (j)) * BS + B_PLANE(pl) + (kk), BS, true)
#else
#define LOAD_B_FRAG_PLANE(f, cur, kk, j, pl) \
  coopMatLoadNV(f, Bs, (cur) * BTILE + B_PLANE(pl) + (kk) * 8u * BS + (wn + 16u * (j)) / 8u, BS, false)
#endif
#define LOAD_B_FRAG(f, cur, kk, j) LOAD_B_FRAG_PLANE(f, cur, kk, j, 0u)
#define LOAD_A_FRAG(f, cur, kk, i, pl) \
  coopMatLoadNV(f, As, (cur) * ATILE + (wm + 16u * (i)) * AS + A_PLANE(pl) + (kk), AS, false)
#ifdef F32_SPLIT
// The six part products of the K step, into `step` from zero, then added to
// acc in f32 arithmetic. The tensor cores' sums lose more than f32
// arithmetic's: a K of 4096 accumulated in them alone came out up to 14
// times further off (RMS, positive operands) than f32 sums in order, while
// a step's sum only loses relative to its own size. On an H100 this costs
// 8-9% at 4096, 4-5% at 8192 and 1-2% for linear (docs/PERFORMANCE.md);
// adding every second or fourth step's sum gained 1-2% and lost a third or
// more of the accuracy.
#define MMA_TILE(cur)                                                                                  \
  [[unroll]] for (uint i = 0u; i < FM; ++i) {                                                          \
    [[unroll]] for (uint j = 0u; j < FN; ++j) step[i][j] = FragAcc(0.0);                               \
  }                                                                                                    \
  [[unroll]] for (uint kk = 0u; kk < KV; kk += 2u) {                                                   \
    FragB fb[3u * FN];                                                                                 \
    [[unroll]] for (uint pl = 0u; pl < 3u; ++pl) {                                                     \
      [[unroll]] for (uint j = 0u; j < FN; ++j) LOAD_B_FRAG_PLANE(fb[pl * FN + j], cur, kk, j, pl);    \
    }                                                                                                  \
    [[unroll]] for (uint i = 0u; i < FM; ++i) {                                                        \
      FragA fa;                                                                                        \
      LOAD_A_FRAG(fa, cur, kk, i, 0u);                                                                 \
      [[unroll]] for (uint j = 0u; j < FN; ++j) {                                                      \
        step[i][j] = coopMatMulAddNV(fa, fb[j], step[i][j]);                                           \
        step[i][j] = coopMatMulAddNV(fa, fb[FN + j], step[i][j]);                                      \
        step[i][j] = coopMatMulAddNV(fa, fb[2u * FN + j], step[i][j]);                                 \
      }                                                                                                \
      LOAD_A_FRAG(fa, cur, kk, i, 1u);                                                                 \
      [[unroll]] for (uint j = 0u; j < FN; ++j) {                                                      \
        step[i][j] = coopMatMulAddNV(fa, fb[j], step[i][j]);                                           \
        step[i][j] = coopMatMulAddNV(fa, fb[FN + j], step[i][j]);                                      \
      }                                                                                                \
      LOAD_A_FRAG(fa, cur, kk, i, 2u);                                                                 \
      [[unroll]] for (uint j = 0u; j < FN; ++j) step[i][j] = coopMatMulAddNV(fa, fb[j], step[i][j]);  \
    }                                                                                                  \
  }                                                                                                    \
  [[unroll]] for (uint i = 0u; i < FM; ++i) {                                                          \
    [[unroll]] for (uint j = 0u; j < FN; ++j) acc[i][j] += step[i][j];                                 \
  }
#else
#define MMA_TILE(cur)                                                                                  \
  [[unroll]] for (uint kk = 0u; kk < KV; kk += 2u) {                                                   \
    FragA fa[FM];                                                                                      \
    FragB fb[FN];                                                                                      \
    [[unroll]] for (uint i = 0u; i < FM; ++i) {                                                        \
      LOAD_A_FRAG(fa[i], cur, kk, i, 0u);                                                              \
    }                                                                                                  \
    [[unroll]] for (uint j = 0u; j < FN; ++j) LOAD_B_FRAG(fb[j], cur, kk, j);                          \
    [[unroll]] for (uint i = 0u; i < FM; ++i) {                                                        \
      [[unroll]] for (uint j = 0u; j < FN; ++j) acc[i][j] = coopMatMulAddNV(fa[i], fb[j], acc[i][j]);  \
    }                                                                                                  \
  }
#endif

// The K loop, once for inner tiles and once for edge ones; FETCH(k0) loads
// the K tile at k0 into pa and pb.
#define FETCH_INNER(k0) fetchInner(k0, t)
#define FETCH_EDGE(k0) fetch(aoff, boff, m0, n0, k0, t)
#ifdef SINGLE_BUF
// One shared buffer: the next tile is fetched into registers while the
// current one is multiplied, and stored between two barriers.
#define K_LOOP(FETCH)                                 \
  FETCH(0u);                                          \
  for (uint kt = 0u; kt < kTiles; ++kt) {             \
    barrier();                                        \
    stash(0u, t);                                     \
    barrier();                                        \
    if (kt + 1u < kTiles) FETCH((kt + 1u) * BK);      \
    MMA_TILE(0u)                                      \
  }
#else
#define K_LOOP(FETCH)                                 \
  FETCH(0u);                                          \
  stash(0u, t);                                       \
  barrier();                                          \
  for (uint kt = 0u; kt < kTiles; ++kt) {             \
    uint cur = kt & 1u;                               \
    bool more = kt + 1u < kTiles;                     \
    if (more) FETCH((kt + 1u) * BK);                  \
    MMA_TILE(cur)                                     \
    if (more) stash(cur ^ 1u, t);                     \
    barrier();                                        \
  }
#endif

#ifdef F32_SPLIT
shared uint tileNonFinite;  // a sum of the tile is an infinity or a NaN

// The tile's outputs in f32 arithmetic, where its sums came out infinities
// or NaNs (see the header): those then come out as IEEE arithmetic has
// them. K steps of 32 go through shared memory as f32 (As and Bs are free
// here); invocation t owns column t % BN of the tile and RPT consecutive rows.
const uint KS = 32u, RPT = BM / (NT / BN);  // NT a multiple of BN, RPT of 4

// LOAD4_a / LOAD4_b (ok, i, left): elements i .. i + 3 of that operand
// where `ok` (the row is inside), those of them before `left` (a signed
// count of the elements up to the matrix's edge), zeros for the rest.
#define LOAD4_ALIGNED(x, ok, i, left) ((ok) && int(left) > 0 ? Vec4f(uint64_t(p.x)).v[(i) >> 2] : vec4(0.0))
#define DEFINE_LOAD4(x)                                               \
  vec4 load4_##x(const bool ok, const uint i, const int left) {       \
    vec4 v = vec4(0.0);                                               \
    [[unroll]] for (uint e = 0u; e < 4u; ++e) {                       \
      if (ok && int(e) < left) v[e] = p.x.v[i + e];                   \
    }                                                                 \
    return v;                                                         \
  }
#ifdef A_UNALIGNED
DEFINE_LOAD4(a)
#define LOAD4_a(ok, i, left) load4_a(ok, i, int(left))
#else
#define LOAD4_a(ok, i, left) LOAD4_ALIGNED(a, ok, i, left)
#endif
#ifdef B_UNALIGNED
DEFINE_LOAD4(b)
#define LOAD4_b(ok, i, left) load4_b(ok, i, int(left))
#else
#define LOAD4_b(ok, i, left) LOAD4_ALIGNED(b, ok, i, left)
#endif

void productIeee(uint aoff, uint boff, uint coff, uint yoff, uint m0, uint n0, uint t, float alpha, float beta,
                 bool hasBias, uint scm, uint scn) {
  const uint col = t % BN, r0 = (t / BN) * RPT;
  float sum[RPT];
  [[unroll]] for (uint q = 0u; q < RPT; ++q) sum[q] = 0.0;
  for (uint k0 = 0u; k0 < K; k0 += KS) {
    barrier();  // the last step's reads are done
    // 4 elements per load (an aligned operand's rows are 16-byte aligned, K
    // a multiple of 8 and N of 4, or its rows padded with zeros, so 4 are
    // all inside or all outside, or past N zeros). a, and
    // b as [N, K], are stored transposed: neighbouring invocations take
    // neighbouring rows, so their stores fall in different banks.
    for (uint x = t; x < BM * KS / 4u; x += NT) {  // a as [KS][BM]
      const uint r = x % BM, k = (x / BM) * 4u, gm = m0 + r, gk = k0 + k;
      const vec4 v = LOAD4_a(gm < M, aoff + gm * lda + gk, K - gk);
      [[unroll]] for (uint e = 0u; e < 4u; ++e) As[((k + e) * BM + r) >> 2][r & 3u] = floatBitsToUint(v[e]);
    }
    for (uint x = t; x < BN * KS / 4u; x += NT) {  // b as [KS][BN]
#ifdef TRANS_B
      const uint c = x % BN, k = (x / BN) * 4u, gn = n0 + c, gk = k0 + k;
      const vec4 v = LOAD4_b(gn < N, boff + gn * ldb + gk, K - gk);
      [[unroll]] for (uint e = 0u; e < 4u; ++e) Bs[((k + e) * BN + c) >> 2][c & 3u] = floatBitsToUint(v[e]);
#else
      const uint k = x / (BN / 4u), c = (x % (BN / 4u)) * 4u, gn = n0 + c, gk = k0 + k;
      const vec4 v = LOAD4_b(gk < K, boff + gk * ldb + gn, N - gn);
      Bs[(k * BN + c) >> 2] = floatBitsToUint(v);
#endif
    }
    barrier();
    for (uint k = 0u; k < KS; ++k) {
      const float bv = uintBitsToFloat(Bs[(k * BN + col) >> 2][col & 3u]);
      [[unroll]] for (uint q = 0u; q < RPT; q += 4u) {
        const vec4 av = uintBitsToFloat(As[(k * BM + r0 + q) >> 2]);
        [[unroll]] for (uint e = 0u; e < 4u; ++e) sum[q + e] += av[e] * bv;
      }
    }
  }
  const uint gn = n0 + col;
  [[unroll]] for (uint q = 0u; q < RPT; ++q) {
    const uint gm = m0 + r0 + q;
    if (gm >= M || gn >= N) continue;
    float v = sum[q] * alpha;
    if (hasBias) v += beta * LOAD_c(coff + gm * scm + gn * scn);
    STORE_y(yoff + gm * N + gn, v);
  }
}
#endif

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
  uint t = gl_LocalInvocationIndex, warp = t >> 5u, lane = t & 31u;
  uint wm = (warp / WARPS_N) * WM, wn = (warp % WARPS_N) * WN;  // this subgroup's outputs in the tile
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
    // Tiles in bands of GROUP_M tile rows, column by column inside a band:
    // the workgroups running at once share rows of a and columns of b in L2.
    uint tilesM = (M + BM - 1u) / BM, tilesN = (N + BN - 1u) / BN, perBand = GROUP_M * tilesN;
    for (uint tile = gl_WorkGroupID.x; tile < tilesM * tilesN; tile += gl_NumWorkGroups.x) {
      uint band = tile / perBand, firstM = band * GROUP_M, rows = min(tilesM - firstM, GROUP_M);
      uint m0 = (firstM + (tile % perBand) % rows) * BM, n0 = ((tile % perBand) / rows) * BN;
      FragAcc acc[FM][FN];
      [[unroll]] for (uint i = 0u; i < FM; ++i) {
        [[unroll]] for (uint j = 0u; j < FN; ++j) acc[i][j] = FragAcc(0.0);
      }
#ifdef F32_SPLIT
      FragAcc step[FM][FN];  // one K step's products (MMA_TILE)
      if (t == 0u) tileNonFinite = 0u;  // read by the last tile before its final barrier
#endif
#if defined(A_UNALIGNED) || defined(B_UNALIGNED)
      const bool inner = false;  // fetchInner's loads need aligned operands
#else
      const bool inner = m0 + BM <= M && n0 + BN <= N && K % BK == 0u;
#endif
      if (inner) {
        setupInner(aoff, boff, m0, n0, t);
        K_LOOP(FETCH_INNER)
      } else {
        K_LOOP(FETCH_EDGE)
      }
#ifdef SINGLE_BUF
      barrier();  // the epilogue reuses As
#endif
      // Epilogue: each subgroup owns 64 uvec4s (a 16x16 f32 fragment) of As.
      uint frag = warp * 64u, row = lane >> 1u, half8 = (lane & 1u) * 8u;
#ifdef F32_SPLIT
      bool overflow = false;
#endif
      [[unroll]] for (uint i = 0u; i < FM; ++i) {
        [[unroll]] for (uint j = 0u; j < FN; ++j) {
          coopMatStoreNV(acc[i][j], As, frag, 4u, false);
          subgroupMemoryBarrierShared();
          subgroupBarrier();
          vec4 lo = uintBitsToFloat(As[frag + row * 4u + half8 / 4u]);
          vec4 hi = uintBitsToFloat(As[frag + row * 4u + half8 / 4u + 1u]);
          subgroupMemoryBarrierShared();
          subgroupBarrier();
#ifdef F32_SPLIT
          // An infinity or a NaN, from the operands or an overflow (header).
          const uvec4 inf = uvec4(0x7F800000u);
          overflow = overflow || any(equal(floatBitsToUint(lo) & inf, inf)) ||
                     any(equal(floatBitsToUint(hi) & inf, inf));
#endif
          uint gm = m0 + wm + 16u * i + row, gn = n0 + wn + 16u * j + half8;
          if (gm >= M || gn >= N) continue;
#ifdef Y_UNALIGNED
          // One output at a time: y's rows need not be 16-byte aligned, nor
          // N a multiple of 8.
          [[unroll]] for (uint e = 0u; e < 8u; ++e) {
            if (gn + e >= N) continue;
            float v = (e < 4u ? lo[e] : hi[e - 4u]) * alpha;
            if (hasBias) v += beta * LOAD_c(coff + gm * scm + (gn + e) * scn);
            STORE_y(yoff + gm * N + gn + e, v);
          }
          continue;
#endif
          lo *= alpha;
          hi *= alpha;
          const bool hiInside = gn + 4u < N;  // N is a multiple of 8, or with Y_F32 of 4
          if (hasBias) {
            uint c0 = coff + gm * scm + gn * scn;
            [[unroll]] for (uint e = 0u; e < 4u; ++e) {
              lo[e] += beta * LOAD_c(c0 + e * scn);
              if (hiInside) hi[e] += beta * LOAD_c(c0 + (e + 4u) * scn);
            }
          }
#if defined(Y_F32)
          Vec4f(uint64_t(p.y)).v[(yoff + gm * N + gn) >> 2] = lo;
          if (hiInside) Vec4f(uint64_t(p.y)).v[((yoff + gm * N + gn) >> 2) + 1u] = hi;
#else
#if defined(BF16_OPERANDS)
          uvec4 v = uvec4(float_to_bf16(lo.x) | float_to_bf16(lo.y) << 16, float_to_bf16(lo.z) | float_to_bf16(lo.w) << 16,
                          float_to_bf16(hi.x) | float_to_bf16(hi.y) << 16, float_to_bf16(hi.z) | float_to_bf16(hi.w) << 16);
#else
          uvec4 v = uvec4(packFloat2x16(f16vec2(lo.xy)), packFloat2x16(f16vec2(lo.zw)),
                          packFloat2x16(f16vec2(hi.xy)), packFloat2x16(f16vec2(hi.zw)));
#endif
          Vec8s(uint64_t(p.y)).v[(yoff + gm * N + gn) >> 3] = v;
#endif
        }
      }
#ifdef F32_SPLIT
      if (overflow) atomicOr(tileNonFinite, 1u);
      memoryBarrierBuffer();  // the epilogue's stores to y before productIeee's to the same outputs
      barrier();
      if (tileNonFinite != 0u) productIeee(aoff, boff, coff, yoff, m0, n0, t, alpha, beta, hasBias, scm, scn);
#endif
      barrier();  // As is the next tile's first buffer
    }
  }
}
