// Conformance of the shape ops: views (reshape, flatten, squeeze, unsqueeze)
// and the remap copies (permute ... tril, cat, stack, split, chunk). Every
// result is a copy of input elements (or a constant), so every dtype must
// match the reference exactly.

#include <functional>
#include <optional>

#include "compute/op_families.h"
#include "tests/compute/conformance.h"

namespace tensord::compute::testing {
namespace {

TENSORD_COVERS(shape_views, "reshape", "flatten", "squeeze", "unsqueeze");
TENSORD_COVERS(shape_copies, "permute", "transpose", "expand", "repeat", "narrow", "slice", "flip", "roll", "pad",
               "contiguous", "triu", "tril", "cat", "stack", "split", "chunk");

using Coords = std::vector<int64_t>;
// The reference: out[c] = in[map(c)], or `fill` where map gives nullopt.
using MapFn = std::function<std::optional<Coords>(const Coords&)>;

int64_t numel(const Shape& s) {
  int64_t n = 1;
  for (auto d : s) n *= d;
  return n;
}

int64_t offsetOf(const Coords& c, const Shape& s) {
  int64_t o = 0;
  for (size_t d = 0; d < s.size(); ++d) o = o * s[d] + c[d];
  return o;
}

HostTensor reference(const HostTensor& in, const Shape& out, const MapFn& map, double fill = 0) {
  HostTensor r{in.dtype, out, std::vector<double>(size_t(numel(out)))};
  for (int64_t i = 0; i < numel(out); ++i) {
    auto c = map(unravel(i, out));
    r.values[size_t(i)] = c ? in.values[size_t(offsetOf(*c, in.shape))] : roundTo(in.dtype, fill);
  }
  return r;
}

HostTensor anyTensor(DType dtype, const Shape& shape) { return randomTensor(dtype, shape, -100, 100); }

class ShapeOpsTest : public ConformanceTest {};

TEST_F(ShapeOpsTest, Views) {
  auto x = anyTensor(DType::F32, {2, 3, 4});
  auto check = [&](const std::string& op, std::vector<std::pair<std::string, AttrValue>> attrs, const Shape& want,
                   const HostTensor& in) {
    auto y = call(op, {in}, attrs);
    ASSERT_EQ(y.size(), 1u);
    EXPECT_EQ(y[0].shape, want) << op;
    EXPECT_EQ(y[0].values, in.values) << op;
  };
  check("reshape", {{"shape", std::vector<int64_t>{4, -1}}}, {4, 6}, x);
  check("reshape", {{"shape", std::vector<int64_t>{24}}}, {24}, x);
  check("reshape", {{"shape", std::vector<int64_t>{}}}, {}, anyTensor(DType::I64, {1, 1}));
  check("reshape", {{"shape", std::vector<int64_t>{3, 0}}}, {3, 0}, anyTensor(DType::F16, {0, 3}));
  check("flatten", {}, {24}, x);
  check("flatten", {{"start_dim", int64_t(1)}}, {2, 12}, x);
  check("flatten", {{"start_dim", int64_t(0)}, {"end_dim", int64_t(-2)}}, {6, 4}, x);
  check("flatten", {}, {1}, anyTensor(DType::Bool, {}));
  auto s = anyTensor(DType::BF16, {1, 3, 1, 2});
  check("squeeze", {}, {3, 2}, s);
  check("squeeze", {{"dim", std::vector<int64_t>{2}}}, {1, 3, 2}, s);
  check("squeeze", {{"dim", std::vector<int64_t>{0, 1}}}, {3, 1, 2}, s);  // dim 1 is not size 1: kept
  check("squeeze", {}, {}, anyTensor(DType::U8, {}));
  check("unsqueeze", {{"dim", int64_t(0)}}, {1, 2, 3, 4}, x);
  check("unsqueeze", {{"dim", int64_t(-1)}}, {2, 3, 4, 1}, anyTensor(DType::I32, {2, 3, 4}));
  check("unsqueeze", {{"dim", int64_t(0)}}, {1}, anyTensor(DType::F32, {}));

  EXPECT_EQ(errorOf("reshape", {x}, {{"shape", std::vector<int64_t>{5, 5}}}),
            "reshape: attribute 'shape' [5, 5] has 25 elements; expected 24 like the input f32[2, 3, 4]");
  EXPECT_EQ(errorOf("reshape", {x}, {{"shape", std::vector<int64_t>{-1, -1}}}),
            "reshape: attribute 'shape' is [-1, -1]; only one dim may be -1");
  EXPECT_EQ(errorOf("reshape", {x}, {{"shape", std::vector<int64_t>{5, -1}}}),
            "reshape: attribute 'shape' [5, -1] is invalid for an input of 24 elements (f32[2, 3, 4])");
  EXPECT_EQ(errorOf("flatten", {x}, {{"start_dim", int64_t(2)}, {"end_dim", int64_t(1)}}),
            "flatten: attribute 'start_dim' (2) comes after 'end_dim' (1)");
  EXPECT_EQ(errorOf("unsqueeze", {x}, {{"dim", int64_t(4)}}),
            "unsqueeze: attribute 'dim' is 4; expected a dim in [-4, 3] for a rank-4 input");
}

TEST_F(ShapeOpsTest, PermuteTransposeEveryDType) {
  for (DType dt : kAllDTypes) {
    std::string name(dtypeName(dt));
    auto x = anyTensor(dt, {2, 3, 4, 5});
    auto y = call("permute", {x}, {{"dims", std::vector<int64_t>{3, 1, -4, 2}}});
    expectClose(y[0], reference(x, {5, 3, 2, 4}, [](const Coords& c) { return Coords{c[2], c[1], c[3], c[0]}; }),
                "permute " + name);
    auto t = anyTensor(dt, {3, 1, 7});
    y = call("transpose", {t}, {{"dim0", int64_t(0)}, {"dim1", int64_t(-1)}});
    expectClose(y[0], reference(t, {7, 1, 3}, [](const Coords& c) { return Coords{c[2], c[1], c[0]}; }),
                "transpose " + name);
  }
  auto s = anyTensor(DType::F32, {});
  EXPECT_EQ(call("permute", {s}, {{"dims", std::vector<int64_t>{}}})[0].values, s.values);
  auto e = anyTensor(DType::F32, {0, 3});
  EXPECT_EQ(call("transpose", {e}, {{"dim0", int64_t(0)}, {"dim1", int64_t(1)}})[0].shape, (Shape{3, 0}));
  EXPECT_EQ(errorOf("permute", {e}, {{"dims", std::vector<int64_t>{0, 0}}}), "permute: attribute 'dims' names dim 0 twice");
  EXPECT_EQ(errorOf("permute", {e}, {{"dims", std::vector<int64_t>{0}}}),
            "permute: attribute 'dims' is [0]; expected 2 dims for a rank-2 input");
  EXPECT_EQ(errorOf("transpose", {e}, {{"dim0", int64_t(0)}, {"dim1", int64_t(2)}}),
            "transpose: attribute 'dim1' is 2; expected a dim in [-2, 1] for a rank-2 input");
}

TEST_F(ShapeOpsTest, ExpandAndContiguous) {
  auto x = anyTensor(DType::I64, {3, 1});
  auto y = call("expand", {x}, {{"size", std::vector<int64_t>{2, -1, 4}}});
  expectClose(y[0], reference(x, {2, 3, 4}, [](const Coords& c) { return Coords{c[1], 0}; }), "expand");
  auto s = anyTensor(DType::BF16, {});
  y = call("expand", {s}, {{"size", std::vector<int64_t>{2, 2}}});
  expectClose(y[0], reference(s, {2, 2}, [](const Coords&) { return Coords{}; }), "expand 0-d");
  EXPECT_EQ(call("expand", {x}, {{"size", std::vector<int64_t>{3, 0}}})[0].shape, (Shape{3, 0}));
  EXPECT_EQ(errorOf("expand", {x}, {{"size", std::vector<int64_t>{4, 2}}}),
            "expand: attribute 'size' is [4, 2]; dim 0 is 4 but the input i64[3, 1] has 3 there (only size-1 dims "
            "expand)");
  EXPECT_EQ(errorOf("expand", {x}, {{"size", std::vector<int64_t>{2}}}),
            "expand: attribute 'size' is [2]; expected at least 2 sizes for the input i64[3, 1]");
  for (const Shape& shape : {Shape{5, 7}, Shape{}, Shape{0, 4}}) {
    auto c = anyTensor(DType::F16, shape);
    expectClose(call("contiguous", {c})[0], c, "contiguous " + dimsName(shape));
  }
}

TEST_F(ShapeOpsTest, NarrowSlice) {
  auto x = anyTensor(DType::F32, {4, 6, 3});
  auto y = call("narrow", {x}, {{"dim", int64_t(1)}, {"start", int64_t(-4)}, {"length", int64_t(3)}});
  expectClose(y[0], reference(x, {4, 3, 3}, [](const Coords& c) { return Coords{c[0], c[1] + 2, c[2]}; }), "narrow");
  y = call("narrow", {x}, {{"dim", int64_t(0)}, {"start", int64_t(4)}, {"length", int64_t(0)}});
  EXPECT_EQ(y[0].shape, (Shape{0, 6, 3}));
  y = call("slice", {x}, {{"dim", int64_t(1)}, {"start", int64_t(-5)}, {"end", int64_t(100)}, {"step", int64_t(2)}});
  expectClose(y[0], reference(x, {4, 3, 3}, [](const Coords& c) { return Coords{c[0], 1 + 2 * c[1], c[2]}; }),
              "slice step 2");
  y = call("slice", {x}, {{"dim", int64_t(-1)}, {"end", int64_t(-1)}});
  expectClose(y[0], reference(x, {4, 6, 2}, [](const Coords& c) { return c; }), "slice end -1");
  y = call("slice", {x}, {{"dim", int64_t(0)}, {"start", int64_t(3)}, {"end", int64_t(1)}});
  EXPECT_EQ(y[0].shape, (Shape{0, 6, 3}));
  auto u = anyTensor(DType::U8, {7});
  y = call("slice", {u}, {{"start", int64_t(-100)}, {"step", int64_t(3)}});
  expectClose(y[0], reference(u, {3}, [](const Coords& c) { return Coords{3 * c[0]}; }), "slice u8");
  EXPECT_EQ(errorOf("narrow", {x}, {{"dim", int64_t(1)}, {"start", int64_t(5)}, {"length", int64_t(2)}}),
            "narrow: attribute 'length' is 2; expected a value in [0, 1] (start 5, dim 1 of size 6)");
  EXPECT_EQ(errorOf("narrow", {x}, {{"dim", int64_t(1)}, {"start", int64_t(7)}, {"length", int64_t(0)}}),
            "narrow: attribute 'start' is 7; expected a value in [-6, 6] for dim 1 of size 6");
  EXPECT_EQ(errorOf("slice", {x}, {{"step", int64_t(0)}}), "slice: attribute 'step' is 0; expected a value > 0");
}

TEST_F(ShapeOpsTest, CatStack) {
  for (DType dt : kAllDTypes) {
    std::string name(dtypeName(dt));
    auto a = anyTensor(dt, {2, 3, 4}), b = anyTensor(dt, {2, 1, 4}), c = anyTensor(dt, {2, 0, 4}),
         e = anyTensor(dt, {0});
    auto y = call("cat", {a, e, b, c}, {{"dim", int64_t(-2)}});
    HostTensor want{dt, {2, 4, 4}, std::vector<double>(32)};
    for (int64_t i = 0; i < 32; ++i) {
      auto k = unravel(i, want.shape);
      want.values[size_t(i)] = k[1] < 3 ? a.values[size_t(offsetOf(k, a.shape))]
                                        : b.values[size_t(offsetOf({k[0], 0, k[2]}, b.shape))];
    }
    expectClose(y[0], want, "cat " + name);
    auto a2 = anyTensor(dt, {2, 3, 4});
    auto st = call("stack", {a, a2, a}, {{"dim", int64_t(-1)}});
    HostTensor sw{dt, {2, 3, 4, 3}, std::vector<double>(72)};
    for (int64_t i = 0; i < 72; ++i) {
      auto k = unravel(i, sw.shape);
      const HostTensor& from = k[3] == 1 ? a2 : a;
      sw.values[size_t(i)] = from.values[size_t(offsetOf({k[0], k[1], k[2]}, a.shape))];
    }
    expectClose(st[0], sw, "stack " + name);
  }
  auto a = anyTensor(DType::F32, {3}), b = anyTensor(DType::F32, {3});
  auto s = call("stack", {a, b});
  ASSERT_EQ(s[0].shape, (Shape{2, 3}));
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(s[0].values[3 + i], b.values[i]);
  auto z = call("stack", {anyTensor(DType::I32, {}), anyTensor(DType::I32, {})});
  EXPECT_EQ(z[0].shape, (Shape{2}));
  EXPECT_EQ(errorOf("cat", {anyTensor(DType::F32, {2, 3}), anyTensor(DType::F32, {3, 3})}, {{"dim", int64_t(1)}}),
            "cat: input 'tensors' 1 is f32[3, 3]; expected [2, 3] in every dim but 1 (like input 0)");
  EXPECT_EQ(errorOf("cat", {anyTensor(DType::F32, {2}), anyTensor(DType::I32, {2})}),
            "cat: input 'tensors' has dtype i32; expected f32 like the op's other inputs");
  EXPECT_EQ(errorOf("stack", {anyTensor(DType::F32, {2}), anyTensor(DType::F32, {3})}),
            "stack: input 'tensors' 1 is f32[3]; expected shape [2] like input 0 (stack needs equal shapes)");
}

TEST_F(ShapeOpsTest, SplitChunk) {
  auto x = anyTensor(DType::I32, {3, 5});
  auto pieces = [&](const std::vector<HostTensor>& got, const std::vector<int64_t>& sizes, const std::string& what) {
    ASSERT_EQ(got.size(), sizes.size()) << what;
    int64_t at = 0;
    for (size_t k = 0; k < sizes.size(); ++k) {
      expectClose(got[k], reference(x, {3, sizes[k]}, [at](const Coords& c) { return Coords{c[0], c[1] + at}; }),
                  what + " piece " + std::to_string(k));
      at += sizes[k];
    }
  };
  pieces(call("split", {x}, {{"split_size_or_sections", int64_t(2)}, {"dim", int64_t(1)}}), {2, 2, 1}, "split 2");
  pieces(call("split", {x}, {{"split_size_or_sections", std::vector<int64_t>{1, 0, 4}}, {"dim", int64_t(-1)}}),
         {1, 0, 4}, "split sections");
  pieces(call("chunk", {x}, {{"chunks", int64_t(2)}, {"dim", int64_t(1)}}), {3, 2}, "chunk 2");
  pieces(call("chunk", {x}, {{"chunks", int64_t(4)}, {"dim", int64_t(1)}}), {2, 2, 1}, "chunk 4 (3 outputs)");
  for (DType dt : kAllDTypes) {
    auto t = anyTensor(dt, {6, 2});
    auto y = call("chunk", {t}, {{"chunks", int64_t(3)}});
    ASSERT_EQ(y.size(), 3u);
    expectClose(y[2], reference(t, {2, 2}, [](const Coords& c) { return Coords{c[0] + 4, c[1]}; }),
                "chunk " + std::string(dtypeName(dt)));
  }
  EXPECT_EQ(call("chunk", {anyTensor(DType::F32, {0, 2})}, {{"chunks", int64_t(3)}}).size(), 3u);
  EXPECT_EQ(call("split", {anyTensor(DType::F32, {0, 2})}, {{"split_size_or_sections", int64_t(2)}}).size(), 1u);
  EXPECT_EQ(errorOf("split", {x}, {{"split_size_or_sections", std::vector<int64_t>{1, 1}}}),
            "split: attribute 'split_size_or_sections' is [1, 1]; the sizes sum to 2 but dim 0 has size 3");
  EXPECT_EQ(errorOf("split", {x}, {{"split_size_or_sections", int64_t(0)}}),
            "split: attribute 'split_size_or_sections' is 0; expected a chunk size > 0 (0 only for an empty dim)");
  EXPECT_EQ(errorOf("chunk", {x}, {{"chunks", int64_t(0)}}), "chunk: attribute 'chunks' is 0; expected a value > 0");
}

TEST_F(ShapeOpsTest, FlipRollRepeat) {
  auto x = anyTensor(DType::F16, {3, 4, 5});
  auto y = call("flip", {x}, {{"dims", std::vector<int64_t>{0, -1}}});
  expectClose(y[0], reference(x, x.shape, [](const Coords& c) { return Coords{2 - c[0], c[1], 4 - c[2]}; }), "flip");
  y = call("roll", {x}, {{"shifts", std::vector<int64_t>{2, -7}}, {"dims", std::vector<int64_t>{0, 2}}});
  expectClose(y[0],
              reference(x, x.shape,
                        [](const Coords& c) { return Coords{(c[0] + 3 - 2) % 3, c[1], ((c[2] + 7) % 5 + 5) % 5}; }),
              "roll dims");
  y = call("roll", {x}, {{"shifts", std::vector<int64_t>{61}}});
  expectClose(y[0],
              reference(x, x.shape, [&](const Coords& c) { return unravel((offsetOf(c, x.shape) - 1 + 60) % 60, x.shape); }),
              "roll flattened");
  auto b = anyTensor(DType::Bool, {2, 3});
  y = call("repeat", {b}, {{"repeats", std::vector<int64_t>{2, 1, 3}}});
  expectClose(y[0], reference(b, {2, 2, 9}, [](const Coords& c) { return Coords{c[1], c[2] % 3}; }), "repeat");
  EXPECT_EQ(call("repeat", {b}, {{"repeats", std::vector<int64_t>{0, 2}}})[0].shape, (Shape{0, 6}));
  auto s = anyTensor(DType::I64, {});
  expectClose(call("flip", {s}, {{"dims", std::vector<int64_t>{0}}})[0], s, "flip 0-d");
  EXPECT_EQ(errorOf("roll", {x}, {{"shifts", std::vector<int64_t>{1, 2}}}),
            "roll: attribute 'shifts' is [1, 2]; expected one shift when 'dims' is [] (the flattened input)");
  EXPECT_EQ(errorOf("repeat", {b}, {{"repeats", std::vector<int64_t>{2}}}),
            "repeat: attribute 'repeats' is [2]; expected at least 2 values for the input bool[2, 3]");
}

TEST_F(ShapeOpsTest, Pad) {
  auto x = anyTensor(DType::F32, {2, 3, 4});
  auto y = call("pad", {x}, {{"pad", std::vector<int64_t>{1, 2, 0, 1}}, {"value", 2.5}});
  expectClose(y[0],
              reference(x, {2, 4, 7},
                        [](const Coords& c) -> std::optional<Coords> {
                          if (c[1] >= 3 || c[2] < 1 || c[2] >= 5) return std::nullopt;
                          return Coords{c[0], c[1], c[2] - 1};
                        },
                        2.5),
              "pad constant");
  y = call("pad", {x}, {{"pad", std::vector<int64_t>{-1, 1}}});
  expectClose(y[0],
              reference(x, {2, 3, 4},
                        [](const Coords& c) -> std::optional<Coords> {
                          if (c[2] >= 3) return std::nullopt;
                          return Coords{c[0], c[1], c[2] + 1};
                        }),
              "pad crop");
  auto reflect = [](int64_t i, int64_t n) { return i < 0 ? -i : i >= n ? 2 * (n - 1) - i : i; };
  y = call("pad", {x}, {{"pad", std::vector<int64_t>{3, 2, 2, 1}}, {"mode", std::string("reflect")}});
  expectClose(y[0],
              reference(x, {2, 6, 9},
                        [&](const Coords& c) { return Coords{c[0], reflect(c[1] - 2, 3), reflect(c[2] - 3, 4)}; }),
              "pad reflect");
  auto i = anyTensor(DType::I32, {3, 2});
  y = call("pad", {i}, {{"pad", std::vector<int64_t>{2, 1, 1, 0}}, {"mode", std::string("replicate")}});
  expectClose(y[0],
              reference(i, {4, 5},
                        [](const Coords& c) {
                          return Coords{std::clamp<int64_t>(c[0] - 1, 0, 2), std::clamp<int64_t>(c[1] - 2, 0, 1)};
                        }),
              "pad replicate");
  EXPECT_EQ(errorOf("pad", {x}, {{"pad", std::vector<int64_t>{1}}}),
            "pad: attribute 'pad' is [1]; expected an even number of values, at most 6 (two per dim of the input "
            "f32[2, 3, 4])");
  EXPECT_EQ(errorOf("pad", {x}, {{"pad", std::vector<int64_t>{4, 0}}, {"mode", std::string("reflect")}}),
            "pad: attribute 'pad' is [4, 0]; reflect padding of dim 2 (size 4) needs pads >= 0 and < the dim's size");
  EXPECT_EQ(errorOf("pad", {x}, {{"pad", std::vector<int64_t>{1, 1}}, {"mode", std::string("circular")}}),
            "pad: attribute 'mode' is 'circular'; expected 'constant', 'reflect' or 'replicate'");
}

TEST_F(ShapeOpsTest, TriuTril) {
  for (DType dt : kAllDTypes) {
    auto x = anyTensor(dt, {2, 4, 5});
    for (int64_t diag : {0, 2, -1}) {
      auto up = call("triu", {x}, {{"diagonal", diag}});
      expectClose(up[0],
                  reference(x, x.shape,
                            [diag](const Coords& c) {
                              return c[2] - c[1] >= diag ? std::optional<Coords>(c) : std::nullopt;
                            }),
                  "triu " + std::string(dtypeName(dt)) + " " + std::to_string(diag));
      auto lo = call("tril", {x}, {{"diagonal", diag}});
      expectClose(lo[0],
                  reference(x, x.shape,
                            [diag](const Coords& c) {
                              return c[2] - c[1] <= diag ? std::optional<Coords>(c) : std::nullopt;
                            }),
                  "tril " + std::string(dtypeName(dt)) + " " + std::to_string(diag));
    }
  }
  EXPECT_EQ(errorOf("triu", {anyTensor(DType::F32, {3})}),
            "triu: the input f32[3] has rank 1; expected at least 2 dims (a matrix or a batch of them)");
}

// More than 65535 workgroups of 256: the grid-stride loop must cover the rest.
TEST_F(ShapeOpsTest, LargeTranspose) {
  auto x = randomTensor(DType::U8, {4097, 4097}, 0, 255);
  auto y = call("transpose", {x}, {{"dim0", int64_t(0)}, {"dim1", int64_t(1)}});
  expectClose(y[0], reference(x, {4097, 4097}, [](const Coords& c) { return Coords{c[1], c[0]}; }), "transpose large");
}

}  // namespace
}  // namespace tensord::compute::testing
