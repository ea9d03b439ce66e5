// masked_select: output length from the device, row-major order, broadcasting.

#include "tests/compute/conformance.h"

#include "compute/template_util.h"

namespace tensord::compute::testing {
namespace {

TENSORD_COVERS(select, "masked_select");

TEST_F(ConformanceTest, MaskedSelectCountsOnTheDeviceThenCompacts) {
  for (DType dt : {DType::F32, DType::F16, DType::BF16, DType::I32, DType::I64, DType::U8, DType::Bool}) {
    // Several blocks of 1024 elements with an uneven mask, broadcast from [N, 1].
    for (auto [sx, sm] : std::initializer_list<std::pair<Shape, Shape>>{
             {{3000}, {3000}}, {{5, 700}, {5, 1}}, {{7}, {}}, {{0, 3}, {3}}, {{4, 4}, {4, 4}}}) {
      HostTensor x = randomTensor(dt, sx, -9, 9), m = randomTensor(DType::Bool, sm);
      Shape shape = *broadcastShapes(sx, sm);
      std::vector<double> want;
      for (int64_t i = 0; i < TensorDesc{dt, shape}.numel(); ++i) {
        if (m.values[size_t(broadcastIndex(sm, shape, i))] != 0) {
          want.push_back(x.values[size_t(broadcastIndex(sx, shape, i))]);
        }
      }
      auto y = call("masked_select", {x, m})[0];
      HostTensor w{dt, {int64_t(want.size())}, want};
      expectClose(y, w, "masked_select " + std::string(dtypeName(dt)) + " " + dimsName(sx) + " " + dimsName(sm), 1,
                  {0, 0});
    }
  }
  EXPECT_EQ(errorOf("masked_select", {randomTensor(DType::F32, {3}), randomTensor(DType::Bool, {4})}),
            "masked_select: inputs 'input' f32[3] and 'mask' bool[4] cannot be broadcast together (trailing dims "
            "must match or be 1)");
  EXPECT_EQ(errorOf("masked_select", {randomTensor(DType::F32, {3}), randomTensor(DType::F32, {3})}),
            "masked_select: input 'mask' has dtype f32; expected bool (a mask)");
}

TEST_F(ConformanceTest, NegativeI32PromotedToI64) {
  // A 32-bit int widened to 64 bits keeps its sign (promotion i32 + i64).
  auto y = call("add", {makeTensor(DType::I32, {4}, {-1, -7, 5, -2147483647}), makeTensor(DType::I64, {4}, {0, 1, 2, -1})})[0];
  EXPECT_EQ(y.dtype, DType::I64);
  EXPECT_EQ(y.values, (std::vector<double>{-1, -6, 7, -2147483648.0}));
  auto c = call("lt", {makeTensor(DType::I32, {2}, {-1, 3}), makeTensor(DType::I64, {2}, {0, 0})})[0];
  EXPECT_EQ(c.values, (std::vector<double>{1, 0}));
}

}  // namespace
}  // namespace tensord::compute::testing
