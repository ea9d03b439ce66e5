// Matrix products. f32 only for now.

#include "compute/template_matmul.h"

#include <algorithm>
#include <array>
#include <cmath>

#include "compute/error.h"
#include "compute/op_spec.h"
#include "compute/template_util.h"

namespace tensord::compute {
namespace {

// Shared GLSL prelude: every operand is a buffer device address.
constexpr const char* kPrelude = R"(#version 460
#extension GL_EXT_buffer_reference : require
layout(buffer_reference, std430, buffer_reference_align = 4) buffer Floats { float v[]; };
layout(buffer_reference, std430, buffer_reference_align = 16) buffer Words { uvec4 v[]; };
)";

constexpr uint32_t kGroupSize = 256;

std::string withPrelude(const std::string& body) { return kPrelude + body; }

// Workgroups for `items` on `axis`, capped at the device's limit there; the
// kernels loop (grid stride) over whatever the cap leaves.
uint32_t groupsFor(uint64_t items, uint32_t perGroup, const Recorder& r, int axis = 0) {
  uint64_t groups = (items + perGroup - 1) / perGroup;
  return uint32_t(std::min<uint64_t>(groups, r.maxGroups(axis)));
}

// ---------------------------------------------------------------- matmul

constexpr size_t kMaxBatchRank = 4;

struct MatmulPush {
  uint64_t a, b, c;
  uint32_t m, n, k, batchRank, batch;
  std::array<uint32_t, kMaxBatchRank> shape, sa, sb;
};

// a [..., M, K] @ b [..., K, N] after PyTorch's 1-D promotion.
struct MatmulView {
  Shape batch;       // broadcast batch dims of the output
  int64_t m, n, k;
  Shape aBatch, bBatch;
  Shape out;
};

MatmulView matmulView(const std::string& op, const TensorDesc& a, const TensorDesc& b) {
  if (a.rank() == 0 || b.rank() == 0) {
    throwInvalid(op + ": input '" + std::string(a.rank() == 0 ? "a" : "b") +
                 "' is a scalar; matmul needs at least 1 dim on both inputs");
  }
  Shape as = a.shape, bs = b.shape;
  bool dropM = as.size() == 1, dropN = bs.size() == 1;
  if (dropM) as.insert(as.begin(), 1);
  if (dropN) bs.push_back(1);
  MatmulView v;
  v.m = as[as.size() - 2];
  v.k = as.back();
  v.n = bs.back();
  int64_t kb = bs[bs.size() - 2];
  if (kb != v.k) {
    throwInvalid(op + ": input 'b' has shape " + shapeStr(b.shape) + "; expected dim " +
                 std::to_string(b.rank() == 1 ? 0 : int64_t(b.rank()) - 2) + " to be " + std::to_string(v.k) +
                 " (a's last dim, a is " + shapeStr(a.shape) + ")");
  }
  v.aBatch.assign(as.begin(), as.end() - 2);
  v.bBatch.assign(bs.begin(), bs.end() - 2);
  auto batch = broadcastShapes(v.aBatch, v.bBatch);
  if (!batch) {
    throwInvalid(op + ": batch dims of 'a' " + shapeStr(v.aBatch) + " and 'b' " + shapeStr(v.bBatch) +
                 " cannot be broadcast together");
  }
  v.batch = *batch;
  v.out = v.batch;
  if (!dropM) v.out.push_back(v.m);
  if (!dropN) v.out.push_back(v.n);
  return v;
}

class Matmul final : public KernelTemplate {
 public:
  Matmul()
      : source_{"matmul:tiled64", withPrelude(R"(
// 64x64 output tile per workgroup, 16x16 threads, 4x4 outputs per thread,
// staged through shared memory in K steps of 16.
layout(local_size_x = 16, local_size_y = 16) in;
layout(push_constant) uniform Push {
  Floats a; Floats b; Floats c; uint M; uint N; uint K; uint batchRank; uint batch;
  uint shape[4]; uint sa[4]; uint sb[4];
} p;
shared float As[16][64];
shared float Bs[16][64];
void main() {
  uint tx = gl_LocalInvocationID.x, ty = gl_LocalInvocationID.y;
  uint t = ty * 16u + tx;
  for (uint bi = gl_WorkGroupID.z; bi < p.batch; bi += gl_NumWorkGroups.z) {
    uint aoff = 0u, boff = 0u, rem = bi;
    for (int d = int(p.batchRank) - 1; d >= 0; --d) {
      uint idx = rem % p.shape[d];
      rem /= p.shape[d];
      aoff += idx * p.sa[d];
      boff += idx * p.sb[d];
    }
    uint coff = bi * p.M * p.N;
    for (uint m0 = gl_WorkGroupID.y * 64u; m0 < p.M; m0 += gl_NumWorkGroups.y * 64u) {
      for (uint n0 = gl_WorkGroupID.x * 64u; n0 < p.N; n0 += gl_NumWorkGroups.x * 64u) {
        float acc[4][4];
        for (int r = 0; r < 4; ++r) for (int c = 0; c < 4; ++c) acc[r][c] = 0.0;
        for (uint k0 = 0u; k0 < p.K; k0 += 16u) {
          for (uint j = 0u; j < 4u; ++j) {
            uint i = t + 256u * j;
            uint am = i / 16u, ak = i % 16u;
            uint gm = m0 + am, gk = k0 + ak;
            As[ak][am] = (gm < p.M && gk < p.K) ? p.a.v[aoff + gm * p.K + gk] : 0.0;
            uint bk = i / 64u, bn = i % 64u;
            uint hk = k0 + bk, hn = n0 + bn;
            Bs[bk][bn] = (hk < p.K && hn < p.N) ? p.b.v[boff + hk * p.N + hn] : 0.0;
          }
          barrier();
          for (uint kk = 0u; kk < 16u; ++kk) {
            float av[4], bv[4];
            for (int r = 0; r < 4; ++r) av[r] = As[kk][ty + 16u * uint(r)];
            for (int c = 0; c < 4; ++c) bv[c] = Bs[kk][tx + 16u * uint(c)];
            for (int r = 0; r < 4; ++r) for (int c = 0; c < 4; ++c) acc[r][c] += av[r] * bv[c];
          }
          barrier();
        }
        for (int r = 0; r < 4; ++r) {
          uint gm = m0 + ty + 16u * uint(r);
          if (gm >= p.M) continue;
          for (int c = 0; c < 4; ++c) {
            uint gn = n0 + tx + 16u * uint(c);
            if (gn < p.N) p.c.v[coff + gm * p.N + gn] = acc[r][c];
          }
        }
      }
    }
  }
}
)")} {}

  std::vector<TensorDesc> infer(const OpSpec& spec, std::span<const TensorDesc> in, const Attrs&) const override {
    MatmulView v = matmulView(spec.name, in[0], in[1]);
    if (size_t dims = coalesce(v.batch, {broadcastStrides(v.aBatch, v.batch), broadcastStrides(v.bBatch, v.batch)}).shape.size(); dims > kMaxBatchRank) {
      throwInvalid(spec.name + ": batch dims of 'a' " + shapeStr(v.aBatch) + " and 'b' " + shapeStr(v.bBatch) +
                   " leave " + std::to_string(dims) + " independent dims after broadcasting; at most " +
                   std::to_string(kMaxBatchRank) + " are supported");
    }
    return {TensorDesc{in[0].dtype, v.out}};
  }

  std::vector<const KernelSource*> variants(const OpSpec&, DType) const override { return {&source_}; }

  void record(const OpSpec&, Recorder& r, std::span<const TensorView> in, std::span<const TensorView> out,
              const Attrs&) const override {
    MatmulView v = matmulView("matmul", in[0].desc, in[1].desc);
    Coalesced c = coalesce(v.batch, {broadcastStrides(v.aBatch, v.batch), broadcastStrides(v.bBatch, v.batch)});
    if (c.shape.size() > kMaxBatchRank) throw std::logic_error("matmul: record() before infer()");
    int64_t batch = 1;
    for (int64_t d : c.shape) batch *= d;
    MatmulPush push{in[0].buffer->deviceAddress(), in[1].buffer->deviceAddress(), out[0].buffer->deviceAddress(),
                    uint32_t(v.m), uint32_t(v.n), uint32_t(v.k), uint32_t(c.shape.size()), uint32_t(batch), {}, {}, {}};
    for (size_t d = 0; d < c.shape.size(); ++d) {
      push.shape[d] = uint32_t(c.shape[d]);
      push.sa[d] = uint32_t(c.strides[0][d] * v.m * v.k);
      push.sb[d] = uint32_t(c.strides[1][d] * v.k * v.n);
    }
    uint32_t gx = r.groupsFor(uint64_t(v.n), 64, 0), gy = r.groupsFor(uint64_t(v.m), 64, 1);
    r.dispatch(source_, push, gx, gy, r.groupsFor(uint64_t(batch), 1, 2));
  }

 private:
  KernelSource source_;
};

}  // namespace

std::shared_ptr<const KernelTemplate> matmul() { return std::make_shared<Matmul>(); }

}  // namespace tensord::compute
