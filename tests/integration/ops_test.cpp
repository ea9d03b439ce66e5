// Op results through the client library against a CPU reference: a chain
// matmul -> relu -> sum, with intermediate results checked too.
//
// Tolerance: an f32 dot product (or sum) of n terms is compared with a double
// reference within 1e-4 times the sum of the absolute values of its terms,
// plus 1e-6 absolute (f32 rounding error grows with that sum, not with the
// result, which can be near zero).

#include "tests/integration/daemon_test.h"

namespace tensord::testing {
namespace {

class IntegrationOps : public DaemonTest {};

TEST_F(IntegrationOps, MatmulReluSumChainMatchesCpuReference) {
  constexpr int64_t m = 37, k = 129, n = 53;  // none a multiple of a workgroup size
  auto a = randomFloats(size_t(m * k), 11);
  auto b = randomFloats(size_t(k * n), 12);

  auto client = connect();
  Tensor ta = client->upload(Shape{m, k}, a);
  Tensor tb = client->upload(Shape{k, n}, b);
  Tensor product = matmul(ta, tb);
  Tensor activated = relu(product);
  Tensor rowSums = sum(activated, 1);
  Tensor total = sum(rowSums, 0, /*keepdim=*/true);

  MatmulReference ref = matmulReference(a, b, m, k, n);
  std::vector<double> reluRef(ref.value.size()), rowRef(static_cast<size_t>(m)), rowMag(static_cast<size_t>(m));
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      size_t e = size_t(i * n + j);
      reluRef[e] = std::max(0.0, ref.value[e]);
      rowRef[size_t(i)] += reluRef[e];
      rowMag[size_t(i)] += ref.magnitude[e];  // bounds the error carried in from the matmul
    }
  }
  double totalRef = 0, totalMag = 0;
  for (int64_t i = 0; i < m; ++i) totalRef += rowRef[size_t(i)], totalMag += rowMag[size_t(i)];

  // Read the end of the chain first: one round trip for all four calls.
  std::vector<float> gotTotal = total.toHost();
  EXPECT_EQ(total.shape(), (Shape{1}));
  ASSERT_EQ(gotTotal.size(), 1u);
  EXPECT_NEAR(gotTotal[0], totalRef, 1e-4 * totalMag + 1e-6);

  std::vector<float> gotRows = rowSums.toHost();
  EXPECT_EQ(rowSums.shape(), (Shape{m}));
  ASSERT_EQ(gotRows.size(), size_t(m));
  for (int64_t i = 0; i < m; ++i)
    EXPECT_NEAR(gotRows[size_t(i)], rowRef[size_t(i)], 1e-4 * rowMag[size_t(i)] + 1e-6) << "row " << i;

  std::vector<float> gotProduct = product.toHost();
  std::vector<float> gotRelu = activated.toHost();
  EXPECT_EQ(product.shape(), (Shape{m, n}));
  ASSERT_EQ(gotProduct.size(), ref.value.size());
  ASSERT_EQ(gotRelu.size(), ref.value.size());
  int bad = 0;
  for (size_t e = 0; e < ref.value.size() && bad < 10; ++e) {
    double tol = 1e-4 * ref.magnitude[e] + 1e-6;
    if (std::abs(gotProduct[e] - ref.value[e]) > tol || std::abs(gotRelu[e] - reluRef[e]) > tol) {
      ++bad;
      ADD_FAILURE() << "element " << e << ": matmul " << gotProduct[e] << " vs " << ref.value[e] << ", relu "
                    << gotRelu[e] << " vs " << reluRef[e] << " (tolerance " << tol << ")";
    }
    // relu of the daemon's own matmul result is exact.
    if (gotRelu[e] != std::max(0.0f, gotProduct[e])) {
      ++bad;
      ADD_FAILURE() << "element " << e << ": relu(" << gotProduct[e] << ") gave " << gotRelu[e];
    }
  }
}

TEST_F(IntegrationOps, BroadcastingElementwiseChainMatchesCpuReference) {
  // [4, 1, 5] op [3, 1] broadcasts to [4, 3, 5].
  auto x = randomFloats(4 * 5, 21, 0.5f, 2.0f);
  auto y = randomFloats(3, 22, 0.5f, 2.0f);
  auto client = connect();
  Tensor tx = client->upload(Shape{4, 1, 5}, x);
  Tensor ty = client->upload(Shape{3, 1}, y);
  Tensor out = mean(exp(-(tx * ty)) / (tx + ty) - log(ty), 2, /*keepdim=*/true);

  std::vector<float> got = out.toHost();
  EXPECT_EQ(out.shape(), (Shape{4, 3, 1}));
  ASSERT_EQ(got.size(), 12u);
  for (int i = 0; i < 4; ++i) {
    for (int j = 0; j < 3; ++j) {
      double acc = 0;
      for (int l = 0; l < 5; ++l) {
        double xv = x[size_t(i * 5 + l)], yv = y[size_t(j)];
        acc += std::exp(-(xv * yv)) / (xv + yv) - std::log(yv);
      }
      // exp/log on a GPU are accurate to a few ulp; 1e-5 relative leaves room.
      EXPECT_NEAR(got[size_t(i * 3 + j)], acc / 5, 1e-5 * (std::abs(acc / 5) + 1)) << "at [" << i << ", " << j << "]";
    }
  }
}

}  // namespace
}  // namespace tensord::testing
