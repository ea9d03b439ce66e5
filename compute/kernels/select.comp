// Stream compaction for masked_select: out = input[mask] in row-major order
// over the broadcast shape of input and mask. Four passes, chosen by PASS:
//   PASS_COUNT   atomically counts true mask elements into words[0] (the shape query)
//   PASS_BLOCKS  counts per block of 1024 elements into blocks[b]
//   PASS_SCAN    one workgroup turns blocks[] into exclusive offsets
//   PASS_WRITE   each block writes its selected elements from its offset
// Meta: shape[rank], input strides[rank], mask strides[rank].
layout(local_size_x = 256) in;
layout(buffer_reference, std430, buffer_reference_align = 4) buffer Words { uint v[]; };
layout(push_constant) uniform Push {
  y_ref y;
  x_ref x;
  m_ref m;
  Meta meta;
  Words words;   // PASS_COUNT: the count; otherwise the per-block counts/offsets
  uint n;
  uint rank;
  uint blocks;
} p;

const uint BLOCK = 1024u;
shared uint partial[256];

uint offsetOf(uint i, uint which) {
  uint off = 0u, rem = i;
  for (int k = int(p.rank) - 1; k >= 0; --k) {
    uint size = p.meta.v[k];
    uint idx = rem % size;
    rem /= size;
    off += idx * p.meta.v[(which + 1u) * p.rank + uint(k)];
  }
  return off;
}

bool selected(uint i) { return RAW_m(offsetOf(i, 1u)); }

// Exclusive scan of partial[] in place; returns the total.
uint scanShared(uint lid, uint value) {
  partial[lid] = value;
  barrier();
  for (uint s = 1u; s < 256u; s <<= 1u) {
    uint add = lid >= s ? partial[lid - s] : 0u;
    barrier();
    partial[lid] += add;
    barrier();
  }
  uint inclusive = partial[lid];
  uint total = partial[255];
  barrier();
  partial[lid] = inclusive - value;
  barrier();
  return total;
}

void main() {
  uint lid = gl_LocalInvocationID.x;
#if defined(PASS_COUNT)
  uint count = 0u;
  for (uint i = gl_GlobalInvocationID.x; i < p.n; i += gl_NumWorkGroups.x * 256u) count += selected(i) ? 1u : 0u;
  count = subgroupAdd(count);
  if (subgroupElect() && count > 0u) atomicAdd(p.words.v[0], count);
#elif defined(PASS_BLOCKS)
  for (uint b = gl_WorkGroupID.x; b < p.blocks; b += gl_NumWorkGroups.x) {
    uint count = 0u;
    for (uint j = lid; j < BLOCK; j += 256u) {
      uint i = b * BLOCK + j;
      if (i < p.n && selected(i)) ++count;
    }
    uint total = scanShared(lid, count);
    if (lid == 0u) p.words.v[b] = total;
  }
#elif defined(PASS_SCAN)
  // 256 threads, each a contiguous run of blocks.
  uint per = (p.blocks + 255u) / 256u;
  uint begin = min(lid * per, p.blocks), end = min(begin + per, p.blocks);
  uint sum = 0u;
  for (uint b = begin; b < end; ++b) sum += p.words.v[b];
  scanShared(lid, sum);
  uint run = partial[lid];
  for (uint b = begin; b < end; ++b) {
    uint c = p.words.v[b];
    p.words.v[b] = run;
    run += c;
  }
#else  // PASS_WRITE
  for (uint b = gl_WorkGroupID.x; b < p.blocks; b += gl_NumWorkGroups.x) {
    uint base = p.words.v[b];
    for (uint j0 = 0u; j0 < BLOCK; j0 += 256u) {
      uint i = b * BLOCK + j0 + lid;
      bool take = i < p.n && selected(i);
      uint total = scanShared(lid, take ? 1u : 0u);
      if (take) STORE_y(base + partial[lid], LOAD_x(offsetOf(i, 0u)));
      base += total;
      barrier();
    }
  }
#endif
}
