// Conformance of the index ops: gather, index_select, take, scatter,
// scatter_add, index_put, masked_fill. Copies are exact in every dtype;
// sums (scatter_add, index_put accumulate) use the dtype's tolerance scaled
// by the number of terms. Out-of-range indices are found on the device and
// must fail the op without breaking the engine.

#include <functional>

#include "compute/op_families.h"
#include "tests/compute/conformance.h"

namespace tensord::compute::testing {
namespace {

TENSORD_COVERS(index_ops, "gather", "index_select", "take", "scatter", "scatter_add", "index_put", "masked_fill");

int64_t numel(const Shape& s) {
  int64_t n = 1;
  for (auto d : s) n *= d;
  return n;
}

int64_t offsetOf(const std::vector<int64_t>& c, const Shape& s) {
  int64_t o = 0;
  for (size_t d = 0; d < s.size(); ++d) o = o * s[d] + c[d];
  return o;
}

HostTensor anyTensor(DType dtype, const Shape& shape) {
  return randomTensor(dtype, shape, dtype == DType::U8 ? 0 : -100, 100);
}

// Random indices in [-size, size) (negative count from the end).
HostTensor indices(DType dtype, const Shape& shape, int64_t size, bool negative = true) {
  return randomTensor(dtype, shape, negative ? double(-size) : 0, double(size - 1));
}

int64_t wrap(double v, int64_t size) { return v < 0 ? int64_t(v) + size : int64_t(v); }

class IndexOpsTest : public ConformanceTest {};

TEST_F(IndexOpsTest, GatherEveryDType) {
  for (DType dt : kAllDTypes) {
    for (DType it : {DType::I32, DType::I64}) {
      std::string name = std::string(dtypeName(dt)) + "/" + std::string(dtypeName(it));
      auto x = anyTensor(dt, {4, 5, 3});
      for (int64_t dim : {0, 1, -1}) {
        int64_t d = dim < 0 ? dim + 3 : dim;
        Shape is = {3, 4, 2};
        is[size_t(d)] = 6;
        auto idx = indices(it, is, x.shape[size_t(d)]);
        auto y = call("gather", {x, idx}, {{"dim", dim}});
        HostTensor want{dt, is, std::vector<double>(size_t(numel(is)))};
        for (int64_t i = 0; i < numel(is); ++i) {
          auto c = unravel(i, is);
          c[size_t(d)] = wrap(idx.values[size_t(i)], x.shape[size_t(d)]);
          want.values[size_t(i)] = x.values[size_t(offsetOf(c, x.shape))];
        }
        expectClose(y[0], want, "gather " + name + " dim " + std::to_string(dim));
      }
    }
  }
  auto s = anyTensor(DType::F32, {});
  expectClose(call("gather", {s, makeTensor(DType::I64, {}, {-1})}, {{"dim", int64_t(0)}})[0], s, "gather 0-d");
  EXPECT_EQ(call("gather", {anyTensor(DType::F32, {2, 3}), indices(DType::I64, {0, 3}, 2)}, {{"dim", int64_t(0)}})[0].shape,
            (Shape{0, 3}));
}

TEST_F(IndexOpsTest, IndexSelectTake) {
  for (DType dt : kAllDTypes) {
    std::string name(dtypeName(dt));
    auto x = anyTensor(dt, {4, 5, 6});
    auto idx = indices(dt == DType::F32 ? DType::I32 : DType::I64, {7}, 5);
    auto y = call("index_select", {x, idx}, {{"dim", int64_t(1)}});
    HostTensor want{dt, {4, 7, 6}, std::vector<double>(4 * 7 * 6)};
    for (int64_t i = 0; i < numel(want.shape); ++i) {
      auto c = unravel(i, want.shape);
      c[1] = wrap(idx.values[size_t(c[1])], 5);
      want.values[size_t(i)] = x.values[size_t(offsetOf(c, x.shape))];
    }
    expectClose(y[0], want, "index_select " + name);
    auto ti = indices(DType::I64, {2, 3, 2}, 120);
    auto t = call("take", {x, ti});
    HostTensor tw{dt, ti.shape, std::vector<double>(12)};
    for (size_t i = 0; i < 12; ++i) tw.values[i] = x.values[size_t(wrap(ti.values[i], 120))];
    expectClose(t[0], tw, "take " + name);
  }
  auto x = anyTensor(DType::F32, {3, 4});
  auto y = call("index_select", {x, makeTensor(DType::I32, {}, {-1})}, {{"dim", int64_t(-1)}});
  ASSERT_EQ(y[0].shape, (Shape{3, 1}));
  for (int64_t r = 0; r < 3; ++r) EXPECT_EQ(y[0].values[size_t(r)], x.values[size_t(r * 4 + 3)]);
  EXPECT_EQ(call("take", {x, makeTensor(DType::I64, {0}, {})})[0].shape, (Shape{0}));
  EXPECT_EQ(errorOf("index_select", {x, makeTensor(DType::I64, {1, 1}, {0})}, {{"dim", int64_t(0)}}),
            "index_select: input 'index' is i64[1, 1]; expected a 1-D (or 0-d) index");
  EXPECT_EQ(errorOf("gather", {x, makeTensor(DType::I64, {3}, {0, 0, 0})}, {{"dim", int64_t(0)}}),
            "gather: input 'index' is i64[3]; expected rank 2 like the input f32[3, 4]");
  EXPECT_EQ(errorOf("gather", {x, makeTensor(DType::F32, {3}, {0, 0, 0})}, {{"dim", int64_t(0)}}),
            "gather: input 'index' has dtype f32; expected i64 or i32 (indices)");
}

TEST_F(IndexOpsTest, MaskedFill) {
  for (DType dt : kAllDTypes) {
    std::string name(dtypeName(dt));
    auto x = anyTensor(dt, {3, 5});
    auto mask = randomTensor(DType::Bool, {5});
    double value = dt == DType::Bool ? 1 : 7;
    auto y = call("masked_fill", {x, mask}, {{"value", value}});
    HostTensor want = x;
    for (size_t i = 0; i < 15; ++i) {
      if (mask.values[i % 5] != 0) want.values[i] = roundTo(dt, value);
    }
    expectClose(y[0], want, "masked_fill " + name);
    auto v = anyTensor(dt, {});
    y = call("masked_fill", {x, mask, v});
    want = x;
    for (size_t i = 0; i < 15; ++i) {
      if (mask.values[i % 5] != 0) want.values[i] = v.values[0];
    }
    expectClose(y[0], want, "masked_fill tensor value " + name);
  }
  // A float value on an int tensor is converted (the result keeps the input's dtype).
  auto x = makeTensor(DType::I32, {2, 2}, {1, 2, 3, 4});
  auto y = call("masked_fill", {x, makeTensor(DType::Bool, {2, 1}, {1, 0})}, {{"value", -2.7}});
  EXPECT_EQ(y[0].dtype, DType::I32);
  EXPECT_EQ(y[0].values, (std::vector<double>{-2, -2, 3, 4}));
  auto s = anyTensor(DType::F32, {});
  EXPECT_EQ(call("masked_fill", {s, makeTensor(DType::Bool, {}, {1})}, {{"value", 0.5}})[0].values,
            (std::vector<double>{0.5}));
  EXPECT_EQ(errorOf("masked_fill", {x, makeTensor(DType::Bool, {3}, {1, 0, 1})}, {{"value", 1.0}}),
            "masked_fill: input 'mask' is bool[3]; expected a shape that broadcasts to the input i32[2, 2]");
  EXPECT_EQ(errorOf("masked_fill", {x, makeTensor(DType::I32, {2}, {1, 0})}, {{"value", 1.0}}),
            "masked_fill: input 'mask' has dtype i32; expected bool (a mask)");
  EXPECT_EQ(errorOf("masked_fill", {x, makeTensor(DType::Bool, {2}, {1, 0})}),
            "masked_fill: operand 'value' is missing; give it as a 0-d tensor or as the scalar attribute 'value'");
}

// Reference scatter: out = input; positions of index (shape is) put src at
// the same coordinates with dim replaced by the index.
HostTensor scatterRef(const HostTensor& x, int64_t dim, const HostTensor& idx, const HostTensor* src, double value,
                      bool add) {
  HostTensor out = x;
  std::vector<double> acc(out.values);
  for (int64_t i = 0; i < idx.numel(); ++i) {
    auto c = unravel(i, idx.shape);
    double v = src ? src->values[size_t(offsetOf(c, src->shape))] : roundTo(x.dtype, value);
    auto o = c;
    o[size_t(dim)] = wrap(idx.values[size_t(i)], x.shape[size_t(dim)]);
    size_t at = size_t(offsetOf(o, x.shape));
    acc[at] = add ? acc[at] + v : v;
  }
  for (size_t i = 0; i < acc.size(); ++i) out.values[i] = roundTo(x.dtype, acc[i]);
  return out;
}

TEST_F(IndexOpsTest, ScatterAndScatterAdd) {
  for (DType dt : kAllDTypes) {
    std::string name(dtypeName(dt));
    auto x = anyTensor(dt, {4, 6, 3});
    auto src = dt == DType::Bool ? anyTensor(dt, {5, 5, 3}) : randomTensor(dt, {5, 5, 3}, 0, 20);
    for (int64_t dim : {0, 1}) {
      // Indices unique along dim for scatter (PyTorch leaves duplicates undefined): a permutation prefix.
      Shape is = {3, 4, 2};
      int64_t size = x.shape[size_t(dim)];
      HostTensor idx{DType::I64, is, std::vector<double>(size_t(numel(is)))};
      // Make them unique along dim: shift by position so each column is a rotation.
      for (int64_t i = 0; i < numel(is); ++i) {
        auto c = unravel(i, is);
        int64_t base = (c[2] + (dim == 0 ? c[1] : c[0])) % size;
        int64_t v = (base + c[size_t(dim)]) % size;
        idx.values[size_t(i)] = (c[size_t(dim)] % 2) ? double(v - size) : double(v);
      }
      auto y = call("scatter", {x, idx, src}, {{"dim", dim}});
      expectClose(y[0], scatterRef(x, dim, idx, &src, 0, false), "scatter " + name + " dim " + std::to_string(dim));
      y = call("scatter", {x, idx}, {{"dim", dim}, {"value", int64_t(1)}});
      expectClose(y[0], scatterRef(x, dim, idx, nullptr, 1, false), "scatter value " + name);
      if (dt == DType::Bool) continue;
      // Duplicates sum.
      auto dup = indices(DType::I32, {5, 4, 3}, size);
      if (dim == 1) dup = indices(DType::I32, {4, 5, 3}, size);
      HostTensor src2 = randomTensor(dt, {5, 5, 3}, 0, dt == DType::U8 ? 40 : 20);
      y = call("scatter_add", {x, dup, src2}, {{"dim", dim}});
      expectClose(y[0], scatterRef(x, dim, dup, &src2, 0, true), "scatter_add " + name + " dim " + std::to_string(dim),
                  6);
    }
  }
  auto x = anyTensor(DType::F32, {3, 4});
  EXPECT_EQ(errorOf("scatter", {x, makeTensor(DType::I64, {1, 1}, {0})}, {{"dim", int64_t(0)}}),
            "scatter: operand 'src' is missing; give it as an input tensor or as the scalar attribute 'value'");
  EXPECT_EQ(errorOf("scatter_add", {x, makeTensor(DType::I64, {2, 2}, {0, 0, 0, 0}), anyTensor(DType::F32, {1, 2})},
                    {{"dim", int64_t(0)}}),
            "scatter_add: input 'src' is f32[1, 2]; expected rank 2 and at least the index's size i64[2, 2] in every dim");
  EXPECT_EQ(errorOf("scatter_add", {anyTensor(DType::Bool, {2}), makeTensor(DType::I64, {1}, {0}),
                                    anyTensor(DType::Bool, {1})},
                    {{"dim", int64_t(0)}}),
            "scatter_add: input 'input' has dtype bool; expected one of f32, f16, bf16, i32, i64, u8");
}

TEST_F(IndexOpsTest, IndexPut) {
  for (DType dt : kAllDTypes) {
    std::string name(dtypeName(dt));
    auto x = anyTensor(dt, {5, 2, 3});
    auto idx = makeTensor(DType::I64, {4}, {1, -1, 1, 3});
    auto values = dt == DType::Bool ? anyTensor(dt, {4, 1, 3}) : randomTensor(dt, {4, 1, 3}, 0, 20);
    for (bool accumulate : {false, true}) {
      auto y = call("index_put", {x, idx, values}, {{"accumulate", accumulate}});
      HostTensor want = x;
      std::vector<double> acc = x.values;
      for (int64_t k = 0; k < 4; ++k) {
        int64_t row = wrap(idx.values[size_t(k)], 5);
        for (int64_t j = 0; j < 6; ++j) {
          double v = values.values[size_t(k * 3 + j % 3)];
          size_t at = size_t(row * 6 + j);
          acc[at] = accumulate ? (dt == DType::Bool ? double(acc[at] != 0 || v != 0) : acc[at] + v) : v;
        }
      }
      for (size_t i = 0; i < acc.size(); ++i) want.values[i] = roundTo(dt, acc[i]);
      expectClose(y[0], want, "index_put " + name + (accumulate ? " accumulate" : ""), 3);
    }
  }
  auto x = anyTensor(DType::F32, {3, 2});
  auto y = call("index_put", {x, makeTensor(DType::I32, {2}, {0, 2}), makeTensor(DType::F32, {}, {9})});
  EXPECT_EQ(y[0].values, (std::vector<double>{9, 9, x.values[2], x.values[3], 9, 9}));
  EXPECT_EQ(errorOf("index_put", {x, makeTensor(DType::I64, {2, 1}, {0, 1}), makeTensor(DType::F32, {}, {9})}),
            "index_put: input 'indices' is i64[2, 1]; expected one 1-D index tensor (for dim 0 of the input)");
  EXPECT_EQ(errorOf("index_put", {x, makeTensor(DType::I64, {2}, {0, 1}), anyTensor(DType::F32, {3, 2})}),
            "index_put: input 'values' is f32[3, 2]; expected a shape that broadcasts to [2, 2] (the indexed part of "
            "the input f32[3, 2])");
}

TEST_F(IndexOpsTest, OutOfRangeIndicesFailOnTheDevice) {
  auto x = anyTensor(DType::F32, {3, 5});
  EXPECT_EQ(errorOf("gather", {x, makeTensor(DType::I64, {2, 2}, {0, 7, 1, 2})}, {{"dim", int64_t(1)}}),
            "gather: index 7 is out of range for dim 1 of size 5");
  EXPECT_EQ(errorOf("gather", {x, makeTensor(DType::I32, {1, 1}, {-4})}, {{"dim", int64_t(0)}}),
            "gather: index -4 is out of range for dim 0 of size 3");
  EXPECT_EQ(errorOf("index_select", {x, makeTensor(DType::I64, {3}, {0, 1, 3})}, {{"dim", int64_t(0)}}),
            "index_select: index 3 is out of range for dim 0 of size 3");
  EXPECT_EQ(errorOf("take", {x, makeTensor(DType::I64, {1}, {-16})}),
            "take: index -16 is out of range for the flattened input of size 15");
  EXPECT_EQ(errorOf("scatter", {x, makeTensor(DType::I64, {1, 2}, {0, 5})}, {{"dim", int64_t(1)}, {"value", 1.0}}),
            "scatter: index 5 is out of range for dim 1 of size 5");
  EXPECT_EQ(errorOf("scatter_add", {x, makeTensor(DType::I32, {2, 1}, {1, 9}), anyTensor(DType::F32, {2, 1})},
                    {{"dim", int64_t(0)}}),
            "scatter_add: index 9 is out of range for dim 0 of size 3");
  EXPECT_EQ(errorOf("index_put", {x, makeTensor(DType::I64, {2}, {0, 3000000000.0}), anyTensor(DType::F32, {5})}),
            "index_put: index 3000000000 is out of range for dim 0 of size 3");
  EXPECT_EQ(errorOf("gather", {anyTensor(DType::F32, {0, 2}), makeTensor(DType::I64, {1, 1}, {0})}, {{"dim", int64_t(0)}}),
            "gather: input 'index' has 1 indices but they select from dim 0 of size 0; every index is out of range");
  // The engine keeps working after a device-side error.
  auto y = call("gather", {x, makeTensor(DType::I64, {1, 2}, {4, -5})}, {{"dim", int64_t(1)}});
  EXPECT_EQ(y[0].values, (std::vector<double>{x.values[4], x.values[0]}));
  auto z = call("transpose", {x}, {{"dim0", int64_t(0)}, {"dim1", int64_t(1)}});
  EXPECT_EQ(z[0].shape, (Shape{5, 3}));
}

// More than 65535 workgroups of 256.
TEST_F(IndexOpsTest, LargeTake) {
  auto x = randomTensor(DType::U8, {300}, 0, 255);
  auto idx = randomTensor(DType::I32, {16'800'000}, -300, 299);
  auto y = call("take", {x, idx});
  HostTensor want{DType::U8, idx.shape, std::vector<double>(idx.values.size())};
  for (size_t i = 0; i < want.values.size(); ++i) want.values[i] = x.values[size_t(wrap(idx.values[i], 300))];
  expectClose(y[0], want, "take large");
}

}  // namespace
}  // namespace tensord::compute::testing
