// Conformance of the creation family: fills, ranges, eye, *_like in every
// dtype they declare; the random ops against a CPU copy of their generator
// (Philox4x32-10, bit-exact for the uniform integers, a float tolerance for
// randn's transcendental functions) plus simple statistics on ~1e5 samples;
// multinomial's distribution and no-repeat rule; the error paths.

#include <array>
#include <cmath>
#include <set>

#include "tests/compute/conformance.h"

namespace tensord::compute::testing {
namespace {

TENSORD_COVERS(creation, "zeros", "ones", "full", "zeros_like", "ones_like", "full_like", "arange", "linspace", "eye",
               "rand", "randn", "randint", "bernoulli", "multinomial");

using Attr = std::pair<std::string, AttrValue>;
const std::vector<DType> kEvery = {DType::F32, DType::F16, DType::BF16, DType::I32, DType::I64, DType::U8, DType::Bool};
const std::vector<DType> kFloats = {DType::F32, DType::F16, DType::BF16};

std::string dn(DType d) { return std::string(dtypeName(d)); }

std::array<uint32_t, 4> philox(std::array<uint32_t, 4> c, uint32_t k0, uint32_t k1) {
  for (int r = 0; r < 10; ++r) {
    if (r > 0) k0 += 0x9E3779B9u, k1 += 0xBB67AE85u;
    uint64_t p0 = uint64_t(0xD2511F53u) * c[0], p1 = uint64_t(0xCD9E8D57u) * c[2];
    c = {uint32_t(p1 >> 32) ^ c[1] ^ k0, uint32_t(p1), uint32_t(p0 >> 32) ^ c[3] ^ k1, uint32_t(p0)};
  }
  return c;
}

std::array<uint32_t, 4> draw(uint64_t i, uint64_t seed) {
  return philox({uint32_t(i), 0, 0, 0}, uint32_t(seed), uint32_t(seed >> 32));
}

HostTensor filled(DType dt, const Shape& shape, double v) {
  int64_t n = 1;
  for (auto d : shape) n *= d;
  return makeTensor(dt, shape, std::vector<double>(size_t(n), v));
}

void expectExact(const HostTensor& got, const HostTensor& want, const std::string& what) {
  EXPECT_EQ(got.dtype, want.dtype) << what;
  expectClose(got, want, what, 1, {0, 0});
}

void meanVar(const std::vector<double>& v, double& mean, double& var) {
  mean = 0, var = 0;
  for (double x : v) mean += x;
  mean /= double(v.size());
  for (double x : v) var += (x - mean) * (x - mean);
  var /= double(v.size());
}

class CreationConformance : public ConformanceTest {};

TEST_F(CreationConformance, Fills) {
  for (DType dt : kEvery) {
    for (Shape s : {Shape{}, Shape{0}, Shape{3, 0, 2}, Shape{5, 1, 7}}) {
      std::vector<Attr> a = {{"size", s}, {"dtype", dn(dt)}};
      std::string what = dn(dt) + " " + shapeStr(s);
      expectExact(call("zeros", {}, a)[0], filled(dt, s, 0), "zeros " + what);
      expectExact(call("ones", {}, a)[0], filled(dt, s, 1), "ones " + what);
      a.push_back({"fill_value", 2.5});
      expectExact(call("full", {}, a)[0], filled(dt, s, roundTo(dt, 2.5)), "full " + what);
      auto x = randomTensor(dt, s);
      expectExact(call("zeros_like", {x})[0], filled(dt, s, 0), "zeros_like " + what);
      expectExact(call("ones_like", {x})[0], filled(dt, s, 1), "ones_like " + what);
      expectExact(call("full_like", {x}, {{"fill_value", int64_t(-3)}})[0], filled(dt, s, roundTo(dt, -3)),
                  "full_like " + what);
      expectExact(call("zeros_like", {x}, {{"dtype", std::string("f16")}})[0], filled(DType::F16, s, 0),
                  "zeros_like to f16 " + what);
    }
  }
  // Defaults: f32; full infers from fill_value; exact big int64; > 65535 workgroups.
  EXPECT_EQ(call("zeros", {}, {{"size", Shape{2}}})[0].dtype, DType::F32);
  expectExact(call("full", {}, {{"size", Shape{2}}, {"fill_value", int64_t(1) << 40}})[0],
              filled(DType::I64, {2}, double(int64_t(1) << 40)), "full i64 2^40");
  expectExact(call("full", {}, {{"size", Shape{2}}, {"fill_value", true}})[0], filled(DType::Bool, {2}, 1), "full bool");
  expectExact(call("full", {}, {{"size", Shape{2}}, {"fill_value", 0.5}})[0], filled(DType::F32, {2}, 0.5), "full f32");
  expectExact(call("ones", {}, {{"size", Shape{17'000'000}}, {"dtype", std::string("u8")}})[0],
              filled(DType::U8, {17'000'000}, 1), "ones 17M u8");
}

TEST_F(CreationConformance, Arange) {
  auto want = [](DType dt, double start, double end, double step) {
    int64_t n = int64_t(std::ceil((end - start) / step));
    HostTensor t{dt, {n}, {}};
    for (int64_t i = 0; i < n; ++i) t.values.push_back(roundTo(dt, start + double(i) * step));
    return t;
  };
  auto got = call("arange", {}, {{"end", int64_t(10)}});
  expectExact(got[0], want(DType::I64, 0, 10, 1), "arange(10) i64");
  got = call("arange", {}, {{"start", int64_t(5)}, {"end", int64_t(-7)}, {"step", int64_t(-3)}});
  expectExact(got[0], want(DType::I64, 5, -7, -3), "arange(5, -7, -3)");
  got = call("arange", {}, {{"start", int64_t(1) << 40}, {"end", (int64_t(1) << 40) + 5}});
  expectExact(got[0], want(DType::I64, double(int64_t(1) << 40), double((int64_t(1) << 40) + 5), 1), "arange 2^40");
  for (DType dt : {DType::F32, DType::F16, DType::BF16, DType::I32}) {
    auto g = call("arange", {}, {{"start", -1.0}, {"end", 1.0}, {"step", 0.125}, {"dtype", dn(dt)}});
    expectClose(g[0], want(dt, -1, 1, 0.125), "arange(-1, 1, 0.125) " + dn(dt));
  }
  got = call("arange", {}, {{"start", 0.0}, {"end", 1.0}, {"step", 0.3}});
  expectClose(got[0], want(DType::F32, 0, 1, 0.3), "arange(0, 1, 0.3) has ceil(1/0.3) = 4 values");
  EXPECT_EQ(call("arange", {}, {{"start", int64_t(3)}, {"end", int64_t(3)}})[0].shape, Shape{0});
  got = call("arange", {}, {{"end", int64_t(100'000)}, {"dtype", std::string("i32")}});
  expectExact(got[0], want(DType::I32, 0, 100'000, 1), "arange 1e5 i32");
}

TEST_F(CreationConformance, LinspaceAndEye) {
  for (DType dt : kFloats) {
    for (int64_t steps : {0, 1, 2, 7, 1001}) {
      auto got = call("linspace", {}, {{"start", -2.0}, {"end", 3.0}, {"steps", steps}, {"dtype", dn(dt)}});
      HostTensor want{dt, {steps}, {}};
      for (int64_t i = 0; i < steps; ++i) {
        want.values.push_back(roundTo(dt, steps == 1 ? -2.0 : -2.0 + 5.0 * double(i) / double(steps - 1)));
      }
      expectClose(got[0], want, "linspace " + dn(dt) + " steps=" + std::to_string(steps));
    }
  }
  for (DType dt : kEvery) {
    for (auto [n, m] : {std::pair<int64_t, int64_t>{3, 3}, {2, 5}, {6, 1}, {0, 4}}) {
      auto got = call("eye", {}, {{"n", n}, {"m", m}, {"dtype", dn(dt)}});
      HostTensor want{dt, {n, m}, {}};
      for (int64_t i = 0; i < n * m; ++i) want.values.push_back(i / m == i % m ? 1 : 0);
      expectExact(got[0], want, "eye " + dn(dt) + " " + std::to_string(n) + "x" + std::to_string(m));
    }
  }
  EXPECT_EQ(call("eye", {}, {{"n", int64_t(4)}})[0].shape, (Shape{4, 4}));
}

TEST_F(CreationConformance, RandomStreamsMatchTheCpuGenerator) {
  const int64_t n = 100'000;
  const uint64_t seed = 0x123456789abcull;
  for (DType dt : kFloats) {
    int bits = dt == DType::F32 ? 24 : dt == DType::F16 ? 11 : 8;
    auto got = call("rand", {}, {{"size", Shape{n}}, {"dtype", dn(dt)}, {"seed", int64_t(seed)}})[0];
    HostTensor want{dt, {n}, {}};
    for (int64_t i = 0; i < n; ++i) want.values.push_back(std::ldexp(double(draw(uint64_t(i), seed)[0] >> (32 - bits)), -bits));
    expectExact(got, want, "rand " + dn(dt));
    double mean, var;
    meanVar(got.values, mean, var);
    EXPECT_NEAR(mean, 0.5, 5 * std::sqrt(1.0 / 12 / n)) << "rand " << dn(dt);
    EXPECT_NEAR(var, 1.0 / 12, 0.01) << "rand " << dn(dt);

    auto normal = call("randn", {}, {{"size", Shape{n}}, {"dtype", dn(dt)}, {"seed", int64_t(seed)}})[0];
    HostTensor wantN{dt, {n}, {}};
    for (int64_t i = 0; i < n; ++i) {
      auto r = draw(uint64_t(i), seed);
      double u1 = std::ldexp(double(r[0] >> 8) + 1, -24), u2 = std::ldexp(double(r[1] >> 8), -24);
      wantN.values.push_back(roundTo(dt, std::sqrt(-2 * std::log(u1)) * std::cos(2 * M_PI * u2)));
    }
    Tolerance tol = tolerance(dt);
    expectClose(normal, wantN, "randn " + dn(dt), 1, {std::max(tol.atol, 2e-4), std::max(tol.rtol, 1e-4)});
    meanVar(normal.values, mean, var);
    EXPECT_NEAR(mean, 0, 5 / std::sqrt(double(n))) << "randn " << dn(dt);
    EXPECT_NEAR(var, 1, 0.03) << "randn " << dn(dt);
  }
  // Same seed, same tensor; another seed, another.
  auto a = call("rand", {}, {{"size", Shape{64}}, {"seed", int64_t(7)}})[0];
  auto b = call("rand", {}, {{"size", Shape{64}}, {"seed", int64_t(7)}})[0];
  auto c = call("rand", {}, {{"size", Shape{64}}, {"seed", int64_t(8)}})[0];
  EXPECT_EQ(a.values, b.values);
  EXPECT_NE(a.values, c.values);
  EXPECT_EQ(call("randn", {}, {{"size", Shape{3, 0}}})[0].shape, (Shape{3, 0}));

  for (DType dt : {DType::I64, DType::I32, DType::F32}) {
    for (auto [low, high] : {std::pair<int64_t, int64_t>{-3, 4}, {0, 1000}, {-(int64_t(1) << 20), int64_t(1) << 20}}) {
      auto got = call("randint", {}, {{"low", low}, {"high", high}, {"size", Shape{n}}, {"dtype", dn(dt)},
                                      {"seed", int64_t(seed)}})[0];
      HostTensor want{dt, {n}, {}};
      for (int64_t i = 0; i < n; ++i) {
        auto r = draw(uint64_t(i), seed);
        uint64_t bits = (uint64_t(r[1]) << 32) | r[0];
        want.values.push_back(roundTo(dt, double(low + int64_t(bits % uint64_t(high - low)))));
      }
      std::string what = "randint " + dn(dt) + " [" + std::to_string(low) + ", " + std::to_string(high) + ")";
      expectExact(got, want, what);
      double mean, var;
      meanVar(got.values, mean, var);
      double range = double(high - low);
      EXPECT_NEAR(mean, (double(low) + double(high) - 1) / 2, 5 * range / std::sqrt(12.0 * n)) << what;
    }
  }
  EXPECT_EQ(call("randint", {}, {{"high", int64_t(3)}, {"size", Shape{2}}})[0].dtype, DType::I64);
}

TEST_F(CreationConformance, Bernoulli) {
  const int64_t n = 100'000;
  for (DType dt : kFloats) {
    HostTensor p{dt, {n}, {}};
    for (int64_t i = 0; i < n; ++i) p.values.push_back(roundTo(dt, double(i % 5) / 4));  // 0, .25, .5, .75, 1
    auto got = call("bernoulli", {p}, {{"seed", int64_t(42)}})[0];
    HostTensor want{dt, {n}, {}};
    for (int64_t i = 0; i < n; ++i) {
      double u = std::ldexp(double(draw(uint64_t(i), 42)[0] >> 8), -24);
      want.values.push_back(u < p.values[size_t(i)] ? 1 : 0);
    }
    expectExact(got, want, "bernoulli " + dn(dt));
    std::array<double, 5> ones{};
    for (int64_t i = 0; i < n; ++i) ones[size_t(i % 5)] += got.values[size_t(i)];
    for (int k = 0; k < 5; ++k) {
      double q = k / 4.0, m = n / 5.0;
      EXPECT_NEAR(ones[size_t(k)] / m, q, 5 * std::sqrt(q * (1 - q) / m) + 1e-12) << "bernoulli p=" << q;
    }
  }
  EXPECT_EQ(call("bernoulli", {makeTensor(DType::F32, {2, 0}, {})})[0].shape, (Shape{2, 0}));
}

TEST_F(CreationConformance, Multinomial) {
  // With replacement: frequencies follow the weights.
  const int64_t ns = 100'000;
  HostTensor w = makeTensor(DType::F32, {4}, {1, 0, 2, 5});
  auto got = call("multinomial", {w}, {{"num_samples", ns}, {"replacement", true}, {"seed", int64_t(3)}})[0];
  EXPECT_EQ(got.dtype, DType::I64);
  ASSERT_EQ(got.shape, Shape{ns});
  std::array<double, 4> count{};
  for (double v : got.values) {
    ASSERT_TRUE(v >= 0 && v < 4) << v;
    count[size_t(v)] += 1;
  }
  EXPECT_EQ(count[1], 0) << "a zero weight is never drawn";
  for (int k = 0; k < 4; ++k) {
    double q = w.values[size_t(k)] / 8;
    EXPECT_NEAR(count[size_t(k)] / ns, q, 5 * std::sqrt(q * (1 - q) / ns) + 1e-12) << "category " << k;
  }
  // Without replacement, per row: no repeats; all positive categories when ns = their count.
  for (DType dt : kFloats) {
    auto rows = randomTensor(dt, {300, 20}, 0.1, 2);
    auto s = call("multinomial", {rows}, {{"num_samples", int64_t(20)}, {"seed", int64_t(9)}})[0];
    ASSERT_EQ(s.shape, (Shape{300, 20}));
    for (int64_t r = 0; r < 300; ++r) {
      std::set<double> seen(s.values.begin() + r * 20, s.values.begin() + (r + 1) * 20);
      EXPECT_EQ(seen.size(), 20u) << "row " << r << " repeats a category (" << dn(dt) << ")";
    }
  }
  // Without replacement, first draw follows the weights too.
  HostTensor many{DType::F32, {20'000, 3}, {}};
  for (int i = 0; i < 20'000; ++i) many.values.insert(many.values.end(), {1, 3, 0});
  auto first = call("multinomial", {many}, {{"num_samples", int64_t(2)}, {"seed", int64_t(5)}})[0];
  double ones = 0;
  for (int i = 0; i < 20'000; ++i) {
    ASSERT_NE(first.values[size_t(2 * i)], first.values[size_t(2 * i + 1)]);
    ASSERT_NE(first.values[size_t(2 * i)], 2);
    ones += first.values[size_t(2 * i)] == 1;
  }
  EXPECT_NEAR(ones / 20'000, 0.75, 5 * std::sqrt(0.75 * 0.25 / 20'000));
  // Device-side errors.
  EXPECT_EQ(errorOf("multinomial", {makeTensor(DType::F32, {2, 2}, {1, 1, -1, 1})}, {{"num_samples", int64_t(1)}}),
            "multinomial: row 1 of 'input' has a negative, infinite or NaN weight");
  EXPECT_EQ(errorOf("multinomial", {makeTensor(DType::F32, {2}, {0, 0})}, {{"num_samples", int64_t(1)}}),
            "multinomial: row 0 of 'input' sums to 0; expected at least one positive weight");
  EXPECT_EQ(errorOf("multinomial", {makeTensor(DType::F32, {3}, {0, 1, 1})}, {{"num_samples", int64_t(3)}}),
            "multinomial: row 0 of 'input' has fewer than num_samples (3) positive weights; sampling without "
            "replacement needs that many");
}

TEST_F(CreationConformance, Errors) {
  EXPECT_EQ(errorOf("zeros", {}, {{"size", Shape{2}}, {"dtype", std::string("f64")}}),
            "zeros: attribute 'dtype' is 'f64'; expected one of f32, f16, bf16, i32, i64, u8, bool");
  EXPECT_EQ(errorOf("rand", {}, {{"size", Shape{2}}, {"dtype", std::string("i32")}}),
            "rand: attribute 'dtype' is i32; expected one of f32, f16, bf16");
  EXPECT_EQ(errorOf("ones", {}, {{"size", Shape{2, -1}}}),
            "ones: attribute 'size' is [2, -1]; expected sizes >= 0 (dim 1 is -1)");
  EXPECT_EQ(errorOf("zeros", {}), "zeros: missing required attribute 'size'");
  EXPECT_EQ(errorOf("arange", {}, {{"end", int64_t(5)}, {"step", int64_t(0)}}),
            "arange: attribute 'step' is 0; expected a non-zero step");
  EXPECT_NE(errorOf("arange", {}, {{"end", int64_t(-5)}}).find("expected step's sign to match end - start"),
            std::string::npos);
  EXPECT_EQ(errorOf("linspace", {}, {{"start", 0.0}, {"end", 1.0}, {"steps", int64_t(-1)}}),
            "linspace: attribute 'steps' is -1; expected >= 0");
  EXPECT_EQ(errorOf("eye", {}, {{"n", int64_t(-2)}}), "eye: attribute 'n' is -2; expected >= 0");
  EXPECT_EQ(errorOf("randint", {}, {{"low", int64_t(3)}, {"high", int64_t(3)}, {"size", Shape{2}}}),
            "randint: attribute 'high' is 3; expected it to be greater than 'low' (3)");
  EXPECT_EQ(errorOf("bernoulli", {makeTensor(DType::I32, {2}, {0, 1})}),
            "bernoulli: input 'input' has dtype i32; expected one of f32, f16, bf16");
  EXPECT_EQ(errorOf("multinomial", {makeTensor(DType::F32, {3}, {1, 1, 1})}, {{"num_samples", int64_t(4)}}),
            "multinomial: attribute 'num_samples' is 4; without replacement expected at most 3 (the number of "
            "categories)");
  EXPECT_EQ(errorOf("multinomial", {makeTensor(DType::F32, {1, 1, 3}, {1, 1, 1})}, {{"num_samples", int64_t(1)}}),
            "multinomial: input 'input' is f32[1, 1, 3]; expected 1-D [n] or 2-D [B, n] weights");
  EXPECT_EQ(errorOf("multinomial", {makeTensor(DType::F32, {3}, {1, 1, 1})}, {{"num_samples", int64_t(0)}}),
            "multinomial: attribute 'num_samples' is 0; expected > 0");
}

}  // namespace
}  // namespace tensord::compute::testing
