// Conformance of the linear-algebra family: matmul, mm, bmm, addmm, baddbmm,
// linear, outer and dot in every dtype they declare, against a double CPU
// reference over the same (rounded) inputs. Sums of k products use the
// dtype's tolerance with atol scaled by k (see conformance.h); integer
// inputs are small so the products are exact.

#include <cmath>
#include <cstdio>
#include <limits>

#include "compute/template_util.h"
#include "tests/compute/conformance.h"

namespace tensord::compute::testing {
namespace {

TENSORD_COVERS(linalg, "matmul", "mm", "bmm", "addmm", "baddbmm", "linear", "outer", "dot");

using Attr = std::pair<std::string, AttrValue>;
const std::vector<DType> kProductDTypes = {DType::F32, DType::F16, DType::BF16, DType::I32, DType::I64};
const std::vector<DType> kFloats = {DType::F32, DType::F16, DType::BF16};

HostTensor inputFor(DType dtype, const Shape& shape) {
  return isFloating(dtype) ? randomTensor(dtype, shape, -1, 1) : randomTensor(dtype, shape, -5, 5);
}

int64_t numelOf(const Shape& s) {
  int64_t n = 1;
  for (auto d : s) n *= d;
  return n;
}

// PyTorch's matmul in double (1-D promotion, broadcast batch dims), not yet rounded.
HostTensor refMatmul(const HostTensor& a, const HostTensor& b) {
  Shape pa = a.shape, pb = b.shape;
  if (pa.size() == 1) pa.insert(pa.begin(), 1);
  if (pb.size() == 1) pb.push_back(1);
  int64_t m = pa[pa.size() - 2], k = pa.back(), n = pb.back();
  Shape ba(pa.begin(), pa.end() - 2), bb(pb.begin(), pb.end() - 2);
  Shape batch = *broadcastShapes(ba, bb);
  HostTensor out{a.dtype, batch, {}};
  if (a.shape.size() > 1) out.shape.push_back(m);
  if (b.shape.size() > 1) out.shape.push_back(n);
  out.values.assign(size_t(numelOf(batch) * m * n), 0.0);
  for (int64_t bi = 0; bi < numelOf(batch); ++bi) {
    int64_t oa = broadcastIndex(ba, batch, bi) * m * k, ob = broadcastIndex(bb, batch, bi) * k * n;
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        double s = 0;
        for (int64_t p = 0; p < k; ++p) s += a.values[size_t(oa + i * k + p)] * b.values[size_t(ob + p * n + j)];
        out.values[size_t((bi * m + i) * n + j)] = s;
      }
    }
  }
  return out;
}

HostTensor rounded(HostTensor t) {
  for (auto& v : t.values) v = roundTo(t.dtype, v);
  return t;
}

// beta * c (broadcast) + alpha * x, rounded.
HostTensor scaleAdd(const HostTensor& x, const HostTensor* c, double alpha, double beta) {
  HostTensor out = x;
  for (int64_t i = 0; i < out.numel(); ++i) {
    double v = alpha * x.values[size_t(i)];
    if (c && beta != 0) v += beta * c->values[size_t(broadcastIndex(c->shape, out.shape, i))];
    out.values[size_t(i)] = v;
  }
  return rounded(out);
}

HostTensor transpose2(const HostTensor& w) {
  HostTensor t{w.dtype, {w.shape[1], w.shape[0]}, std::vector<double>(w.values.size())};
  for (int64_t i = 0; i < w.shape[0]; ++i) {
    for (int64_t j = 0; j < w.shape[1]; ++j) t.values[size_t(j * w.shape[0] + i)] = w.values[size_t(i * w.shape[1] + j)];
  }
  return t;
}

int64_t innerOf(const Shape& a) { return a.empty() ? 1 : a.back(); }

struct MatmulCase {
  Shape a, b;
};

class LinalgConformance : public ConformanceTest {
 protected:
  void checkTensorCorePath(DType dt);
  void checkUnalignedProducts(DType dt);
  // matmul of random `dt` operands of each case's shapes, against the reference.
  void expectMatmuls(DType dt, const std::vector<MatmulCase>& cases) {
    for (const MatmulCase& c : cases) {
      auto a = inputFor(dt, c.a), b = inputFor(dt, c.b);
      expectClose(call("matmul", {a, b})[0], rounded(refMatmul(a, b)),
                  "matmul " + shapeStr(c.a) + " @ " + shapeStr(c.b), double(innerOf(c.a)));
    }
  }
};

TEST_F(LinalgConformance, MatmulEveryShapeEveryDType) {
  const std::vector<MatmulCase> cases = {
      {{64, 64}, {64, 64}},     {{1, 1}, {1, 1}},       {{65, 17}, {17, 130}},  // ragged tiles
      {{200, 96}, {96, 150}},   {{7}, {7, 3}},          {{4, 7}, {7}},          {{9}, {9}},
      {{2, 3, 5, 4}, {4, 6}},   {{3, 1, 5, 4}, {2, 4, 6}},                       // broadcast batches
      {{0, 4}, {4, 3}},         {{3, 0}, {0, 2}},       {{2, 0, 3}, {3, 4}},
      {{70'000, 2, 2}, {70'000, 2, 2}},                                          // > 65535 batches
  };
  for (const auto& c : cases) {
    for (DType dt : kProductDTypes) {
      auto a = inputFor(dt, c.a), b = inputFor(dt, c.b);
      auto got = call("matmul", {a, b});
      auto want = rounded(refMatmul(a, b));
      expectClose(got[0], want,
                  "matmul " + std::string(dtypeName(dt)) + " " + shapeStr(c.a) + " @ " + shapeStr(c.b),
                  double(std::max<int64_t>(innerOf(c.a), 1)));
    }
  }
}

TEST_F(LinalgConformance, MatmulLargeF32) {
  auto a = inputFor(DType::F32, {512, 256}), b = inputFor(DType::F32, {256, 384});
  expectClose(call("matmul", {a, b})[0], rounded(refMatmul(a, b)), "matmul 512x256 @ 256x384", 256);
}

// Products that take the tiled fast path (float, contiguous, M and N >= 64):
// every tile shape it picks, edge tiles in M, N and K (K not a multiple of
// the K step), vector and element-wise loads (N or K not a multiple of 4),
// linear's transposed weight, bias and alpha/beta epilogues, and batches.
// f16 and bf16 share the kernel's code but not its loads and stores: they
// run fewer shapes (each kernel variant costs a pipeline compile).
TEST_F(LinalgConformance, FastPathEdgeTiles) {
  for (DType dt : kFloats) {
    std::string name(dtypeName(dt));
    bool all = dt == DType::F32;
    std::vector<MatmulCase> cases = {
        {{130, 260}, {260, 129}},  // element-wise loads
        {{130, 260}, {260, 132}},  // vector loads, edge tiles in M, N and K
        {{200, 256}, {256, 132}},  // inner tiles (K a whole number of steps) beside edge ones
    };
    if (all) {
      cases.insert(cases.end(), {
                                    {{64, 13}, {13, 64}},            // K below one step
                                    {{48, 130, 36}, {48, 36, 132}},  // 128x128 tiles (enough of them)
                                    {{96, 130, 20}, {96, 20, 100}},  // 128x64
                                    {{96, 100, 20}, {1, 20, 130}},   // 64x128, broadcast b
                                    {{200, 256}, {256, 130}},        // inner tiles, element-wise loads
                                    {{48, 130, 40}, {48, 40, 132}},  // inner 128x128 tiles, in a batch
                                    {{192, 128, 8}, {192, 8, 128}},  // 128x128 tiles, none at an edge
                                });
    }
    for (const MatmulCase& c : cases) {
      auto a = inputFor(dt, c.a), b = inputFor(dt, c.b);
      expectClose(call("matmul", {a, b})[0], rounded(refMatmul(a, b)),
                  "matmul " + name + " " + shapeStr(c.a) + " @ " + shapeStr(c.b), double(innerOf(c.a)));
    }
    // K = 68: every tile an edge tile; 80: inner tiles beside the edge ones.
    for (int64_t k : {68, 80}) {
      for (int64_t n : all ? std::vector<int64_t>{129, 132} : std::vector<int64_t>{132}) {
        auto x = inputFor(dt, {2, 65, k}), w = inputFor(dt, {n, k}), bias = inputFor(dt, {n});
        auto prod = refMatmul(x, transpose2(w));
        std::string what = name + " " + shapeStr(x.shape) + " weight " + shapeStr(w.shape);
        expectClose(call("linear", {x, w})[0], rounded(prod), "linear " + what, double(k));
        expectClose(call("linear", {x, w, bias})[0], scaleAdd(prod, &bias, 1, 1), "linear+bias " + what, double(k));
      }
    }
    // No edge tile at all (the kernel variant compiled without them).
    auto xi = inputFor(dt, {2, 64, 80}), wi = inputFor(dt, {128, 80});
    expectClose(call("linear", {xi, wi})[0], rounded(refMatmul(xi, transpose2(wi))),
                "linear " + name + " [2, 64, 80] weight [128, 80]", 80);
    auto m1 = inputFor(dt, {70, 100}), m2 = inputFor(dt, {100, 90}), c = inputFor(dt, {70, 1});
    expectClose(call("addmm", {c, m1, m2}, {{"beta", 0.5}, {"alpha", -2.0}})[0],
                scaleAdd(refMatmul(m1, m2), &c, -2.0, 0.5), "addmm fast " + name, 100);
    auto b1 = inputFor(dt, {3, 70, 36}), b2 = inputFor(dt, {3, 36, 72}), bc = inputFor(dt, {3, 1, 72});
    expectClose(call("baddbmm", {bc, b1, b2}, {{"beta", 2}, {"alpha", 0.25}})[0],
                scaleAdd(refMatmul(b1, b2), &bc, 0.25, 2), "baddbmm fast " + name, 36);
  }
}

// Split-K: f32 products with few output tiles and a long K are computed as
// K slices into scratch memory plus a summing pass that applies the
// epilogue: the one-element-per-invocation path (N < 16), the tiled paths,
// linear's transposed weight with bias, and addmm's alpha, beta and
// broadcast input.
TEST_F(LinalgConformance, SplitK) {
  auto a = inputFor(DType::F32, {9, 2048}), b = inputFor(DType::F32, {2048, 12});
  expectClose(call("mm", {a, b})[0], rounded(refMatmul(a, b)), "mm split-K 9x2048 @ 2048x12", 2048);
  auto a2 = inputFor(DType::F32, {70, 1536}), b2 = inputFor(DType::F32, {1536, 66});
  expectClose(call("matmul", {a2, b2})[0], rounded(refMatmul(a2, b2)), "matmul split-K 70x1536 @ 1536x66", 1536);
  auto x = inputFor(DType::F32, {40, 1024}), w = inputFor(DType::F32, {72, 1024}), bias = inputFor(DType::F32, {72});
  expectClose(call("linear", {x, w, bias})[0], scaleAdd(refMatmul(x, transpose2(w)), &bias, 1, 1),
              "linear split-K 40x1024 weight 72x1024", 1024);
  // Slices on the fast kernel, whose rows are then longer than the slice's
  // K: 4 slices of a 136x1024 @ 1024x200 product (edge tiles), linear's
  // weight transposed in 5 slices, and K = 1030 in 2 slices of 515, which
  // the kernel's element-wise loads take.
  auto a3 = inputFor(DType::F32, {136, 1024}), b3 = inputFor(DType::F32, {1024, 200});
  expectClose(call("matmul", {a3, b3})[0], rounded(refMatmul(a3, b3)), "matmul split-K 136x1024 @ 1024x200", 1024);
  auto x2 = inputFor(DType::F32, {72, 1280}), w2 = inputFor(DType::F32, {136, 1280}),
       bias2 = inputFor(DType::F32, {136});
  expectClose(call("linear", {x2, w2, bias2})[0], scaleAdd(refMatmul(x2, transpose2(w2)), &bias2, 1, 1),
              "linear split-K 72x1280 weight 136x1280", 1280);
  auto a4 = inputFor(DType::F32, {66, 1030}), b4 = inputFor(DType::F32, {1030, 70});
  expectClose(call("mm", {a4, b4})[0], rounded(refMatmul(a4, b4)), "mm split-K 66x1030 @ 1030x70", 1030);
  // 64 slices of 256: enough tiles for the 128x128 ones, whole tiles and
  // K steps (the variant without edge tiles).
  auto a5 = inputFor(DType::F32, {256, 16384}), b5 = inputFor(DType::F32, {16384, 256});
  expectClose(call("mm", {a5, b5})[0], rounded(refMatmul(a5, b5)), "mm split-K 256x16384 @ 16384x256", 16384);
  auto m1 = inputFor(DType::F32, {20, 1280}), m2 = inputFor(DType::F32, {1280, 30}), c = inputFor(DType::F32, {1, 30});
  expectClose(call("addmm", {c, m1, m2}, {{"beta", 0.5}, {"alpha", -2.0}})[0],
              scaleAdd(refMatmul(m1, m2), &c, -2.0, 0.5), "addmm split-K", 1280);
  // f16 and bf16 split K on tensor cores (f32 slices summed by the second
  // pass); on devices without them, the products take the other kernels.
  for (DType dt : {DType::F16, DType::BF16}) {
    SCOPED_TRACE(dtypeName(dt));
    auto hx = inputFor(dt, {64, 2048}), hw = inputFor(dt, {256, 2048}), hb = inputFor(dt, {256});
    expectClose(call("linear", {hx, hw, hb})[0], scaleAdd(refMatmul(hx, transpose2(hw)), &hb, 1, 1),
                "linear split-K 64x2048 weight 256x2048", 2048);
    auto ha = inputFor(dt, {72, 1024}), hbm = inputFor(dt, {1024, 136});
    expectClose(call("matmul", {ha, hbm})[0], rounded(refMatmul(ha, hbm)), "matmul split-K 72x1024 @ 1024x136", 1024);
    auto hc = inputFor(dt, {1, 128}), h1 = inputFor(dt, {64, 1280}), h2 = inputFor(dt, {1280, 128});
    expectClose(call("addmm", {hc, h1, h2}, {{"beta", 0.5}, {"alpha", -2.0}})[0],
                scaleAdd(refMatmul(h1, h2), &hc, -2.0, 0.5), "addmm split-K 64x1280 @ 1280x128", 1280);
  }
}

// Split K's partial products live in scratch memory; where it is not to be
// had, the product runs unsplit instead of failing.
TEST_F(LinalgConformance, SplitKWithoutScratchMemoryRunsUnsplit) {
  auto product = [](Engine* on) {
    auto a = run("randn", {}, {{"size", std::vector<int64_t>{200, 1024}}, {"seed", int64_t(1)}}, on)[0];
    auto b = run("randn", {}, {{"size", std::vector<int64_t>{1024, 200}}, {"seed", int64_t(2)}}, on)[0];
    return download(run("mm", {a, b}, {}, on)[0], on);
  };
  const std::vector<float> want = product(nullptr);  // 4 K slices, memory to spare
  // The operands (800 KiB each) fit; their partial products (640 KiB) do not.
  auto small = limitedEngine(2 << 20, "split-k-limit");
  const std::vector<float> got = product(small.get());
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], want[i], 1e-3 * (1 + std::abs(want[i]))) << i;
}

// Operands padded for the tensor cores are copied into scratch memory;
// where it is not to be had, the product runs on them as they are. On bf16
// tensor cores, a product big enough to take the copies (unalignedPays)
// with a first row of infinities, so that its tiles are computed again in
// f32 arithmetic from the unaligned operand too; elsewhere a smaller one.
TEST_F(LinalgConformance, UnalignedProductWithoutScratchMemory) {
  const bool cores = engine().device().features.f32SplitBf16;
  const int64_t m = cores ? 1024 : 256, n = cores ? 521 : 257;
  auto product = [&](Engine* on) {
    auto rows = run("randn", {}, {{"size", std::vector<int64_t>{m - 1, 1023}}, {"seed", int64_t(1)}}, on)[0];
    auto infs =
        run("full", {}, {{"size", Shape{1, 1023}}, {"fill_value", std::numeric_limits<double>::infinity()}}, on)[0];
    auto a = run("cat", {infs, rows}, {{"dim", int64_t(0)}}, on)[0];
    auto b = run("randn", {}, {{"size", std::vector<int64_t>{1023, n}}, {"seed", int64_t(2)}}, on)[0];
    return download(run("mm", {a, b}, {}, on)[0], on);
  };
  const std::vector<float> want = product(nullptr);  // padded copies, memory to spare
  // The operands, a's parts and y fit (12.6 MB on tensor cores); a padded
  // copy of a (4.2 MB) does not.
  auto small = limitedEngine(cores ? 14 << 20 : 4 << 20, "pad-limit");
  const std::vector<float> got = product(small.get());
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(want[i])) {
      ASSERT_TRUE(std::isnan(got[i])) << i << ": " << got[i];
    } else {
      ASSERT_NEAR(got[i], want[i], 1e-3 * (1 + std::abs(want[i]))) << i;
    }
  }
  EXPECT_TRUE(std::isnan(want[0]) || std::isinf(want[0])) << want[0];
  // On bf16 tensor cores the first product was padded and the second ran
  // on the tensor cores all the same, loading a one element at a time.
  EXPECT_EQ(engine().kernelDispatches().count("matmul|f32|pad") == 1, cores);
  bool unaligned = false;
  for (const auto& [name, count] : small->kernelDispatches()) {
    EXPECT_NE(name, "matmul|f32|pad");
    unaligned = unaligned || (name.rfind("matmul|f32|coop", 0) == 0 && name.find("|ua") != std::string::npos);
  }
  EXPECT_EQ(unaligned, cores);
}

// f16 and bf16 products that take the tensor-core path on devices with
// cooperative matrices (bf16: through VK_KHR_shader_bfloat16; K and N
// multiples of 8, M and N >= 64; elsewhere the fast path):
// edge tiles in M and N (not multiples of 128), a K tail below one K step,
// several K steps through both shared buffers, linear's transposed weight
// with bias, alpha/beta with a broadcast input, and batches with a broadcast b.
TEST_F(LinalgConformance, HalfAndBfloatTensorCorePath) {
  for (DType dt : {DType::F16, DType::BF16}) {
    SCOPED_TRACE(dtypeName(dt));
    checkTensorCorePath(dt);
  }
}

void LinalgConformance::checkTensorCorePath(DType dt) {
  expectMatmuls(dt, {
                        {{200, 264}, {264, 136}},     // 2x2 tiles, 8 K steps and a tail of 8
                        {{64, 16}, {16, 64}},         // one partial tile, K below one step
                        {{2, 72, 40}, {1, 40, 200}},  // batch, broadcast b
                        {{200, 256}, {256, 264}},     // inner tiles (K a whole number of steps) beside edge ones
                    });
  auto x = inputFor(dt, {3, 50, 96}), w = inputFor(dt, {136, 96}), bias = inputFor(dt, {136});
  auto prod = refMatmul(x, transpose2(w));
  expectClose(call("linear", {x, w})[0], rounded(prod), "linear [3, 50, 96] weight [136, 96]", 96);
  expectClose(call("linear", {x, w, bias})[0], scaleAdd(prod, &bias, 1, 1), "linear+bias [3, 50, 96]", 96);
  auto xi = inputFor(dt, {2, 100, 128}), wi = inputFor(dt, {264, 128});  // inner and edge tiles
  expectClose(call("linear", {xi, wi})[0], rounded(refMatmul(xi, transpose2(wi))),
              "linear [2, 100, 128] weight [264, 128]", 128);
  auto m1 = inputFor(dt, {130, 48}), m2 = inputFor(dt, {48, 72}), c = inputFor(dt, {130, 1});
  expectClose(call("addmm", {c, m1, m2}, {{"beta", 0.5}, {"alpha", -2.0}})[0],
              scaleAdd(refMatmul(m1, m2), &c, -2.0, 0.5), "addmm [130, 48] @ [48, 72]", 48);
  // Whole 128x128 tiles and K steps without a c term: b either way round,
  // batched with a broadcast b, alpha through addmm with beta = 0.
  expectMatmuls(dt, {{{256, 96}, {96, 128}}, {{2, 128, 64}, {1, 64, 256}}});
  auto x2 = inputFor(dt, {128, 64}), w2 = inputFor(dt, {256, 64});
  expectClose(call("linear", {x2, w2})[0], rounded(refMatmul(x2, transpose2(w2))), "linear [128, 64] weight [256, 64]",
              64);
  auto p1 = inputFor(dt, {128, 160}), p2 = inputFor(dt, {160, 128}), unused = inputFor(dt, {128, 128});
  expectClose(call("addmm", {unused, p1, p2}, {{"beta", 0.0}, {"alpha", -2.0}})[0],
              scaleAdd(refMatmul(p1, p2), nullptr, -2.0, 0.0), "addmm alpha -2 beta 0 [128, 160] @ [160, 128]", 160);
  // Products of at most 64 rows: 64-row tiles where they make at least 256
  // (batched, K steps of 32 and a tail or K a whole number of steps, the
  // last tile along N partial), 128-row ones below that; linear's b as [N, K].
  expectMatmuls(dt, {{{2, 64, 40}, {1, 40, 32760}}, {{2, 64, 64}, {1, 64, 32760}}, {{64, 200}, {200, 520}}});
  auto x3 = inputFor(dt, {64, 136}), w3 = inputFor(dt, {300, 136}), bias3 = inputFor(dt, {300});
  expectClose(call("linear", {x3, w3, bias3})[0], scaleAdd(refMatmul(x3, transpose2(w3)), &bias3, 1, 1),
              "linear+bias [64, 136] weight [300, 136]", 136);
  auto x4 = inputFor(dt, {2, 32, 72}), w4 = inputFor(dt, {264, 72});
  expectClose(call("linear", {x4, w4})[0], rounded(refMatmul(x4, transpose2(w4))), "linear [2, 32, 72] weight [264, 72]",
              72);
  checkUnalignedProducts(dt);
}

// K, or N, not a multiple of 8: rows that start anywhere, slots of 8
// elements partly outside the matrix. Small products whose a or b is
// unaligned take the FMA kernel; on tensor cores, bigger ones
// (unalignedPays) run on copies of a and b padded to a multiple of 8
// (batches matrix by matrix), and y, where only it is unaligned, is stored
// one element at a time.
void LinalgConformance::checkUnalignedProducts(DType dt) {
  const int64_t k = dt == DType::F32 ? 259 : 43;  // f32 takes tensor cores from K = 256
  const int64_t kAligned = dt == DType::F32 ? 264 : 64;
  expectMatmuls(dt, {
                        {{200, k}, {k, 137}},                  // edge tiles in M and N, K and N odd
                        {{200, kAligned}, {kAligned, 137}},    // a aligned, b and y not
                        {{130, k + 1}, {k + 1, 128}},          // K even, not a multiple of 8; whole tiles in N
                        {{2, 72, k}, {1, k, 203}},             // batch, broadcast b
                        {{64, 2 * k + 1}, {2 * k + 1, 1001}},  // one tile row, several K steps and a tail
                    });
  if (dt == DType::F32) expectMatmuls(dt, {{{64, 4095}, {4095, 72}}});  // few tiles, a long odd K: split into K slices
  auto x = inputFor(dt, {3, 50, k}), w = inputFor(dt, {133, k}), bias = inputFor(dt, {133});
  auto prod = refMatmul(x, transpose2(w));
  expectClose(call("linear", {x, w})[0], rounded(prod), "linear [3, 50, K odd] weight [133, K odd]", double(k));
  expectClose(call("linear", {x, w, bias})[0], scaleAdd(prod, &bias, 1, 1), "linear+bias [3, 50, K odd]", double(k));
  // Only y unaligned (an output layer over an odd vocabulary).
  auto xa = inputFor(dt, {2, 70, kAligned}), wa = inputFor(dt, {201, kAligned}), ba = inputFor(dt, {201});
  expectClose(call("linear", {xa, wa, ba})[0], scaleAdd(refMatmul(xa, transpose2(wa)), &ba, 1, 1),
              "linear+bias [2, 70, K] weight [201, K]", double(kAligned));
  auto m1 = inputFor(dt, {130, k}), m2 = inputFor(dt, {k, 75}), c = inputFor(dt, {130, 75});
  expectClose(call("addmm", {c, m1, m2}, {{"beta", 0.5}, {"alpha", -2.0}})[0],
              scaleAdd(refMatmul(m1, m2), &c, -2.0, 0.5), "addmm [130, K odd] @ [K odd, 75] + [130, 75]", double(k));
  // Products big enough for the padded copies, on tensor cores only: where
  // there are none they take the FMA kernel as the products above do.
  const DeviceFeatures& f = engine().device().features;
  if (!(dt == DType::F32 ? f.f32SplitBf16 : dt == DType::F16 ? f.coopMatrixF16 : f.coopMatrixBf16)) return;
  std::vector<MatmulCase> big = {
      {{1024, 1023}, {1023, 521}},       // K and N odd
      {{2, 520, 1023}, {1, 1023, 521}},  // batch, broadcast b
  };
  if (dt != DType::F32) big.push_back({{64, 67}, {67, 65283}});  // 64-row tiles, 256 of them along N
  expectMatmuls(dt, big);
  auto xb = inputFor(dt, {1024, 1023}), wb = inputFor(dt, {521, 1023}), bb = inputFor(dt, {521});
  expectClose(call("linear", {xb, wb, bb})[0], scaleAdd(refMatmul(xb, transpose2(wb)), &bb, 1, 1),
              "linear+bias [1024, 1023] weight [521, 1023]", 1023);
}

// f32 products with K of 256 or more run on bf16 tensor cores where the
// device has them, each operand split into three bf16 parts
// (matmul_coop.comp, F32_SPLIT), elsewhere on the fast kernel: edge tiles in
// M, N and K, whole tiles, batches with a broadcast b, linear's [N, K]
// weight, bias and alpha/beta, at f32's tolerance.
TEST_F(LinalgConformance, F32LongKProducts) {
  expectMatmuls(DType::F32,
                {
                    {{200, 264}, {264, 136}},        // edge tiles, K not a whole number of steps
                    {{128, 512}, {512, 256}},        // whole tiles only
                    {{2, 72, 256}, {1, 256, 200}},   // batch, broadcast b
                    {{64, 256}, {256, 1024}},        // one tile row
                    {{2, 100, 256}, {1, 256, 196}},  // N a multiple of 4, not of 8: the last 8 columns half outside
                });
  auto x = inputFor(DType::F32, {3, 50, 256}), w = inputFor(DType::F32, {136, 256}), bias = inputFor(DType::F32, {136});
  expectClose(call("linear", {x, w, bias})[0], scaleAdd(refMatmul(x, transpose2(w)), &bias, 1, 1),
              "linear+bias [3, 50, 256] weight [136, 256]", 256);
  auto xi = inputFor(DType::F32, {128, 512}), wi = inputFor(DType::F32, {256, 512});
  expectClose(call("linear", {xi, wi})[0], rounded(refMatmul(xi, transpose2(wi))),
              "linear [128, 512] weight [256, 512]", 512);
  auto m1 = inputFor(DType::F32, {130, 320}), m2 = inputFor(DType::F32, {320, 72}), c = inputFor(DType::F32, {130, 1});
  expectClose(call("addmm", {c, m1, m2}, {{"beta", 0.5}, {"alpha", -2.0}})[0],
              scaleAdd(refMatmul(m1, m2), &c, -2.0, 0.5), "addmm [130, 320] @ [320, 72]", 320);
  auto m3 = inputFor(DType::F32, {320, 132}), c3 = inputFor(DType::F32, {130, 132});
  expectClose(call("addmm", {c3, m1, m3}, {{"beta", 0.5}, {"alpha", -2.0}})[0],
              scaleAdd(refMatmul(m1, m3), &c3, -2.0, 0.5), "addmm [130, 320] @ [320, 132] + [130, 132]", 320);
  auto w4 = inputFor(DType::F32, {132, 256}), b4 = inputFor(DType::F32, {132});
  expectClose(call("linear", {x, w4, b4})[0], scaleAdd(refMatmul(x, transpose2(w4)), &b4, 1, 1),
              "linear+bias [3, 50, 256] weight [132, 256]", 256);
  checkUnalignedProducts(DType::F32);
}

// The split loses no bit of either operand: with one operand a signed
// permutation scaled by powers of two, every output is an element of the
// other times a power of two, exact in f32. The elements span 2^-100 to
// 2^100, each with a full 24-bit significand.
TEST_F(LinalgConformance, F32ProductsKeepEveryBitOfTheirOperands) {
  const int64_t m = 64, k = 256, n = 128;
  auto full = [](const Shape& shape, uint64_t seed) {
    HostTensor t{DType::F32, shape, {}};
    uint64_t state = seed;
    for (int64_t i = 0; i < numelOf(shape); ++i) {
      state = state * 6364136223846793005ull + 1442695040888963407ull;
      const double significand = 1.0 + double((state >> 40) & 0x7FFFFF) / double(1 << 23);  // 24 bits
      const int exponent = int((state >> 20) % 201) - 100;
      t.values.push_back(((state >> 63) ? -1.0 : 1.0) * std::ldexp(significand, exponent));
    }
    return t;
  };
  // perm[j]: the row of b (column of a) that output column j takes, scaled by 2^(j % 5 - 2).
  auto picker = [&](int64_t rows, int64_t cols, bool transposed) {
    HostTensor t{DType::F32, transposed ? Shape{cols, rows} : Shape{rows, cols},
                 std::vector<double>(size_t(rows * cols))};
    for (int64_t j = 0; j < cols; ++j) {
      const int64_t i = (j * 37 + 11) % rows;
      const double v = (j % 2 ? -1.0 : 1.0) * std::ldexp(1.0, int(j % 5) - 2);
      t.values[size_t(transposed ? j * rows + i : i * cols + j)] = v;
    }
    return t;
  };
  auto exactly = [](const HostTensor& got, const HostTensor& want, const std::string& what) {
    ASSERT_EQ(got.values.size(), want.values.size()) << what;
    int64_t wrong = 0;
    for (size_t i = 0; i < want.values.size(); ++i) {
      if (got.values[i] != want.values[i] && wrong++ < 5) {
        ADD_FAILURE() << what << ": element " << i << " is " << got.values[i] << ", expected exactly "
                      << want.values[i];
      }
    }
    EXPECT_EQ(wrong, 0) << what;
  };
  auto a = full({m, k}, 1), b = picker(k, n, false);
  exactly(call("matmul", {a, b})[0], refMatmul(a, b), "full a @ picking b");
  auto pa = picker(k, m, true), fb = full({k, n}, 2);  // a [m, k] picks rows of b
  exactly(call("matmul", {pa, fb})[0], refMatmul(pa, fb), "picking a @ full b");
  auto w = picker(k, n, true);  // linear's weight [n, k]
  exactly(call("linear", {a, w})[0], refMatmul(a, transpose2(w)), "linear: full x, picking weight");
  auto px = picker(k, m, true), fw = full({n, k}, 3);  // x [m, k] picks columns of the weight
  exactly(call("linear", {px, fw})[0], refMatmul(px, transpose2(fw)), "linear: picking x, full weight");
}

// Infinities and NaNs propagate as IEEE arithmetic has them (the split
// cannot carry them: the tiles whose sums hold one are computed again in
// f32), and so do values near f32's largest, which the split would round
// past it, and sums that overflow. Outputs of tiles without them are bit for
// bit what the same product without them gives. Edge tiles, batches and the
// epilogue's alpha, beta and bias take the same path.
TEST_F(LinalgConformance, F32ProductsPropagateInfinitiesAndNaNs) {
  const double inf = std::numeric_limits<double>::infinity(), nan = std::numeric_limits<double>::quiet_NaN();
  // 4 x 3 tiles of 64 x 128: tiles of rows 192-255 and of columns 0-127 or
  // 256-383 hold none of these.
  const auto a0 = inputFor(DType::F32, {256, 256});
  auto b0 = inputFor(DType::F32, {256, 384});
  b0.values[0 * 384 + 100] = 0.0;
  auto a = a0, b = b0;
  a.values[3 * 256 + 5] = inf;
  a.values[70 * 256 + 9] = nan;
  b.values[7 * 384 + 200] = -inf;
  a.values[130 * 256 + 0] = 3.4e38;  // rounds to infinity in bf16
  a.values[150 * 256 + 1] = -3.39e38;
  auto got = call("matmul", {a, b})[0];
  auto want = rounded(refMatmul(a, b));
  expectClose(got, want, "matmul with inf, NaN and near-largest elements", 256);
  EXPECT_TRUE(std::isinf(got.values[3 * 384 + 17])) << got.values[3 * 384 + 17];
  EXPECT_TRUE(std::isnan(got.values[70 * 384 + 17])) << got.values[70 * 384 + 17];
  EXPECT_NEAR(got.values[130 * 384 + 100], want.values[130 * 384 + 100], 1e-3 * std::abs(want.values[130 * 384 + 100]));
  const auto clean = call("matmul", {a0, b0})[0];
  int64_t changed = 0;
  for (int64_t i = 192; i < 256; ++i) {
    for (int64_t j = 0; j < 384; ++j) {
      if (j >= 128 && j < 256) continue;
      changed += got.values[size_t(i * 384 + j)] != clean.values[size_t(i * 384 + j)];
    }
  }
  EXPECT_EQ(changed, 0) << "outputs of tiles without special values that differ from the same product without them";
  // Edge tiles in M, N and K, a batch, alpha, beta and a bias term.
  auto m1 = inputFor(DType::F32, {2, 130, 264}), m2 = inputFor(DType::F32, {2, 264, 136}),
       c = inputFor(DType::F32, {2, 130, 136});
  m1.values[(130 + 100) * 264 + 7] = inf;    // batch 1, row 100: the second tile row's edge tile
  m2.values[(264 + 260) * 136 + 135] = nan;  // batch 1, the last K row and column
  expectClose(call("baddbmm", {c, m1, m2}, {{"beta", 0.5}, {"alpha", -2.0}})[0],
              scaleAdd(refMatmul(m1, m2), &c, -2.0, 0.5), "baddbmm with inf and NaN in the second batch entry", 264);
  auto x = inputFor(DType::F32, {64, 256}), w = inputFor(DType::F32, {136, 256}), bias = inputFor(DType::F32, {136});
  w.values[5 * 256 + 30] = -inf;
  expectClose(call("linear", {x, w, bias})[0], scaleAdd(refMatmul(x, transpose2(w)), &bias, 1, 1),
              "linear+bias with an infinite weight", 256);
  // Finite operands whose products overflow: +-inf as in f32 (hi * hi and
  // mid * hi overflow with opposite signs, giving NaN); and, in a tile of
  // its own, a product just below f32's largest, past which the rounded-up
  // parts' product goes (an infinity, not a NaN).
  auto p1 = inputFor(DType::F32, {128, 256}), p2 = inputFor(DType::F32, {256, 128});
  p1.values[5 * 256 + 0] = 1e22;
  p1.values[70 * 256 + 1] = 1.8445e19;
  for (int64_t j = 0; j < 128; ++j) {
    p2.values[size_t(j)] = j % 2 ? -1e22 : 1e22;
    p2.values[size_t(128 + j)] = 1.8445e19;
  }
  got = call("matmul", {p1, p2})[0];
  expectClose(got, rounded(refMatmul(p1, p2)), "matmul whose products overflow or nearly do", 256);
  EXPECT_EQ(got.values[5 * 128 + 0], inf);
  EXPECT_EQ(got.values[5 * 128 + 1], -inf);
  EXPECT_TRUE(std::isfinite(got.values[70 * 128 + 2])) << got.values[70 * 128 + 2];
  // K and N odd: small products on the FMA kernel; on bf16 tensor cores a
  // bigger one, whose recomputation reads the padded copies. a[infRow] ends
  // in inf (the last element of K) and b[nanRow] in NaN (the last column):
  // that row of the product is infinite and its last column NaN.
  auto oddWithInfAndNan = [&](int64_t m, int64_t k, int64_t n, int64_t infRow, int64_t nanRow) {
    auto a = inputFor(DType::F32, {m, k}), b = inputFor(DType::F32, {k, n});
    a.values[size_t(infRow * k + k - 1)] = inf;
    b.values[size_t(nanRow * n + n - 1)] = nan;
    const auto y = call("matmul", {a, b})[0];
    const std::string what = "matmul [" + std::to_string(m) + ", " + std::to_string(k) + "] @ [" + std::to_string(k) +
                             ", " + std::to_string(n) + "] with inf and NaN";
    expectClose(y, rounded(refMatmul(a, b)), what, double(k));
    EXPECT_TRUE(std::isinf(y.values[size_t(infRow * n + 3)])) << what << ": " << y.values[size_t(infRow * n + 3)];
    EXPECT_TRUE(std::isnan(y.values[size_t(7 * n + n - 1)])) << what << ": " << y.values[size_t(7 * n + n - 1)];
  };
  oddWithInfAndNan(130, 259, 137, 3, 100);
  if (engine().device().features.f32SplitBf16) oddWithInfAndNan(1024, 1023, 521, 900, 500);
  auto v1 = inputFor(DType::F32, {2, 72, 259}), v2 = inputFor(DType::F32, {2, 259, 131}),
       vc = inputFor(DType::F32, {2, 72, 131});
  v1.values[(72 + 40) * 259 + 258] = -inf;   // batch 1
  v2.values[(259 + 258) * 131 + 130] = nan;  // batch 1, the last K row and column
  expectClose(call("baddbmm", {vc, v1, v2}, {{"beta", 0.5}, {"alpha", -2.0}})[0],
              scaleAdd(refMatmul(v1, v2), &vc, -2.0, 0.5), "baddbmm [2, 72, 259] @ [2, 259, 131] with inf and NaN",
              259);
}

// As accurate as f32 arithmetic over a long K: the root-mean-square error of
// a 4096-long product against the exact result is within twice that of the
// same dot products accumulated in order in f32 on the host, for operands
// of mixed signs and for positive ones (whose sums only grow, where
// rounding that leans one way would show). Two products in a batch, which
// is never split along K: each output is one sum over all of K.
TEST_F(LinalgConformance, F32LongKIsAsAccurateAsF32) {
  const int64_t batch = 2, m = 64, k = 4096, n = 128;
  for (double lo : {-1.0, 0.0}) {
    auto a = randomTensor(DType::F32, {batch, m, k}, lo, 1), b = randomTensor(DType::F32, {batch, k, n}, lo, 1);
    auto got = call("matmul", {a, b})[0];
    auto exact = refMatmul(a, b);
    double device = 0, host = 0;
    for (int64_t bi = 0; bi < batch; ++bi) {
      for (int64_t i = 0; i < m; ++i) {
        for (int64_t j = 0; j < n; ++j) {
          float s = 0;
          for (int64_t p = 0; p < k; ++p) {
            s += float(a.values[size_t((bi * m + i) * k + p)]) * float(b.values[size_t((bi * k + p) * n + j)]);
          }
          const size_t at = size_t((bi * m + i) * n + j);
          host += (double(s) - exact.values[at]) * (double(s) - exact.values[at]);
          device += (got.values[at] - exact.values[at]) * (got.values[at] - exact.values[at]);
        }
      }
    }
    device = std::sqrt(device / double(batch * m * n)), host = std::sqrt(host / double(batch * m * n));
    std::printf(
        "f32 %lldx%lldx%lldx%lld, operands in [%g, 1]: RMS error %.3g on the device, %.3g in order on the host\n",
        (long long)batch, (long long)m, (long long)k, (long long)n, lo, device, host);
    EXPECT_LE(device, 2 * host) << "operands in [" << lo << ", 1]";
  }
}

TEST_F(LinalgConformance, MmAndBmm) {
  for (DType dt : kProductDTypes) {
    auto a = inputFor(dt, {33, 20}), b = inputFor(dt, {20, 70});
    expectClose(call("mm", {a, b})[0], rounded(refMatmul(a, b)), "mm " + std::string(dtypeName(dt)), 20);
    auto x = inputFor(dt, {3, 17, 9}), y = inputFor(dt, {3, 9, 5});
    expectClose(call("bmm", {x, y})[0], rounded(refMatmul(x, y)), "bmm " + std::string(dtypeName(dt)), 9);
  }
  auto e = inputFor(DType::F32, {0, 4, 5}), f = inputFor(DType::F32, {0, 5, 2});
  EXPECT_EQ(call("bmm", {e, f})[0].shape, (Shape{0, 4, 2}));
}

TEST_F(LinalgConformance, AddmmAndBaddbmm) {
  for (DType dt : kFloats) {
    std::string name(dtypeName(dt));
    auto m1 = inputFor(dt, {19, 11}), m2 = inputFor(dt, {11, 67});
    for (Shape cs : {Shape{19, 67}, Shape{67}, Shape{19, 1}, Shape{}}) {
      auto c = inputFor(dt, cs);
      auto got = call("addmm", {c, m1, m2}, {{"beta", 0.5}, {"alpha", -2.0}});
      expectClose(got[0], scaleAdd(refMatmul(m1, m2), &c, -2.0, 0.5), "addmm " + name + " input " + shapeStr(cs), 11);
    }
    // Defaults alpha = beta = 1; beta = 0 ignores NaN in input.
    auto c = inputFor(dt, {19, 67});
    expectClose(call("addmm", {c, m1, m2})[0], scaleAdd(refMatmul(m1, m2), &c, 1, 1), "addmm defaults " + name, 11);
    HostTensor nan = makeTensor(dt, {1}, {std::nan("")});
    expectClose(call("addmm", {nan, m1, m2}, {{"beta", 0.0}})[0], scaleAdd(refMatmul(m1, m2), nullptr, 1, 0),
                "addmm beta=0 " + name, 11);
    auto b1 = inputFor(dt, {4, 6, 13}), b2 = inputFor(dt, {4, 13, 5});
    for (Shape cs : {Shape{4, 6, 5}, Shape{1, 6, 5}, Shape{4, 1, 5}, Shape{5}}) {
      auto bc = inputFor(dt, cs);
      auto got = call("baddbmm", {bc, b1, b2}, {{"beta", 2}, {"alpha", 0.25}});
      expectClose(got[0], scaleAdd(refMatmul(b1, b2), &bc, 0.25, 2), "baddbmm " + name + " input " + shapeStr(cs), 13);
    }
  }
  // k = 0: beta * input only.
  auto c = inputFor(DType::F32, {3, 2});
  auto z1 = inputFor(DType::F32, {3, 0}), z2 = inputFor(DType::F32, {0, 2});
  expectClose(call("addmm", {c, z1, z2}, {{"beta", 3.0}})[0], scaleAdd(refMatmul(z1, z2), &c, 1, 3), "addmm k=0");
}

TEST_F(LinalgConformance, Linear) {
  for (DType dt : kFloats) {
    std::string name(dtypeName(dt));
    auto w = inputFor(dt, {37, 21}), bias = inputFor(dt, {37});
    for (Shape xs : {Shape{21}, Shape{5, 21}, Shape{2, 3, 21}, Shape{0, 21}, Shape{130, 21}}) {
      auto x = inputFor(dt, xs);
      auto prod = refMatmul(x, transpose2(w));
      expectClose(call("linear", {x, w})[0], rounded(prod), "linear " + name + " " + shapeStr(xs), 21);
      expectClose(call("linear", {x, w, bias})[0], scaleAdd(prod, &bias, 1, 1),
                  "linear+bias " + name + " " + shapeStr(xs), 21);
    }
  }
}

TEST_F(LinalgConformance, OuterAndDot) {
  for (DType dt : kProductDTypes) {
    std::string name(dtypeName(dt));
    auto a = inputFor(dt, {70}), b = inputFor(dt, {129});
    HostTensor ac{dt, {70, 1}, a.values}, bc{dt, {1, 129}, b.values};
    expectClose(call("outer", {a, b})[0], rounded(refMatmul(ac, bc)), "outer " + name);
    for (int64_t n : {0, 1, 1000, 300'001}) {
      if (n > 1000 && !(dt == DType::F32 || dt == DType::I64 || dt == DType::F16)) continue;
      auto x = inputFor(dt, {n}), y = inputFor(dt, {n});
      auto got = call("dot", {x, y});
      EXPECT_EQ(got[0].shape, Shape{});
      expectClose(got[0], rounded(refMatmul(x, y)), "dot " + name + " n=" + std::to_string(n),
                  double(std::max<int64_t>(n, 1)));
    }
  }
}

TEST_F(LinalgConformance, Errors) {
  auto m23 = inputFor(DType::F32, {2, 3}), m45 = inputFor(DType::F32, {4, 5}), v3 = inputFor(DType::F32, {3});
  auto b234 = inputFor(DType::F32, {2, 3, 4}), b345 = inputFor(DType::F32, {3, 4, 5});
  HostTensor s = makeTensor(DType::F32, {}, {1});
  EXPECT_EQ(errorOf("matmul", {m23, m45}),
            "matmul: input 'other' has shape [4, 5]; expected dim 0 to be 3 (the last dim of 'input' [2, 3])");
  EXPECT_EQ(errorOf("matmul", {s, m23}), "matmul: input 'input' is 0-d; matmul needs at least 1 dim on both inputs");
  EXPECT_EQ(errorOf("matmul", {inputFor(DType::F32, {2, 3, 4}), inputFor(DType::F32, {3, 4, 5})}),
            "matmul: batch dims of 'input' [2] and 'other' [3] cannot be broadcast together");
  EXPECT_EQ(errorOf("mm", {v3, m23}), "mm: input 'input' is f32[3]; expected a 2-D tensor");
  EXPECT_EQ(errorOf("bmm", {b234, b345}),
            "bmm: input 'mat2' has shape [3, 4, 5]; expected dim 0 to be 2 (the batch size of 'input' [2, 3, 4])");
  EXPECT_EQ(errorOf("bmm", {m23, b345}), "bmm: input 'input' is f32[2, 3]; expected a 3-D tensor");
  EXPECT_EQ(errorOf("addmm", {inputFor(DType::F32, {3, 3}), m23, inputFor(DType::F32, {3, 4})}),
            "addmm: input 'input' has shape [3, 3]; expected a shape that broadcasts to [2, 4] (the product's shape)");
  EXPECT_EQ(errorOf("linear", {inputFor(DType::F32, {5, 4}), m23}),
            "linear: input 'weight' has shape [2, 3]; expected dim 1 to be 4 (the last dim of 'input' [5, 4])");
  EXPECT_EQ(errorOf("linear", {inputFor(DType::F32, {5, 3}), m23, v3}),
            "linear: input 'bias' has shape [3]; expected [2] (out_features, weight's dim 0)");
  EXPECT_EQ(errorOf("outer", {m23, v3}), "outer: input 'input' is f32[2, 3]; expected a 1-D tensor");
  EXPECT_EQ(errorOf("dot", {v3, inputFor(DType::F32, {4})}),
            "dot: input 'other' has 4 elements; expected 3 like 'input'");
  EXPECT_EQ(errorOf("dot", {v3, inputFor(DType::F16, {3})}),
            "dot: input 'other' has dtype f16; expected f32 like the op's other inputs");
  EXPECT_EQ(errorOf("addmm", {inputFor(DType::I32, {2, 2}), inputFor(DType::I32, {2, 2}), inputFor(DType::I32, {2, 2})}),
            "addmm: input 'input' has dtype i32; expected one of f32, f16, bf16");
  EXPECT_EQ(errorOf("matmul", {inputFor(DType::F32, {2, 1, 2, 1, 2, 1, 2, 3}), inputFor(DType::F32, {1, 2, 1, 2, 1, 2, 3, 2})}),
            "matmul: the batch dims [2, 2, 2, 2, 2, 2] leave 6 independent dims after broadcasting; at most 4 are supported");
}

}  // namespace
}  // namespace tensord::compute::testing
