// Gradcheck cases of the index family (see gradcheck.h), exact checks of
// duplicate indices, and the backward ops' errors. Indices given as values
// repeat on purpose: duplicates must sum (gather, index_select, take,
// scatter_add, index_put with accumulate) or leave the gradient to the write
// that won (scatter, index_put without it).

#include "tests/compute/gradcheck.h"

namespace tensord::compute::testing {
namespace {

using Ints = std::vector<int64_t>;

// Given values as indices (or, with dtype Bool, as a mask).
GradInput idx(Shape s, std::vector<double> v, DType dtype = DType::I64) {
  GradInput in = values(std::move(s), std::move(v));
  in.dtype = dtype;
  return in;
}

std::vector<GradCase> gatherCases() {
  std::vector<GradCase> c;
  c.push_back({"gather", {uniform({3, 4}), idx({3, 5}, {0, 3, 3, 1, 3, 2, 2, 2, 0, 1, -1, 0, 0, 0, 3})}, {{"dim", int64_t(1)}}});
  c.push_back({"gather", {uniform({3, 4}), indices({2, 3}, 3, -3)}, {{"dim", int64_t(-2)}}});
  c.push_back({"gather", {uniform({}), idx({}, {0})}, {{"dim", int64_t(0)}}});
  c.push_back({"index_select", {uniform({4, 3}), idx({6}, {1, 3, 1, 1, 0, -3})}, {{"dim", int64_t(0)}}});
  c.push_back({"index_select", {uniform({3, 4}), idx({5}, {2, -1, 2, 0, 3}, DType::I32)}, {{"dim", int64_t(-1)}}});
  c.push_back({"index_select", {uniform({2, 3, 2}), idx({}, {2})}, {{"dim", int64_t(1)}}});
  c.push_back({"index_select", {uniform({}), idx({3}, {0, -1, 0})}, {{"dim", int64_t(0)}}});
  c.push_back({"take", {uniform({3, 4}), idx({2, 4}, {0, 11, -1, 5, 5, 5, -12, 3})}});
  c.push_back({"take", {uniform({2, 3}), indices({}, 6)}});
  return c;
}

std::vector<GradCase> scatterCases() {
  std::vector<GradCase> c;
  // Rows 0 and 2 of dim 0 are written twice in some columns; src is wider than the index.
  c.push_back({"scatter", {uniform({3, 4}), idx({3, 3}, {0, 1, 2, 2, 1, 0, 0, 1, 2}), uniform({4, 4})}, {{"dim", int64_t(0)}}});
  c.push_back({"scatter", {uniform({2, 5}), idx({2, 4}, {4, 0, 4, -1, 1, 1, 3, 1}), uniform({2, 4})}, {{"dim", int64_t(-1)}}});
  c.push_back({"scatter", {uniform({3, 4}), idx({2, 4}, {0, 2, 2, 1, 0, 0, 1, 1})}, {{"dim", int64_t(0)}, {"value", 1.5}}});
  c.push_back({"scatter_add", {uniform({3, 4}), idx({5, 4}, {0, 1, 2, 2, 2, 1, 0, 0, 0, 0, 1, 2, 2, 1, 1, 1, 0, -1, 0, 1}), uniform({5, 4})},
               {{"dim", int64_t(0)}}});
  c.push_back({"scatter_add", {uniform({3, 4}), idx({2, 6}, {3, 3, 0, 1, 3, -4, 1, 1, 1, 2, 2, 0}, DType::I32), uniform({3, 7})},
               {{"dim", int64_t(1)}}});
  c.push_back({"index_put", {uniform({4, 3}), idx({5}, {1, 3, 1, 0, 1}), uniform({5, 3})}});
  c.push_back({"index_put", {uniform({4, 3}), idx({5}, {1, 3, 1, 0, -3}), uniform({5, 3})}, {{"accumulate", true}}});
  c.push_back({"index_put", {uniform({4, 3}), idx({4}, {2, 0, 2, 2}), uniform({3})}});  // values broadcast over rows
  c.push_back({"index_put", {uniform({4, 3}), idx({4}, {2, 0, 2, 2}, DType::I32), uniform({4, 1})}, {{"accumulate", true}}});
  return c;
}

std::vector<GradCase> maskedCases() {
  std::vector<GradCase> c;
  c.push_back({"masked_fill", {uniform({3, 4}), mask({3, 4})}, {{"value", 2.0}}});
  c.push_back({"masked_fill", {uniform({3, 4}), mask({4}), uniform({})}});
  c.push_back({"masked_select", {uniform({3, 4}), mask({3, 4})}});
  c.push_back({"masked_select", {uniform({4}), mask({3, 4})}});  // the input broadcast: its gradient sums
  c.push_back({"masked_select", {uniform({2, 3, 2}), mask({3, 1})}});
  c.push_back({"masked_select", {uniform({2, 2}), idx({2, 2}, {0, 0, 0, 0}, DType::Bool)}});  // nothing selected
  return c;
}

const std::vector<GradCase> kGather = gatherCases();
const std::vector<GradCase> kScatter = scatterCases();
const std::vector<GradCase> kMasked = maskedCases();
TENSORD_GRAD_CASES(index_gather, kGather);
TENSORD_GRAD_CASES(index_scatter, kScatter);
TENSORD_GRAD_CASES(index_masked, kMasked);

TEST_F(GradcheckTest, IndexGather) { checkAll(kGather); }
TEST_F(GradcheckTest, IndexScatter) { checkAll(kScatter); }
TEST_F(GradcheckTest, IndexMasked) { checkAll(kMasked); }

HostTensor f32(Shape s, std::vector<double> v) { return makeTensor(DType::F32, s, std::move(v)); }
HostTensor i64(Shape s, std::vector<double> v) { return makeTensor(DType::I64, s, std::move(v)); }

// Exact values where duplicates meet.
TEST_F(GradcheckTest, IndexDuplicates) {
  // take: element 1 read three times, element 2 once.
  auto g = call("take_backward", {f32({4}, {1, 2, 3, 4}), f32({3}, {0, 0, 0}), i64({4}, {1, 1, 2, -2})});
  expectClose(g.at(0), f32({3}, {0, 7, 3}), "take_backward");
  // index_select: row 0 three times (-2 is row 0), row 1 never.
  g = call("index_select_backward", {f32({3, 2}, {1, 2, 3, 4, 5, 6}), f32({2, 2}, {0, 0, 0, 0}), i64({3}, {0, 0, -2})},
           {{"dim", int64_t(0)}});
  expectClose(g.at(0), f32({2, 2}, {9, 12, 0, 0}), "index_select_backward");
  // scatter: position 1 of dim 0 wins over position 0; src row 0 gets nothing.
  g = call("scatter_backward",
           {f32({2, 1}, {10, 20}), f32({2, 1}, {0, 0}), i64({2, 1}, {1, 1}), f32({2, 1}, {0, 0})}, {{"dim", int64_t(0)}});
  expectClose(g.at(0), f32({2, 1}, {10, 0}), "scatter_backward input");
  expectClose(g.at(1), f32({2, 1}, {0, 20}), "scatter_backward src");
  // masked_select: the grad's elements land on the true places in order.
  g = call("masked_select_backward",
           {f32({2}, {7, 8}), f32({2, 2}, {0, 0, 0, 0}), makeTensor(DType::Bool, {2, 2}, {0, 1, 0, 1})});
  expectClose(g.at(0), f32({2, 2}, {0, 7, 0, 8}), "masked_select_backward");
}

TEST_F(GradcheckTest, IndexBackwardErrors) {
  auto t = [](Shape s) { return randomTensor(DType::F32, s); };
  auto expectMentions = [](const std::string& got, std::initializer_list<const char*> parts) {
    for (const char* p : parts) EXPECT_NE(got.find(p), std::string::npos) << "message: " << got << "\nmissing: " << p;
  };
  expectMentions(errorOf("gather_backward", {t({3, 4}), t({3, 4}), i64({3, 2}, {0, 1, 2, 3, 0, 1})}, {{"dim", int64_t(1)}}),
                 {"gather_backward: input 'grad' has shape [3, 4]; expected [3, 2]"});
  expectMentions(errorOf("index_select_backward", {t({3, 4}), t({3, 4}), i64({2}, {0, 1})}, {{"dim", int64_t(0)}}),
                 {"index_select_backward: input 'grad' has shape [3, 4]; expected [2, 4]"});
  expectMentions(errorOf("scatter_add_backward", {t({2, 4}), t({3, 4}), i64({1, 1}, {0}), t({1, 1})}, {{"dim", int64_t(0)}}),
                 {"scatter_add_backward: input 'grad' has shape [2, 4]; expected [3, 4]"});
  expectMentions(errorOf("masked_select_backward", {t({2, 2}), t({2, 2}), makeTensor(DType::Bool, {2, 2}, {1, 1, 1, 1})}),
                 {"masked_select_backward: input 'grad' has shape [2, 2]; expected a 1-D tensor"});
  expectMentions(errorOf("masked_select_backward", {t({4}), t({2, 3}), makeTensor(DType::Bool, {2}, {1, 1})}),
                 {"masked_select_backward: inputs 'input' [2, 3] and 'mask' [2] cannot be broadcast together"});
}

}  // namespace
}  // namespace tensord::compute::testing
