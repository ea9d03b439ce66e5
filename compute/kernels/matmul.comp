// Matrix product template: y = alpha * (a @ b) + beta * c for a batch of
// matrices. Serves matmul, mm, bmm, addmm, baddbmm, linear and outer.
// Operands a [.., M, K], b [.., K, N] and the optional bias c are read
// through element strides, so a transposed operand (linear's weight) or a
// broadcast bias needs no copy; y is contiguous [batch, M, N].
// 64x64 output tile per workgroup, 16x16 threads, 4x4 outputs per thread,
// staged through shared memory in K steps of 16. Accumulates in T (float for
// f32/f16/bf16: rounded once on store).
// Meta words: M N K batch batchRank hasBias alpha(f32 bits) beta(f32 bits)
// sam sak sbk sbn scm scn, shape[4], batch strides of a[4], b[4], c[4].
// With SMALL defined (products whose M or N is below a tile), each
// invocation computes one output element instead, with no shared memory.
// With SPLIT_SUM defined, a is split-K's partial products [batch, M, N] and
// each invocation sums one output element over them, then applies alpha,
// beta and the bias.
layout(push_constant) uniform Push {
  a_ref a;
  b_ref b;
  c_ref c;
  y_ref y;
  Meta meta;
} p;
#if defined(SPLIT_SUM)
layout(local_size_x = 256) in;
void main() {
  uint M = p.meta.v[0], N = p.meta.v[1], slices = p.meta.v[3];
  bool hasBias = p.meta.v[5] != 0u;
  uint scm = p.meta.v[12], scn = p.meta.v[13];
  uint total = M * N;
  for (uint i = gl_GlobalInvocationID.x; i < total; i += gl_NumWorkGroups.x * 256u) {
    T v = T(0);
    for (uint s = 0u; s < slices; ++s) v += LOAD_a(s * total + i);
    v *= uintBitsToFloat(p.meta.v[6]);
    if (hasBias) v += uintBitsToFloat(p.meta.v[7]) * LOAD_c((i / N) * scm + (i % N) * scn);
    STORE_y(i, v);
  }
}
#elif defined(SMALL)
layout(local_size_x = 256) in;
void main() {
  uint M = p.meta.v[0], N = p.meta.v[1], K = p.meta.v[2], batch = p.meta.v[3], batchRank = p.meta.v[4];
  bool hasBias = p.meta.v[5] != 0u;
  uint sam = p.meta.v[8], sak = p.meta.v[9], sbk = p.meta.v[10], sbn = p.meta.v[11];
  uint scm = p.meta.v[12], scn = p.meta.v[13];
  uint total = batch * M * N;
  for (uint i = gl_GlobalInvocationID.x; i < total; i += gl_NumWorkGroups.x * 256u) {
    uint gn = i % N, gm = (i / N) % M, rem = i / (M * N);
    uint aoff = 0u, boff = 0u, coff = 0u;
    for (int d = int(batchRank) - 1; d >= 0; --d) {
      uint size = p.meta.v[14 + d];
      uint idx = rem % size;
      rem /= size;
      aoff += idx * p.meta.v[18 + d];
      boff += idx * p.meta.v[22 + d];
      coff += idx * p.meta.v[26 + d];
    }
    T v = T(0);
    uint ia = aoff + gm * sam, ib = boff + gn * sbn;
    for (uint k = 0u; k < K; ++k) v += LOAD_a(ia + k * sak) * LOAD_b(ib + k * sbk);
#ifdef IS_FLOAT
    v *= uintBitsToFloat(p.meta.v[6]);
    if (hasBias) v += uintBitsToFloat(p.meta.v[7]) * LOAD_c(coff + gm * scm + gn * scn);
#else
    if (hasBias) v += LOAD_c(coff + gm * scm + gn * scn);
#endif
    STORE_y(i, v);
  }
}
#else
layout(local_size_x = 16, local_size_y = 16) in;
shared T As[16][64];
shared T Bs[16][64];
void main() {
  uint M = p.meta.v[0], N = p.meta.v[1], K = p.meta.v[2], batch = p.meta.v[3], batchRank = p.meta.v[4];
  bool hasBias = p.meta.v[5] != 0u;
  uint sam = p.meta.v[8], sak = p.meta.v[9], sbk = p.meta.v[10], sbn = p.meta.v[11];
  uint scm = p.meta.v[12], scn = p.meta.v[13];
#ifdef IS_FLOAT
  float alpha = uintBitsToFloat(p.meta.v[6]), beta = uintBitsToFloat(p.meta.v[7]);
#endif
  uint tx = gl_LocalInvocationID.x, ty = gl_LocalInvocationID.y;
  uint t = ty * 16u + tx;
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
    for (uint m0 = gl_WorkGroupID.y * 64u; m0 < M; m0 += gl_NumWorkGroups.y * 64u) {
      for (uint n0 = gl_WorkGroupID.x * 64u; n0 < N; n0 += gl_NumWorkGroups.x * 64u) {
        T acc[4][4];
        for (int r = 0; r < 4; ++r) for (int c = 0; c < 4; ++c) acc[r][c] = T(0);
        for (uint k0 = 0u; k0 < K; k0 += 16u) {
          for (uint j = 0u; j < 4u; ++j) {
            uint i = t + 256u * j;
            uint am = i / 16u, ak = i % 16u;
            uint gm = m0 + am, gk = k0 + ak;
            As[ak][am] = (gm < M && gk < K) ? LOAD_a(aoff + gm * sam + gk * sak) : T(0);
            uint bk = i / 64u, bn = i % 64u;
            uint hk = k0 + bk, hn = n0 + bn;
            Bs[bk][bn] = (hk < K && hn < N) ? LOAD_b(boff + hk * sbk + hn * sbn) : T(0);
          }
          barrier();
          for (uint kk = 0u; kk < 16u; ++kk) {
            T av[4], bv[4];
            for (int r = 0; r < 4; ++r) av[r] = As[kk][ty + 16u * uint(r)];
            for (int c = 0; c < 4; ++c) bv[c] = Bs[kk][tx + 16u * uint(c)];
            for (int r = 0; r < 4; ++r) for (int c = 0; c < 4; ++c) acc[r][c] += av[r] * bv[c];
          }
          barrier();
        }
        for (int r = 0; r < 4; ++r) {
          uint gm = m0 + ty + 16u * uint(r);
          if (gm >= M) continue;
          for (int c = 0; c < 4; ++c) {
            uint gn = n0 + tx + 16u * uint(c);
            if (gn >= N) continue;
            T v = acc[r][c];
#ifdef IS_FLOAT
            v *= alpha;
            if (hasBias) v += beta * LOAD_c(coff + gm * scm + gn * scn);
#else
            if (hasBias) v += LOAD_c(coff + gm * scm + gn * scn);
#endif
            STORE_y(yoff + gm * N + gn, v);
          }
        }
      }
    }
  }
}
#endif
