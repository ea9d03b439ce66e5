// Gradcheck cases of the linalg family (see gradcheck.h) and the errors of a
// misfitting grad.

#include "tests/compute/gradcheck.h"

namespace tensord::compute::testing {
namespace {

std::vector<GradCase> linalgCases() {
  std::vector<GradCase> c;
  // matmul: every rank combination PyTorch allows, broadcast batch dims summed back.
  for (auto [a, b] : std::initializer_list<std::pair<Shape, Shape>>{
           {{3}, {3}},                 // dot
           {{2, 3}, {3}},              // matrix-vector
           {{3}, {3, 4}},              // vector-matrix
           {{2, 3}, {3, 4}},           // mm
           {{2, 2, 3}, {3, 4}},        // batched @ matrix
           {{2, 3}, {2, 3, 4}},        // matrix @ batched
           {{2, 1, 2, 3}, {3, 3, 2}},  // batch dims broadcast both ways
           {{3}, {2, 3, 4}},           // vector @ batched
           {{2, 2, 3}, {3}},           // batched @ vector
           {{2, 3, 1}, {2, 1, 4}},     // k = 1 (transposes are views)
       }) {
    c.push_back({"matmul", {uniform(a), uniform(b)}});
  }
  c.push_back({"mm", {uniform({2, 3}), uniform({3, 4})}});
  c.push_back({"bmm", {uniform({2, 2, 3}), uniform({2, 3, 4})}});
  c.push_back({"addmm", {uniform({2, 4}), uniform({2, 3}), uniform({3, 4})}});
  c.push_back({"addmm", {uniform({4}), uniform({2, 3}), uniform({3, 4})}, {{"beta", 0.5}, {"alpha", -2.0}}});
  c.push_back({"addmm", {uniform({2, 1}), uniform({2, 3}), uniform({3, 4})}, {{"beta", 0.0}}});
  c.push_back({"baddbmm", {uniform({2, 2, 4}), uniform({2, 2, 3}), uniform({2, 3, 4})}});
  c.push_back(
      {"baddbmm", {uniform({1, 2, 4}), uniform({2, 2, 3}), uniform({2, 3, 4})}, {{"beta", 2.0}, {"alpha", 0.5}}});
  c.push_back({"dot", {uniform({5}), uniform({5})}});
  c.push_back({"outer", {uniform({3}), uniform({4})}});
  c.push_back({"linear", {uniform({2, 3}), uniform({4, 3}), uniform({4})}});
  c.push_back({"linear", {uniform({2, 2, 3}), uniform({4, 3})}});
  c.push_back({"linear", {uniform({3}), uniform({4, 3}), uniform({1})}});
  return c;
}

const std::vector<GradCase> kLinalg = linalgCases();
TENSORD_GRAD_CASES(linalg, kLinalg);

TEST_F(GradcheckTest, Linalg) { checkAll(kLinalg); }

// Gradcheck runs in f32; the same grads in f16 and bf16 agree with it
// within the narrow dtype's tolerance (sums of k terms).
TEST_F(GradcheckTest, LinalgNarrowFloats) {
  for (DType dtype : {DType::F16, DType::BF16}) {
    SCOPED_TRACE(std::string(dtypeName(dtype)));
    auto same = [&](const std::string& op, const std::vector<Shape>& shapes, const StepAttrs& attrs = {}) {
      SCOPED_TRACE(op);
      std::vector<HostTensor> narrow, wide;
      for (const auto& s : shapes) {
        narrow.push_back(randomTensor(dtype, s));
        wide.push_back(makeTensor(DType::F32, s, narrow.back().values));
      }
      auto got = call(op, narrow, attrs), want = call(op, wide, attrs);
      ASSERT_EQ(got.size(), want.size());
      for (size_t i = 0; i < got.size(); ++i) {
        expectClose(got[i], makeTensor(dtype, want[i].shape, want[i].values), op + " output " + std::to_string(i), 8);
      }
    };
    same("matmul_backward", {{2, 2, 4}, {2, 2, 3}, {3, 4}});
    same("matmul_backward", {{2, 2, 4}, {2, 2, 3}, {2, 3, 4}});
    same("addmm_backward", {{2, 4}, {4}, {2, 3}, {3, 4}}, {{"beta", 0.5}, {"alpha", 2.0}});
    same("linear_backward", {{2, 4}, {2, 3}, {4, 3}, {4}});
  }
}

TEST_F(GradcheckTest, LinalgErrors) {
  auto r = [](Shape s, DType d = DType::F32) { return randomTensor(d, s); };
  std::string e = errorOf("matmul_backward", {r({2, 4}), r({2, 3}), r({3, 5})});
  EXPECT_NE(e.find("matmul_backward: input 'grad' has shape [2, 4]; expected [2, 5]"), std::string::npos) << e;
  e = errorOf("matmul_backward", {r({2}), r({2, 2, 3}), r({3})});
  EXPECT_NE(e.find("matmul_backward: input 'grad' has shape [2]; expected [2, 2]"), std::string::npos) << e;
  e = errorOf("addmm_backward", {r({2, 4}), r({4}), r({2, 3}), r({3, 5})});
  EXPECT_NE(e.find("addmm_backward: input 'grad' has shape [2, 4]; expected [2, 5]"), std::string::npos) << e;
  e = errorOf("dot_backward", {r({3}), r({3}), r({3})});
  EXPECT_NE(e.find("dot_backward: input 'grad' has shape [3]; expected []"), std::string::npos) << e;
  e = errorOf("linear_backward", {r({2, 3}), r({2, 3}), r({4, 3})});
  EXPECT_NE(e.find("linear_backward: input 'grad' has shape [2, 3]; expected [2, 4]"), std::string::npos) << e;
  e = errorOf("outer_backward", {r({3, 4}), r({3, 1}), r({4})});
  EXPECT_NE(e.find("outer_backward: input 'input' has shape [3, 1]; expected a 1-D tensor"), std::string::npos) << e;
  e = errorOf("mm_backward", {r({2, 4}, DType::I32), r({2, 3}, DType::I32), r({3, 4}, DType::I32)});
  EXPECT_NE(e.find("mm_backward: input 'grad' has dtype i32; expected one of f32, f16, bf16"), std::string::npos) << e;
}

}  // namespace
}  // namespace tensord::compute::testing
