// Sort template (sort, argsort, topk): a stable bitonic sort of every row
// (the input viewed as [outer, len, inner], rows along len) padded to a power
// of two p.pow2. Keys compare by value (NaN greatest, as in PyTorch), then by
// original index, which makes the order total and the sort stable; padding
// (index >= len) sorts last. Defined by the generator (template_sort.cpp):
//   A, LOADA(i)  key type (float or int64_t) and a load converted to it
//   WRITE_VALUES  store the sorted values to y (indices always go to z)
//   MODE_LOCAL    a workgroup per row, the whole sort in shared memory (pow2 <= 1024)
//   MODE_INIT / MODE_STEP / MODE_FINAL  the global sort over scratch arrays:
//                 load (and pad) rows, one compare-exchange step (k, j) per
//                 dispatch, write the first outLen of each row.
layout(local_size_x = 256) in;
layout(buffer_reference, std430, buffer_reference_align = 8) buffer Keys { A v[]; };
layout(buffer_reference, std430, buffer_reference_align = 4) buffer Idx { uint v[]; };
layout(push_constant) uniform Push {
  x_ref x;
  y_ref y;
  z_ref z;
  Keys keys;
  Idx idx;
  uint rows;     // outer * inner
  uint len;
  uint inner;
  uint pow2;
  uint outLen;   // elements written per row (topk: k)
  uint k;        // bitonic stage (MODE_STEP)
  uint j;        // bitonic step (MODE_STEP)
  uint descending;
} p;

#ifdef ACC_FLOAT
#define A_ISNAN(v) isnan(v)
#else
#define A_ISNAN(v) false
#endif

// Whether (ka, ia) goes before (kb, ib).
bool before(A ka, uint ia, A kb, uint ib) {
  if (ia >= p.len) return false;
  if (ib >= p.len) return true;
  bool na = A_ISNAN(ka), nb = A_ISNAN(kb);
  if (na || nb) {
    if (na && nb) return ia < ib;
    return p.descending != 0u ? na : nb;
  }
  if (ka != kb) return p.descending != 0u ? ka > kb : ka < kb;
  return ia < ib;
}

uint inOffset(uint row, uint t) {
  uint o = row / p.inner, i = row % p.inner;
  return (o * p.len + t) * p.inner + i;
}
uint outOffset(uint row, uint t) {
  uint o = row / p.inner, i = row % p.inner;
  return (o * p.outLen + t) * p.inner + i;
}

void writeOut(uint row, uint t, A key, uint index) {
  uint off = outOffset(row, t);
#ifdef WRITE_VALUES
  STORE_y(off, key);
#endif
  STORE_z(off, int64_t(index));
}

uint wgIndex() { return gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x; }
uint wgCount() { return gl_NumWorkGroups.x * gl_NumWorkGroups.y; }

#if defined(MODE_LOCAL)
shared A skey[1024];
shared uint sidx[1024];
void main() {
  uint lid = gl_LocalInvocationID.x;
  for (uint row = wgIndex(); row < p.rows; row += wgCount()) {
    for (uint t = lid; t < p.pow2; t += 256u) {
      if (t < p.len) {
        skey[t] = LOADA(inOffset(row, t));
        sidx[t] = t;
      } else {
        skey[t] = A(0);
        sidx[t] = p.len + t;
      }
    }
    barrier();
    for (uint k = 2u; k <= p.pow2; k <<= 1u) {
      for (uint j = k >> 1u; j > 0u; j >>= 1u) {
        for (uint q = lid; q < p.pow2 / 2u; q += 256u) {
          uint t = (q / j) * 2u * j + (q % j), l = t + j;
          bool up = (t & k) == 0u;
          A kt = skey[t], kl = skey[l];
          uint it = sidx[t], il = sidx[l];
          if (up ? before(kl, il, kt, it) : before(kt, it, kl, il)) {
            skey[t] = kl; skey[l] = kt;
            sidx[t] = il; sidx[l] = it;
          }
        }
        barrier();
      }
    }
    for (uint t = lid; t < p.outLen; t += 256u) writeOut(row, t, skey[t], sidx[t]);
    barrier();
  }
}
#else
void main() {
  uint gid = wgIndex() * 256u + gl_LocalInvocationID.x, stride = wgCount() * 256u;
#if defined(MODE_INIT)
  uint total = p.rows * p.pow2;
  for (uint e = gid; e < total; e += stride) {
    uint row = e / p.pow2, t = e % p.pow2;
    if (t < p.len) {
      p.keys.v[e] = LOADA(inOffset(row, t));
      p.idx.v[e] = t;
    } else {
      p.keys.v[e] = A(0);
      p.idx.v[e] = p.len + t;
    }
  }
#elif defined(MODE_STEP)
  uint half_ = p.pow2 / 2u;
  uint total = p.rows * half_;
  for (uint e = gid; e < total; e += stride) {
    uint row = e / half_, q = e % half_;
    uint t = (q / p.j) * 2u * p.j + (q % p.j), l = t + p.j;
    bool up = (t & p.k) == 0u;
    uint bt = row * p.pow2 + t, bl = row * p.pow2 + l;
    A kt = p.keys.v[bt], kl = p.keys.v[bl];
    uint it = p.idx.v[bt], il = p.idx.v[bl];
    if (up ? before(kl, il, kt, it) : before(kt, it, kl, il)) {
      p.keys.v[bt] = kl; p.keys.v[bl] = kt;
      p.idx.v[bt] = il; p.idx.v[bl] = it;
    }
  }
#else
  uint total = p.rows * p.outLen;
  for (uint e = gid; e < total; e += stride) {
    uint row = e / p.outLen, t = e % p.outLen;
    uint b = row * p.pow2 + t;
    writeOut(row, t, p.keys.v[b], p.idx.v[b]);
  }
#endif
}
#endif
