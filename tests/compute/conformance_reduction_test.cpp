// Conformance of the reduction family: every reduction over any set of dims
// (adjacent or not, all, none), with keepdim, in every dtype it declares;
// scans; sort, argsort and topk. References compute in double from the same
// rounded inputs. Shapes are chosen to reach every kernel path: rows (a
// workgroup or a subgroup each) and columns, split reductions finished by
// the last workgroup of an output (rows, whole tensors) or by a second pass
// (columns), size-0 and size-1 dims, 0-d tensors, more outputs than 65535
// workgroups, and rows of a sort longer than a workgroup can hold.

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <numeric>

#include "compute/error.h"
#include "tests/compute/conformance.h"

namespace tensord::compute::testing {
namespace {

using Attr = std::pair<std::string, AttrValue>;
const double kNaN = std::numeric_limits<double>::quiet_NaN();
const double kInf = std::numeric_limits<double>::infinity();

TENSORD_COVERS(reduction, "sum", "mean", "prod", "max", "min", "amax", "amin", "argmax", "argmin", "var", "std",
               "var_mean", "norm", "logsumexp", "all", "any", "count_nonzero");

class ReductionTest : public ConformanceTest {
 public:
  using ConformanceTest::call;
};

// The elements of x grouped by output (kept dims), each group in reduced order.
struct Groups {
  Shape outShape;  // keepdim applied
  std::vector<std::vector<double>> elems;
};

Groups group(const HostTensor& x, const std::vector<bool>& mask, bool keepdim) {
  Groups g;
  Shape kept;
  for (size_t i = 0; i < x.shape.size(); ++i) {
    if (!mask[i]) g.outShape.push_back(x.shape[i]);
    else if (keepdim) g.outShape.push_back(1);
    kept.push_back(mask[i] ? 1 : x.shape[i]);
  }
  int64_t n = 1;
  for (auto d : kept) n *= d;
  g.elems.resize(size_t(n));
  // Walk x in order with a multi-index counter; o is the kept-dims index.
  std::vector<int64_t> idx(x.shape.size(), 0), keptStride(x.shape.size(), 0);
  int64_t stride = 1;
  for (size_t k = x.shape.size(); k-- > 0;) {
    keptStride[k] = mask[k] ? 0 : stride;
    stride *= kept[k];
  }
  int64_t o = 0;
  for (int64_t i = 0; i < x.numel(); ++i) {
    g.elems[size_t(o)].push_back(x.values[size_t(i)]);
    for (size_t k = x.shape.size(); k-- > 0;) {
      o += keptStride[k];
      if (++idx[k] < x.shape[k]) break;
      o -= keptStride[k] * idx[k];
      idx[k] = 0;
    }
  }
  return g;
}

std::vector<bool> maskOf(const std::vector<int64_t>& dims, size_t rank) {
  std::vector<bool> m(rank, dims.empty());
  if (rank == 0) return m;
  for (auto d : dims) m[size_t(d < 0 ? d + int64_t(rank) : d)] = true;
  return m;
}

bool anyNaN(const std::vector<double>& v) {
  return std::any_of(v.begin(), v.end(), [](double x) { return std::isnan(x); });
}

int64_t argBest(const std::vector<double>& v, bool largest) {
  for (size_t i = 0; i < v.size(); ++i) if (std::isnan(v[i])) return int64_t(i);
  size_t best = 0;
  for (size_t i = 1; i < v.size(); ++i) if (largest ? v[i] > v[best] : v[i] < v[best]) best = i;
  return int64_t(best);
}

double variance(const std::vector<double>& v, double correction) {
  double mean = 0;
  for (double x : v) mean += x;
  mean /= double(v.size());
  double m2 = 0;
  for (double x : v) m2 += (x - mean) * (x - mean);
  return m2 / std::max(double(v.size()) - correction, 0.0);
}

double norm(const std::vector<double>& v, double p) {
  if (std::isinf(p)) {
    if (anyNaN(v)) return kNaN;
    double r = p > 0 ? 0 : kInf;
    for (double x : v) r = p > 0 ? std::max(r, std::abs(x)) : std::min(r, std::abs(x));
    return r;
  }
  double s = 0;
  for (double x : v) s += p == 0 ? (x != 0) : std::pow(std::abs(x), p);
  return p == 0 || p == 1 ? s : std::pow(s, 1 / p);
}

double logsumexp(const std::vector<double>& v) {
  if (anyNaN(v)) return kNaN;
  double m = -kInf;
  for (double x : v) m = std::max(m, x);
  if (std::isinf(m)) return m;
  double s = 0;
  for (double x : v) s += std::exp(x - m);
  return m + std::log(s);
}

DType sumDType(DType d) { return isFloating(d) ? d : DType::I64; }

// The reference of `op` (a dims-list reduction) on one group; output dtype.
std::pair<double, DType> reference(const std::string& op, const std::vector<double>& v, DType in,
                                   const std::vector<Attr>& attrs) {
  auto attr = [&](const char* name, double dflt) {
    for (const auto& [k, a] : attrs) {
      if (k == name) return std::holds_alternative<double>(a) ? std::get<double>(a) : double(std::get<int64_t>(a));
    }
    return dflt;
  };
  if (op == "sum") return {std::accumulate(v.begin(), v.end(), 0.0), sumDType(in)};
  if (op == "mean") return {std::accumulate(v.begin(), v.end(), 0.0) / double(v.size()), in};
  if (op == "prod") {
    double p = 1;
    for (double x : v) p *= x;
    return {p, sumDType(in)};
  }
  if (op == "amax" || op == "amin") return {anyNaN(v) ? kNaN : v[size_t(argBest(v, op == "amax"))], in};
  if (op == "var") return {variance(v, attr("correction", 1)), in};
  if (op == "std") return {std::sqrt(variance(v, attr("correction", 1))), in};
  if (op == "norm") return {norm(v, attr("p", 2)), in};
  if (op == "logsumexp") return {logsumexp(v), in};
  if (op == "all") return {double(std::all_of(v.begin(), v.end(), [](double x) { return x != 0; })), DType::Bool};
  if (op == "any") return {double(std::any_of(v.begin(), v.end(), [](double x) { return x != 0; })), DType::Bool};
  if (op == "count_nonzero") return {double(std::count_if(v.begin(), v.end(), [](double x) { return x != 0; })), DType::I64};
  ADD_FAILURE() << "no reference for " << op;
  return {0, in};
}

// Runs a dims-list reduction and compares with the reference.
void checkReduce(const std::string& op, const HostTensor& x, const std::vector<int64_t>& dims, bool keepdim,
                 std::vector<Attr> extra = {}, double rtol = -1) {
  Groups g = group(x, maskOf(dims, x.shape.size()), keepdim);
  std::vector<Attr> attrs = {{"dim", dims}, {"keepdim", keepdim}};
  for (auto& a : extra) attrs.push_back(a);
  std::string what = op + " " + std::string(dtypeName(x.dtype)) + dimsName(x.shape) + " dims";
  for (auto d : dims) what += " " + std::to_string(d);
  auto got = ReductionTest::call(op, {x}, attrs);
  DType outDType = reference(op, {1.0}, x.dtype, extra).second;
  std::vector<double> want;
  for (const auto& v : g.elems) {
    auto [w, dt] = reference(op, v, x.dtype, extra);
    want.push_back(w);
    outDType = dt;
  }
  size_t terms = g.elems.empty() ? 1 : std::max<size_t>(g.elems[0].size(), 1);
  Tolerance tol = tolerance(outDType);
  if (rtol > 0 && x.dtype == DType::F32) tol.rtol = rtol;
  expectClose(got[0], makeTensor(outDType, g.outShape, want), what, double(terms), tol);
  if (op == "var") {
    // var_mean too: the same variance and the mean.
    auto vm = ReductionTest::call("var_mean", {x}, attrs);
    ASSERT_EQ(vm.size(), 2u);
    expectClose(vm[0], makeTensor(outDType, g.outShape, want), "var_mean(var) " + what, double(terms), tol);
    std::vector<double> means;
    for (const auto& v : g.elems) means.push_back(reference("mean", v, x.dtype, {}).first);
    expectClose(vm[1], makeTensor(outDType, g.outShape, means), "var_mean(mean) " + what, double(terms), tol);
  }
}

// max/min (values and indices) and argmax/argmin with an int dim, or over all.
void checkIndexReduce(const HostTensor& x, std::optional<int64_t> dim, bool keepdim) {
  std::vector<int64_t> dims;
  if (dim) dims.push_back(*dim);
  Groups g = group(x, maskOf(dims, x.shape.size()), keepdim);
  std::string what = std::string(dtypeName(x.dtype)) + dimsName(x.shape) + (dim ? " dim " + std::to_string(*dim) : " all");
  for (bool largest : {true, false}) {
    std::vector<double> vals, idx;
    for (const auto& v : g.elems) {
      int64_t i = argBest(v, largest);
      vals.push_back(v[size_t(i)]);
      idx.push_back(double(i));
    }
    std::vector<Attr> attrs = {{"keepdim", keepdim}};
    if (dim) attrs.push_back({"dim", *dim});
    auto arg = ReductionTest::call(largest ? "argmax" : "argmin", {x}, attrs);
    expectClose(arg[0], makeTensor(DType::I64, g.outShape, idx), std::string(largest ? "argmax " : "argmin ") + what);
    auto mm = ReductionTest::call(largest ? "max" : "min", {x}, attrs);
    if (dim) {
      ASSERT_EQ(mm.size(), 2u);
      expectClose(mm[0], makeTensor(x.dtype, g.outShape, vals), std::string(largest ? "max " : "min ") + what);
      expectClose(mm[1], makeTensor(DType::I64, g.outShape, idx), std::string(largest ? "max(i) " : "min(i) ") + what);
    } else {
      ASSERT_EQ(mm.size(), 1u);
      expectClose(mm[0], makeTensor(x.dtype, {}, vals), std::string(largest ? "max " : "min ") + what);
    }
  }
}

const std::vector<std::string> kFloatOps = {"sum", "mean", "prod", "amax", "amin", "var", "std", "norm",
                                            "logsumexp", "all", "any", "count_nonzero"};

struct ShapeCase {
  Shape shape;
  std::vector<int64_t> dims;
  bool keepdim;
};

TEST_F(ReductionTest, EveryFloatReductionOverDimSets) {
  const std::vector<ShapeCase> cases = {
      {{7, 300}, {1}, false},        // rows
      {{7, 300}, {0}, true},         // columns
      {{4, 5, 6}, {0, 2}, false},    // non-adjacent dims
      {{4, 5, 6}, {-2}, true},       // middle dim
      {{4, 5, 6}, {}, false},        // all dims
      {{2, 3, 4, 5}, {1, 3}, true},  // non-adjacent, keepdim
      {{3, 1}, {1}, false},          // size-1 dim
      {{}, {}, false},               // 0-d
      {{6}, {0}, true},
  };
  for (const auto& c : cases) {
    HostTensor x = randomTensor(DType::F32, c.shape, -2, 2);
    for (const auto& op : kFloatOps) {
      if (op == "prod") {
        checkReduce(op, randomTensor(DType::F32, c.shape, 0.5, 1.5), c.dims, c.keepdim, {}, 1e-4);
      } else {
        checkReduce(op, x, c.dims, c.keepdim, {}, 1e-4);
      }
    }
    for (double p : {1.0, kInf, -kInf, 0.0, 3.0, 0.5}) checkReduce("norm", x, c.dims, c.keepdim, {{"p", p}}, 1e-4);
    checkReduce("var", x, c.dims, c.keepdim, {{"correction", 0.0}}, 1e-4);
  }
}

TEST_F(ReductionTest, SplitReductionsAndLargeShapes) {
  // Few outputs over many elements: split over workgroups (rows, whole
  // tensors: finished by the last of them) or threads (columns: finished by
  // a second pass).
  HostTensor rows = randomTensor(DType::F32, {3, 20000});
  for (const char* op : {"sum", "var", "logsumexp", "amax"}) checkReduce(op, rows, {1}, false, {}, 1e-4);
  HostTensor cols = randomTensor(DType::F32, {2000, 3});
  for (const char* op : {"sum", "mean", "std", "norm", "amin"}) checkReduce(op, cols, {0}, true, {}, 1e-4);
  HostTensor all = randomTensor(DType::F32, {300000});
  for (const char* op : {"sum", "var", "logsumexp", "count_nonzero"}) checkReduce(op, all, {}, false, {}, 1e-4);
  checkIndexReduce(all, std::nullopt, false);
  checkIndexReduce(cols, 0, false);
  checkIndexReduce(rows, 1, true);
  // Columns split over threads in f32 and f16, and argmax's first index
  // across the splits with many ties.
  for (DType dt : {DType::F32, DType::F16}) {
    HostTensor quads = randomTensor(dt, {3000, 8});
    for (const char* op : {"sum", "amax", "var"}) checkReduce(op, quads, {0}, false, {}, 1e-4);
  }
  HostTensor ties = randomTensor(DType::F32, {3000, 8});
  for (double& v : ties.values) v = std::round(v * 2);  // few distinct values: many ties
  checkIndexReduce(ties, 0, false);
  // Many outputs: a thread per row (more than 65535 rows).
  checkReduce("sum", randomTensor(DType::F32, {70000, 256}), {1}, false);
  checkReduce("mean", randomTensor(DType::F32, {70000, 3}), {1}, false);
}

// Each kernel path of the split machinery at sizes that reach it: rows long
// enough to be split over workgroups (finished by the last of them), columns
// split over threads (finished by a thread or a workgroup per output), a
// whole tensor of odd size, reduced dims that are not adjacent, and the
// first-index and NaN rules across the chunk boundaries of a split.
TEST_F(ReductionTest, SplitRowsColumnsAndWholeTensors) {
  // Split rows, every dtype at least once.
  const Shape rowsShape = {3, 300000};
  HostTensor rows = randomTensor(DType::F32, rowsShape);
  for (const char* op : {"sum", "mean", "var", "logsumexp", "norm", "amin"}) checkReduce(op, rows, {1}, false, {}, 1e-4);
  checkIndexReduce(rows, 1, false);
  HostTensor half = randomTensor(DType::F16, rowsShape);
  for (const char* op : {"sum", "amax", "std"}) checkReduce(op, half, {1}, true);
  HostTensor brain = randomTensor(DType::BF16, rowsShape);
  for (const char* op : {"mean", "amin"}) checkReduce(op, brain, {1}, false);
  // i32 sums in i64: these overflow i32 many times over.
  HostTensor ints = randomTensor(DType::I32, rowsShape, 2e9, 2.1e9);
  checkReduce("sum", ints, {1}, false);
  checkIndexReduce(ints, 1, false);
  HostTensor longs = randomTensor(DType::I64, rowsShape, -1e12, 1e12);
  for (const char* op : {"sum", "amax", "count_nonzero"}) checkReduce(op, longs, {1}, false);
  HostTensor bytes = randomTensor(DType::U8, rowsShape, 0, 255);
  for (const char* op : {"sum", "amin", "any"}) checkReduce(op, bytes, {1}, false);
  HostTensor bools = randomTensor(DType::Bool, rowsShape, 0, 1);
  for (const char* op : {"all", "any", "count_nonzero", "sum"}) checkReduce(op, bools, {1}, false);

  // Columns split over threads; with many splits, finished by a workgroup each.
  HostTensor cols = randomTensor(DType::F32, {5000, 7});
  for (const char* op : {"sum", "var", "amax"}) checkReduce(op, cols, {0}, true, {}, 1e-4);
  checkIndexReduce(cols, 0, false);
  HostTensor tall = randomTensor(DType::F32, {20000, 3});
  for (const char* op : {"mean", "logsumexp"}) checkReduce(op, tall, {0}, false, {}, 1e-4);
  checkReduce("sum", randomTensor(DType::I32, {20000, 3}, -1e9, 1e9), {0}, false);

  // Non-adjacent reduced dims with a contiguous innermost one, split.
  HostTensor mixed = randomTensor(DType::F32, {3, 2, 9000});
  for (const char* op : {"sum", "var"}) checkReduce(op, mixed, {0, 2}, false, {}, 1e-4);

  // A whole tensor of odd size.
  HostTensor all = randomTensor(DType::F32, {1000003});
  for (const char* op : {"sum", "mean", "norm", "amax"}) checkReduce(op, all, {}, false, {}, 1e-4);
  checkIndexReduce(all, std::nullopt, false);

  // Equal extremes in different chunks: the first index wins, in both passes.
  HostTensor ties = all;
  for (size_t i : {250000u, 700001u, 999999u}) ties.values[i] = 5;
  for (size_t i : {400000u, 600000u, 900000u}) ties.values[i] = -5;
  checkIndexReduce(ties, std::nullopt, false);
  HostTensor rowTies = rows;
  for (size_t i : {300000u + 150000u, 300000u + 20000u, 300000u + 290000u}) rowTies.values[i] = 5;
  checkIndexReduce(rowTies, 1, false);

  // NaN in a late chunk propagates; the first NaN is the arg-extreme.
  HostTensor late = all;
  late.values[990000] = kNaN;
  late.values[995000] = kNaN;
  for (const char* op : {"sum", "amax", "amin", "var", "logsumexp"}) checkReduce(op, late, {}, false);
  checkIndexReduce(late, std::nullopt, false);

  // i64 sums wrap as int64 does, across chunks.
  HostTensor wrap = makeTensor(DType::I64, {1000003}, std::vector<double>(1000003, 0.0));
  for (size_t i : {10u, 400000u, 800000u, 1000002u}) wrap.values[i] = 4611686018427387904.0;  // 2^62
  wrap.values[500000] = 7;
  expectClose(ReductionTest::call("sum", {wrap})[0], makeTensor(DType::I64, {}, {7}), "i64 sum wraps");
}

// Split rows and whole tensors end in the last workgroup of an output to
// finish, which combines its partial states (reduce.comp's p.counters). On
// an engine whose dispatches are capped at 3 workgroups per axis
// (TENSORD_MAX_WORKGROUPS), each workgroup takes many splits of several
// outputs and is the last for some: a split missed or combined twice moves
// a sum of positive values by thousands. States of one value (sum, amax),
// of a value and an index (argmax) and of three (var).
TEST_F(ReductionTest, SplitsPastTheWorkgroupCap) {
  using Dims = std::vector<int64_t>;
  ::setenv("TENSORD_MAX_WORKGROUPS", "3", 1);
  auto capped = limitedEngine(64 << 20, "reduce-group-cap");
  ::unsetenv("TENSORD_MAX_WORKGROUPS");
  Engine* on = capped.get();
  const int64_t rows = 5, cols = 200000;  // 24 splits per row; 122 for the whole
  auto x = run("abs", {run("randn", {}, {{"size", Dims{rows, cols}}, {"seed", int64_t(3)}}, on)[0]}, {}, on)[0];
  const std::vector<float> xs = download(x, on);
  const std::vector<float> sums = download(run("sum", {x}, {{"dim", Dims{1}}}, on)[0], on);
  const std::vector<float> maxes = download(run("amax", {x}, {{"dim", Dims{1}}}, on)[0], on);
  const std::vector<float> vars = download(run("var", {x}, {{"dim", Dims{1}}}, on)[0], on);
  const std::vector<std::byte> argmaxBytes = downloadBytes(run("argmax", {x}, {{"dim", int64_t(1)}}, on)[0], on);
  const std::vector<float> whole = download(run("sum", {x}, {}, on)[0], on);
  ASSERT_EQ(sums.size(), size_t(rows));
  ASSERT_EQ(argmaxBytes.size(), size_t(rows) * sizeof(int64_t));
  ASSERT_EQ(whole.size(), 1u);
  double total = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = xs.data() + r * cols;
    double sum = 0, squares = 0;
    for (int64_t c = 0; c < cols; ++c) sum += row[c];
    const double mean = sum / double(cols);
    for (int64_t c = 0; c < cols; ++c) squares += (row[c] - mean) * (row[c] - mean);
    const int64_t at = std::max_element(row, row + cols) - row;
    int64_t got = 0;
    std::memcpy(&got, argmaxBytes.data() + r * sizeof(int64_t), sizeof(got));
    total += sum;
    EXPECT_NEAR(sums[size_t(r)], sum, 1e-5 * sum) << "row " << r;
    EXPECT_EQ(maxes[size_t(r)], row[at]) << "row " << r;
    EXPECT_EQ(got, at) << "row " << r;
    EXPECT_NEAR(vars[size_t(r)], squares / double(cols - 1), 1e-4 * squares / double(cols)) << "row " << r;
  }
  EXPECT_NEAR(whole[0], total, 1e-5 * total);
}

// A split reduction's result does not depend on which of its workgroups
// finishes last: the same sum of 4M elements, run again, gives the same
// bits.
TEST_F(ReductionTest, SplitReductionsAreDeterministic) {
  auto x = run("randn", {}, {{"size", std::vector<int64_t>{1 << 22}}, {"seed", int64_t(5)}})[0];
  const std::vector<std::byte> first = downloadBytes(run("sum", {x})[0]);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(downloadBytes(run("sum", {x})[0]), first) << "run " << i + 2;
}

TEST_F(ReductionTest, IndexReductions) {
  HostTensor x = randomTensor(DType::F32, {4, 5, 6});
  for (int64_t d : {0, 1, 2, -1}) {
    checkIndexReduce(x, d, false);
    checkIndexReduce(x, d, true);
  }
  checkIndexReduce(x, std::nullopt, false);
  checkIndexReduce(makeTensor(DType::F32, {}, {3.5}), std::nullopt, false);
  checkIndexReduce(makeTensor(DType::F32, {}, {3.5}), 0, false);
  // Ties: the first index.
  checkIndexReduce(makeTensor(DType::F32, {2, 5}, {1, 3, 3, 0, 3, -1, -1, 2, -1, 2}), 1, false);
  // Output shape with keepdim and no dim.
  auto a = ReductionTest::call("argmax", {x}, {{"keepdim", true}});
  EXPECT_EQ(a[0].shape, (Shape{1, 1, 1}));
}

// argmax and argmin (and max and min with a dim) give the first extreme
// whatever the order of the values: rising (each of an invocation's loads
// moves the extreme it holds; in f16 with ties), falling, all equal, all
// -inf or +inf (nothing beats the first element), a NaN after infinities,
// a NaN first; in long rows (over workgroups and their splits, loaded as
// vectors of 4), columns and whole tensors.
TEST_F(ReductionTest, ArgExtremesWhateverTheOrderOfValues) {
  const int64_t n = 40000;
  const std::vector<std::pair<std::string, std::function<double(int64_t)>>> orders = {
      {"rising", [](int64_t i) { return double(i); }},
      {"falling", [n](int64_t i) { return double(n - i); }},
      {"equal", [](int64_t) { return 3.0; }},
      {"-inf", [](int64_t) { return -kInf; }},
      {"+inf", [](int64_t) { return kInf; }},
      {"inf then NaN", [n](int64_t i) { return i == n - 5   ? kNaN
                                               : i % 7 == 0 ? kInf
                                                            : -kInf; }},
      {"NaN first", [](int64_t i) { return i == 0 ? kNaN : double(i % 13); }},
  };
  for (const auto& [name, value] : orders) {
    for (DType dt : {DType::F32, DType::F16, DType::I32}) {
      if (dt == DType::I32 && name != "rising" && name != "falling" && name != "equal") continue;  // no inf or NaN
      SCOPED_TRACE(name + " " + std::string(dtypeName(dt)));
      std::vector<double> values;
      for (int64_t i = 0; i < n; ++i) values.push_back(value(i));
      // Within f16's range (65504), where rising values round to ties.
      if (dt == DType::F16) {
        for (double& v : values) v = std::isfinite(v) ? v / 8 : v;
      }
      checkIndexReduce(makeTensor(dt, {n}, values), std::nullopt, false);
      std::vector<double> rows;
      for (int r = 0; r < 3; ++r) rows.insert(rows.end(), values.begin(), values.end());
      checkIndexReduce(makeTensor(dt, {3, n}, rows), 1, false);
      std::vector<double> cols;
      for (double v : values) cols.insert(cols.end(), {v, v});
      checkIndexReduce(makeTensor(dt, {n, 2}, cols), 0, false);
    }
  }
}

TEST_F(ReductionTest, EveryDType) {
  for (DType dt : {DType::F16, DType::BF16, DType::I32, DType::I64, DType::U8, DType::Bool}) {
    bool fl = isFloating(dt);
    HostTensor x = randomTensor(dt, {6, 50}, dt == DType::U8 ? 0 : -20, 20);
    if (fl) x = randomTensor(dt, {6, 50}, -2, 2);
    HostTensor small = randomTensor(dt, {6, 13}, dt == DType::U8 ? 0 : -3, 3);
    if (fl) small = randomTensor(dt, {6, 13}, 0.5, 1.5);
    std::vector<std::string> ops = {"sum", "all", "any", "count_nonzero"};
    if (dt != DType::Bool) ops.insert(ops.end(), {"amax", "amin"});
    if (fl) ops.insert(ops.end(), {"mean", "var", "std", "norm", "logsumexp"});
    for (const auto& op : ops) {
      checkReduce(op, x, {1}, false);
      checkReduce(op, x, {0}, true);
      checkReduce(op, x, {}, false);
    }
    if (dt != DType::Bool) {
      checkReduce("prod", small, {1}, false);
      checkReduce("prod", small, {}, false);
    }
    if (dt == DType::Bool) {
      // max/min on bool (argmax/argmin do not take bool).
      for (const char* op : {"max", "min"}) {
        auto g = group(x, {false, true}, false);
        std::vector<double> want;
        for (const auto& v : g.elems) want.push_back(op[1] == 'a' ? *std::max_element(v.begin(), v.end()) : *std::min_element(v.begin(), v.end()));
        auto got = ReductionTest::call(op, {x}, {{"dim", int64_t(1)}});
        expectClose(got[0], makeTensor(DType::Bool, g.outShape, want), std::string(op) + " bool");
      }
    } else {
      checkIndexReduce(x, 1, false);
      checkIndexReduce(x, 0, true);
      checkIndexReduce(x, std::nullopt, false);
    }
  }
  // Large f16 sum: accumulates in f32.
  checkReduce("sum", randomTensor(DType::F16, {100000}), {}, false);
}

TEST_F(ReductionTest, NaNAndInfinities) {
  HostTensor x = makeTensor(DType::F32, {3, 4}, {1, kNaN, 3, kNaN, -kInf, -kInf, -kInf, -kInf, kInf, 2, kInf, -1});
  for (const char* op : {"sum", "amax", "amin", "logsumexp", "norm", "all", "any", "count_nonzero", "mean"}) {
    checkReduce(op, x, {1}, false);
  }
  checkReduce("norm", x, {1}, false, {{"p", kInf}});
  checkIndexReduce(x, 1, false);
  checkIndexReduce(x, std::nullopt, false);
}

TEST_F(ReductionTest, EmptyInputs) {
  HostTensor e = randomTensor(DType::F32, {3, 0, 2});
  for (const char* op : {"sum", "mean", "prod", "var", "norm", "logsumexp", "all", "any", "count_nonzero"}) {
    checkReduce(op, e, {1}, false);  // reduces over nothing: identities (mean, var: NaN)
    checkReduce(op, e, {0, 2}, true);  // no outputs
  }
  checkReduce("amax", e, {0}, false);  // no outputs: fine
  checkReduce("sum", randomTensor(DType::I32, {0}), {}, false);
  EXPECT_EQ(errorOf("amax", {e}, {{"dim", std::vector<int64_t>{1}}}),
            "amax: input f32[3, 0, 2] has no elements to reduce over the given dim(s); amax has no identity (give a "
            "non-empty dim)");
  EXPECT_EQ(errorOf("max", {randomTensor(DType::F32, {0})}),
            "max: input f32[0] has no elements to reduce over the given dim(s); max has no identity (give a non-empty "
            "dim)");
}

TEST_F(ReductionTest, ErrorsNameOpArgumentExpectedAndGot) {
  HostTensor a = randomTensor(DType::F32, {2, 3});
  EXPECT_EQ(errorOf("sum", {a}, {{"dim", std::vector<int64_t>{1, -1}}}), "sum: attribute 'dim' names dim -1 twice");
  EXPECT_EQ(errorOf("var", {a}, {{"dim", std::vector<int64_t>{0, 2}}}),
            "var: attribute 'dim' is 2; expected a dim in [-2, 1] for a rank-2 input");
  EXPECT_EQ(errorOf("argmax", {a}, {{"dim", int64_t(-3)}}),
            "argmax: attribute 'dim' is -3; expected a dim in [-2, 1] for a rank-2 input");
  EXPECT_EQ(errorOf("mean", {randomTensor(DType::I32, {2})}),
            "mean: input 'input' has dtype i32; expected one of f32, f16, bf16");
  EXPECT_EQ(errorOf("argmax", {randomTensor(DType::Bool, {2})}),
            "argmax: input 'input' has dtype bool; expected one of f32, f16, bf16, i32, i64, u8");
}

TENSORD_COVERS(scan_sort, "cumsum", "cumprod", "sort", "argsort", "topk");

// Lines of x along dim: (base offset, stride, length) of each, in output order.
struct Lines {
  int64_t outer = 1, len = 1, inner = 1;
  int64_t offset(int64_t line, int64_t t) const { return ((line / inner) * len + t) * inner + line % inner; }
};
Lines linesOf(const Shape& shape, int64_t dim) {
  Lines l;
  if (dim < 0) dim += int64_t(std::max<size_t>(shape.size(), 1));
  for (size_t i = 0; i < shape.size(); ++i) {
    if (int64_t(i) < dim) l.outer *= shape[i];
    else if (int64_t(i) == dim) l.len = shape[i];
    else l.inner *= shape[i];
  }
  return l;
}

void checkScan(const std::string& op, const HostTensor& x, int64_t dim) {
  Lines l = linesOf(x.shape, dim);
  std::vector<double> want(x.values.size());
  for (int64_t line = 0; line < l.outer * l.inner; ++line) {
    double acc = op == "cumsum" ? 0 : 1;
    for (int64_t t = 0; t < l.len; ++t) {
      double v = x.values[size_t(l.offset(line, t))];
      acc = op == "cumsum" ? acc + v : acc * v;
      want[size_t(l.offset(line, t))] = acc;
    }
  }
  auto got = ReductionTest::call(op, {x}, {{"dim", dim}});
  DType out = isFloating(x.dtype) ? x.dtype : DType::I64;
  expectClose(got[0], makeTensor(out, x.shape, want),
              op + " " + std::string(dtypeName(x.dtype)) + dimsName(x.shape) + " dim " + std::to_string(dim),
              double(std::max<int64_t>(l.len, 1)), x.dtype == DType::F32 ? Tolerance{1e-6, 1e-4} : Tolerance{-1, -1});
}

// sort, argsort and (with k >= 0) topk against a stable sort with NaN greatest.
void checkSort(const HostTensor& x, int64_t dim, bool descending, int64_t k = -1) {
  Lines l = linesOf(x.shape, dim);
  int64_t outLen = k >= 0 ? k : l.len;
  Shape outShape = x.shape;
  if (!outShape.empty()) outShape[size_t(dim < 0 ? dim + int64_t(x.shape.size()) : dim)] = outLen;
  std::vector<double> vals(size_t(l.outer * l.inner * outLen)), idx(vals.size());
  Lines lo = l;
  lo.len = outLen;
  for (int64_t line = 0; line < l.outer * l.inner; ++line) {
    std::vector<int64_t> order(size_t(l.len));
    std::iota(order.begin(), order.end(), 0);
    auto key = [&](int64_t t) { return x.values[size_t(l.offset(line, t))]; };
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
      double ka = key(a), kb = key(b);
      if (std::isnan(ka) || std::isnan(kb)) return descending ? std::isnan(ka) && !std::isnan(kb) : std::isnan(kb) && !std::isnan(ka);
      return descending ? ka > kb : ka < kb;
    });
    for (int64_t t = 0; t < outLen; ++t) {
      vals[size_t(lo.offset(line, t))] = key(order[size_t(t)]);
      idx[size_t(lo.offset(line, t))] = double(order[size_t(t)]);
    }
  }
  std::string what = std::string(dtypeName(x.dtype)) + dimsName(x.shape) + " dim " + std::to_string(dim) +
                     (descending ? " descending" : "");
  if (k >= 0) {
    auto got = ReductionTest::call("topk", {x}, {{"k", k}, {"dim", dim}, {"largest", descending}});
    ASSERT_EQ(got.size(), 2u);
    expectClose(got[0], makeTensor(x.dtype, outShape, vals), "topk values " + what);
    expectClose(got[1], makeTensor(DType::I64, outShape, idx), "topk indices " + what);
    return;
  }
  auto got = ReductionTest::call("sort", {x}, {{"dim", dim}, {"descending", descending}});
  ASSERT_EQ(got.size(), 2u);
  expectClose(got[0], makeTensor(x.dtype, outShape, vals), "sort values " + what);
  expectClose(got[1], makeTensor(DType::I64, outShape, idx), "sort indices " + what);
  auto arg = ReductionTest::call("argsort", {x}, {{"dim", dim}, {"descending", descending}, {"stable", true}});
  expectClose(arg[0], makeTensor(DType::I64, outShape, idx), "argsort " + what);
}

TEST_F(ReductionTest, Scans) {
  for (const char* op : {"cumsum", "cumprod"}) {
    HostTensor x = randomTensor(DType::F32, {5, 7}, 0.5, 1.5);
    checkScan(op, x, 0);
    checkScan(op, x, 1);
    checkScan(op, x, -1);
    checkScan(op, randomTensor(DType::F32, {3, 4, 5}, 0.5, 1.5), 1);
    checkScan(op, makeTensor(DType::F32, {}, {2.5}), 0);
    checkScan(op, randomTensor(DType::F32, {0, 3}), 1);
    checkScan(op, randomTensor(DType::F32, {3, 1}), 1);
    // Long rows: a workgroup per row.
    checkScan(op, randomTensor(DType::F32, {3, 3000}, 0.999, 1.001), 1);
    checkScan(op, randomTensor(DType::F32, {2000}, 0.999, 1.001), 0);
    for (DType dt : {DType::F16, DType::BF16, DType::I32, DType::I64, DType::U8}) {
      HostTensor t = isFloating(dt) ? randomTensor(dt, {4, 9}, 0.5, 1.5) : randomTensor(dt, {4, 9}, dt == DType::U8 ? 0 : -3, 3);
      checkScan(op, t, 1);
      checkScan(op, t, 0);
    }
  }
  checkScan("cumsum", randomTensor(DType::Bool, {4, 9}), 1);
  checkScan("cumsum", randomTensor(DType::I32, {2, 1500}, -100, 100), 1);
  EXPECT_EQ(errorOf("cumsum", {randomTensor(DType::F32, {2, 3})}, {{"dim", int64_t(2)}}),
            "cumsum: attribute 'dim' is 2; expected a dim in [-2, 1] for a rank-2 input");
  EXPECT_EQ(errorOf("cumprod", {randomTensor(DType::F32, {2, 3})}), "cumprod: missing required attribute 'dim'");
}

TEST_F(ReductionTest, SortArgsortTopk) {
  HostTensor x = randomTensor(DType::F32, {6, 37});
  for (bool desc : {false, true}) {
    checkSort(x, -1, desc);
    checkSort(x, 0, desc);
    checkSort(randomTensor(DType::F32, {3, 4, 5}), 1, desc);
    // Ties keep their order (stable).
    checkSort(randomTensor(DType::I32, {5, 40}, 0, 4), 1, desc);
    checkSort(makeTensor(DType::F32, {2, 5}, {1, kNaN, -kInf, 1, kNaN, kInf, 0, kNaN, 2, 0}), 1, desc);
    checkSort(makeTensor(DType::F32, {}, {4}), 0, desc);
    checkSort(randomTensor(DType::F32, {0, 3}), 1, desc);
    checkSort(randomTensor(DType::F32, {3, 1}), 1, desc);
    checkSort(randomTensor(DType::F32, {4, 1024}), 1, desc);  // the largest shared-memory sort
    // Longer than a workgroup holds: the global sort.
    checkSort(randomTensor(DType::F32, {2, 5000}), 1, desc);
    checkSort(randomTensor(DType::I64, {1500, 2}, -9, 9), 0, desc);
    checkSort(x, 1, desc, 5);
    checkSort(x, 0, desc, 6);
    checkSort(x, 1, desc, 0);
    checkSort(randomTensor(DType::F32, {5000}), 0, desc, 10);
  }
  for (DType dt : {DType::F16, DType::BF16, DType::I32, DType::I64, DType::U8}) {
    HostTensor t = randomTensor(dt, {4, 33}, dt == DType::U8 ? 0 : -50, 50);
    checkSort(t, 1, false);
    checkSort(t, 0, true);
    checkSort(t, 1, true, 3);
  }
  // More rows than 65535 workgroups.
  checkSort(randomTensor(DType::F32, {70000, 2}), 1, false);
  HostTensor a = randomTensor(DType::F32, {2, 5});
  EXPECT_EQ(errorOf("topk", {a}, {{"k", int64_t(6)}}),
            "topk: attribute 'k' is 6; expected k in [0, 5] (the size of dim 1 of input f32[2, 5])");
  EXPECT_EQ(errorOf("topk", {a}), "topk: missing required attribute 'k'");
  EXPECT_EQ(errorOf("sort", {a}, {{"dim", int64_t(2)}}),
            "sort: attribute 'dim' is 2; expected a dim in [-2, 1] for a rank-2 input");
  EXPECT_EQ(errorOf("argsort", {randomTensor(DType::Bool, {2})}),
            "argsort: input 'input' has dtype bool; expected one of f32, f16, bf16, i32, i64, u8");
}

}  // namespace
}  // namespace tensord::compute::testing
