#include "compute/kernel_templates.h"

#include <algorithm>
#include <array>
#include <cmath>

#include "compute/error.h"
#include "compute/op_spec.h"

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

int64_t normalizeDim(const std::string& op, int64_t dim, size_t rank) {
  int64_t r = int64_t(rank);
  if (dim < -std::max<int64_t>(r, 1) || dim >= std::max<int64_t>(r, 1)) {
    throwInvalid(op + ": attribute 'dim' is " + std::to_string(dim) + "; expected a dim in [" +
                 std::to_string(-std::max<int64_t>(r, 1)) + ", " + std::to_string(std::max<int64_t>(r, 1) - 1) +
                 "] for a rank-" + std::to_string(rank) + " input");
  }
  return dim < 0 ? dim + r : dim;
}

// ---------------------------------------------------------------- unary

struct UnaryPush {
  uint64_t x, y;
  uint32_t n;
};

class Unary final : public KernelTemplate {
 public:
  explicit Unary(std::string expr)
      : source_{"unary:" + expr, withPrelude(R"(
layout(local_size_x = 256) in;
layout(push_constant) uniform Push { Floats x; Floats y; uint n; } p;
void main() {
  uint stride = gl_NumWorkGroups.x * 256u;
  for (uint i = gl_GlobalInvocationID.x; i < p.n; i += stride) {
    float x = p.x.v[i];
    p.y.v[i] = )" + expr + R"(;
  }
}
)")} {}

  std::vector<TensorDesc> infer(const OpSpec&, std::span<const TensorDesc> in, const Attrs&) const override {
    return {in[0]};
  }

  void record(Recorder& r, std::span<const TensorView> in, std::span<const TensorView> out,
              const Attrs&) const override {
    UnaryPush push{in[0].buffer->deviceAddress(), out[0].buffer->deviceAddress(), uint32_t(in[0].desc.numel())};
    r.dispatch(source_, push, groupsFor(push.n, kGroupSize, r));
  }

 private:
  KernelSource source_;
};

// ---------------------------------------------------------------- binary

constexpr size_t kMaxBroadcastRank = 6;

struct BinaryPush {
  uint64_t a, b, c;
  uint32_t n, rank;
  std::array<uint32_t, kMaxBroadcastRank> shape, sa, sb;
};

// Element strides of `shape` broadcast to `out` (0 where broadcast).
std::vector<int64_t> broadcastStrides(const Shape& shape, const Shape& out) {
  std::vector<int64_t> strides(out.size(), 0);
  int64_t stride = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    size_t d = shape.size() - 1 - i, o = out.size() - 1 - i;
    strides[o] = shape[d] == 1 ? 0 : stride;
    stride *= shape[d];
  }
  return strides;
}

// `out` with the strides of `a` and `b` broadcast to it, size-1 dims dropped
// and neighbouring dims merged where they are contiguous in both operands.
struct Coalesced {
  std::vector<int64_t> shape, sa, sb;
};

Coalesced coalesce(const Shape& out, const Shape& a, const Shape& b) {
  auto sa = broadcastStrides(a, out), sb = broadcastStrides(b, out);
  Coalesced c;
  for (size_t d = 0; d < out.size(); ++d) {
    if (out[d] == 1) continue;
    if (!c.shape.empty() && c.sa.back() == sa[d] * out[d] && c.sb.back() == sb[d] * out[d]) {
      c.shape.back() *= out[d];
      c.sa.back() = sa[d];
      c.sb.back() = sb[d];
      continue;
    }
    c.shape.push_back(out[d]);
    c.sa.push_back(sa[d]);
    c.sb.push_back(sb[d]);
  }
  return c;
}

class Binary final : public KernelTemplate {
 public:
  explicit Binary(std::string expr)
      : source_{"binary:" + expr, withPrelude(R"(
layout(local_size_x = 256) in;
layout(push_constant) uniform Push {
  Floats a; Floats b; Floats c; uint n; uint rank; uint shape[6]; uint sa[6]; uint sb[6];
} p;
void main() {
  uint stride = gl_NumWorkGroups.x * 256u;
  bool dense = p.rank == 1u && p.sa[0] == 1u && p.sb[0] == 1u;
  for (uint i = gl_GlobalInvocationID.x; i < p.n; i += stride) {
    uint ia = i, ib = i;
    if (!dense) {
      uint rem = i;
      ia = 0u; ib = 0u;
      for (int d = int(p.rank) - 1; d >= 0; --d) {
        uint idx = rem % p.shape[d];
        rem /= p.shape[d];
        ia += idx * p.sa[d];
        ib += idx * p.sb[d];
      }
    }
    float a = p.a.v[ia];
    float b = p.b.v[ib];
    p.c.v[i] = )" + expr + R"(;
  }
}
)")} {}

  std::vector<TensorDesc> infer(const OpSpec& spec, std::span<const TensorDesc> in, const Attrs&) const override {
    auto shape = broadcastShapes(in[0].shape, in[1].shape);
    if (!shape) {
      throwInvalid(spec.name + ": inputs '" + spec.inputs[0] + "' " + in[0].str() + " and '" + spec.inputs[1] + "' " +
                   in[1].str() + " cannot be broadcast together (trailing dims must match or be 1)");
    }
    if (size_t dims = coalesce(*shape, in[0].shape, in[1].shape).shape.size(); dims > kMaxBroadcastRank) {
      throwInvalid(spec.name + ": broadcasting " + in[0].str() + " with " + in[1].str() + " leaves " +
                   std::to_string(dims) + " independent dims; at most " + std::to_string(kMaxBroadcastRank) +
                   " are supported");
    }
    return {TensorDesc{in[0].dtype, *shape}};
  }

  void record(Recorder& r, std::span<const TensorView> in, std::span<const TensorView> out,
              const Attrs&) const override {
    // infer() checked that the coalesced rank fits.
    Coalesced c = coalesce(out[0].desc.shape, in[0].desc.shape, in[1].desc.shape);
    if (c.shape.empty()) c = {{1}, {1}, {1}};
    if (c.shape.size() > kMaxBroadcastRank) throw std::logic_error("binary: record() before infer()");
    BinaryPush push{in[0].buffer->deviceAddress(), in[1].buffer->deviceAddress(), out[0].buffer->deviceAddress(),
                    uint32_t(out[0].desc.numel()), uint32_t(c.shape.size()), {}, {}, {}};
    for (size_t d = 0; d < c.shape.size(); ++d) {
      push.shape[d] = uint32_t(c.shape[d]);
      push.sa[d] = uint32_t(c.sa[d]);
      push.sb[d] = uint32_t(c.sb[d]);
    }
    r.dispatch(source_, push, groupsFor(push.n, kGroupSize, r));
  }

 private:
  KernelSource source_;
};

// ---------------------------------------------------------------- reduce

struct ReducePush {
  uint64_t x, y;
  uint32_t outer, d, inner;
  float scale;
};

// The input viewed as [outer, d, inner], reduced over d.
struct ReduceView {
  int64_t outer = 1, d = 1, inner = 1;
};

ReduceView reduceView(const std::string& op, const Shape& shape, const std::vector<int64_t>& dims,
                      std::vector<bool>* reduced) {
  reduced->assign(shape.size(), dims.empty());
  for (int64_t dim : dims) {
    int64_t d = normalizeDim(op, dim, shape.size());
    if (shape.empty()) continue;  // a scalar reduces over nothing
    if ((*reduced)[d]) throwInvalid(op + ": attribute 'dim' names dim " + std::to_string(dim) + " twice");
    (*reduced)[d] = true;
  }
  // The reduced dims must be adjacent, so the view stays [outer, d, inner].
  auto first = std::find(reduced->begin(), reduced->end(), true);
  auto last = std::find(reduced->rbegin(), reduced->rend(), true).base();
  if (first != reduced->end() && std::find(first, last, false) != last) {
    throwInvalid(op + ": attribute 'dim' must name adjacent dims; got a gap between them");
  }
  ReduceView v;
  for (size_t i = 0; i < shape.size(); ++i) {
    if ((*reduced)[i]) v.d *= shape[i];
    else if (first == reduced->end() || int64_t(i) < first - reduced->begin()) v.outer *= shape[i];
    else v.inner *= shape[i];
  }
  return v;
}

class Reduce final : public KernelTemplate {
 public:
  explicit Reduce(ReduceKind kind)
      : kind_(kind),
        rows_{"reduce:rows", withPrelude(R"(
layout(local_size_x = 256) in;
layout(push_constant) uniform Push { Floats x; Floats y; uint outer; uint d; uint inner; float scale; } p;
shared float partial[256];
void main() {
  uint lid = gl_LocalInvocationID.x;
  for (uint row = gl_WorkGroupID.x; row < p.outer; row += gl_NumWorkGroups.x) {
    float acc = 0.0;
    uint base = row * p.d;
    for (uint k = lid; k < p.d; k += 256u) acc += p.x.v[base + k];
    partial[lid] = acc;
    barrier();
    for (uint s = 128u; s > 0u; s >>= 1u) {
      if (lid < s) partial[lid] += partial[lid + s];
      barrier();
    }
    if (lid == 0u) p.y.v[row] = partial[0] * p.scale;
    barrier();
  }
}
)")},
        cols_{"reduce:cols", withPrelude(R"(
layout(local_size_x = 256) in;
layout(push_constant) uniform Push { Floats x; Floats y; uint outer; uint d; uint inner; float scale; } p;
void main() {
  uint total = p.outer * p.inner;
  uint stride = gl_NumWorkGroups.x * 256u;
  for (uint idx = gl_GlobalInvocationID.x; idx < total; idx += stride) {
    uint o = idx / p.inner, i = idx % p.inner;
    uint base = o * p.d * p.inner + i;
    float acc = 0.0;
    for (uint k = 0u; k < p.d; ++k) acc += p.x.v[base + k * p.inner];
    p.y.v[idx] = acc * p.scale;
  }
}
)")} {}

  std::vector<TensorDesc> infer(const OpSpec& spec, std::span<const TensorDesc> in,
                                const Attrs& attrs) const override {
    std::vector<bool> reduced;
    reduceView(spec.name, in[0].shape, attrs.getInts("dim"), &reduced);
    bool keepdim = attrs.getBool("keepdim");
    Shape shape;
    for (size_t i = 0; i < in[0].shape.size(); ++i) {
      if (!reduced[i]) shape.push_back(in[0].shape[i]);
      else if (keepdim) shape.push_back(1);
    }
    return {TensorDesc{in[0].dtype, shape}};
  }

  void record(Recorder& r, std::span<const TensorView> in, std::span<const TensorView> out,
              const Attrs& attrs) const override {
    std::vector<bool> reduced;
    ReduceView v = reduceView("reduce", in[0].desc.shape, attrs.getInts("dim"), &reduced);
    float scale = kind_ == ReduceKind::kMean ? (v.d ? 1.0f / float(v.d) : NAN) : 1.0f;
    ReducePush push{in[0].buffer->deviceAddress(), out[0].buffer->deviceAddress(), uint32_t(v.outer),
                    uint32_t(v.d), uint32_t(v.inner), scale};
    if (v.inner == 1) {
      r.dispatch(rows_, push, groupsFor(uint64_t(v.outer), 1, r));
    } else {
      r.dispatch(cols_, push, groupsFor(uint64_t(v.outer * v.inner), kGroupSize, r));
    }
  }

 private:
  ReduceKind kind_;
  KernelSource rows_, cols_;
};

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
    if (size_t dims = coalesce(v.batch, v.aBatch, v.bBatch).shape.size(); dims > kMaxBatchRank) {
      throwInvalid(spec.name + ": batch dims of 'a' " + shapeStr(v.aBatch) + " and 'b' " + shapeStr(v.bBatch) +
                   " leave " + std::to_string(dims) + " independent dims after broadcasting; at most " +
                   std::to_string(kMaxBatchRank) + " are supported");
    }
    return {TensorDesc{in[0].dtype, v.out}};
  }

  void record(Recorder& r, std::span<const TensorView> in, std::span<const TensorView> out,
              const Attrs&) const override {
    MatmulView v = matmulView("matmul", in[0].desc, in[1].desc);
    Coalesced c = coalesce(v.batch, v.aBatch, v.bBatch);
    if (c.shape.size() > kMaxBatchRank) throw std::logic_error("matmul: record() before infer()");
    int64_t batch = 1;
    for (int64_t d : c.shape) batch *= d;
    MatmulPush push{in[0].buffer->deviceAddress(), in[1].buffer->deviceAddress(), out[0].buffer->deviceAddress(),
                    uint32_t(v.m), uint32_t(v.n), uint32_t(v.k), uint32_t(c.shape.size()), uint32_t(batch), {}, {}, {}};
    for (size_t d = 0; d < c.shape.size(); ++d) {
      push.shape[d] = uint32_t(c.shape[d]);
      push.sa[d] = uint32_t(c.sa[d] * v.m * v.k);
      push.sb[d] = uint32_t(c.sb[d] * v.k * v.n);
    }
    uint32_t gx = groupsFor(uint64_t(v.n), 64, r, 0), gy = groupsFor(uint64_t(v.m), 64, r, 1);
    r.dispatch(source_, push, gx, gy, groupsFor(uint64_t(batch), 1, r, 2));
  }

 private:
  KernelSource source_;
};

}  // namespace

std::optional<Shape> broadcastShapes(const Shape& a, const Shape& b) {
  Shape out(std::max(a.size(), b.size()));
  for (size_t i = 0; i < out.size(); ++i) {
    int64_t da = i < a.size() ? a[a.size() - 1 - i] : 1;
    int64_t db = i < b.size() ? b[b.size() - 1 - i] : 1;
    if (da != db && da != 1 && db != 1) return std::nullopt;
    out[out.size() - 1 - i] = da == 1 ? db : da;
  }
  return out;
}

std::shared_ptr<const KernelTemplate> unary(std::string expr) { return std::make_shared<Unary>(std::move(expr)); }
std::shared_ptr<const KernelTemplate> binary(std::string expr) { return std::make_shared<Binary>(std::move(expr)); }
std::shared_ptr<const KernelTemplate> reduce(ReduceKind kind) { return std::make_shared<Reduce>(kind); }
std::shared_ptr<const KernelTemplate> matmul() { return std::make_shared<Matmul>(); }

const KernelSource& copyKernel() {
  static const KernelSource source{"copy", withPrelude(R"(
layout(local_size_x = 256) in;
layout(push_constant) uniform Push { Words src; Words dst; uint count; } p;
void main() {
  uint stride = gl_NumWorkGroups.x * 256u;
  for (uint i = gl_GlobalInvocationID.x; i < p.count; i += stride) p.dst.v[i] = p.src.v[i];
}
)")};
  return source;
}

}  // namespace tensord::compute
