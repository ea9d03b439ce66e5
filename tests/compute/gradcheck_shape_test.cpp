// Gradcheck cases of the shape family (see gradcheck.h) and the backward
// ops' errors.

#include "tests/compute/gradcheck.h"

namespace tensord::compute::testing {
namespace {

using Ints = std::vector<int64_t>;

std::vector<GradCase> viewAndPermuteCases() {
  std::vector<GradCase> c;
  c.push_back({"reshape", {uniform({2, 3, 2})}, {{"shape", Ints{3, -1}}}});
  c.push_back({"flatten", {uniform({2, 3, 2})}});
  c.push_back({"flatten", {uniform({2, 3, 2})}, {{"start_dim", int64_t(1)}}});
  c.push_back({"flatten", {uniform({})}});
  c.push_back({"squeeze", {uniform({2, 1, 3, 1})}});
  c.push_back({"squeeze", {uniform({2, 1, 3, 1})}, {{"dim", Ints{-1}}}});
  c.push_back({"unsqueeze", {uniform({2, 3})}, {{"dim", int64_t(-1)}}});
  c.push_back({"contiguous", {uniform({2, 3})}});
  c.push_back({"expand", {uniform({3, 1})}, {{"size", Ints{2, 3, 4}}}});
  c.push_back({"expand", {uniform({1, 3})}, {{"size", Ints{2, -1}}}});
  c.push_back({"expand", {uniform({})}, {{"size", Ints{2, 2}}}});
  c.push_back({"permute", {uniform({2, 3, 4})}, {{"dims", Ints{2, 0, 1}}}});
  c.push_back({"permute", {uniform({2, 3, 4})}, {{"dims", Ints{1, -1, 0}}}});
  c.push_back({"transpose", {uniform({2, 3, 4})}, {{"dim0", int64_t(0)}, {"dim1", int64_t(-1)}}});
  c.push_back({"flip", {uniform({2, 3, 4})}, {{"dims", Ints{0, -1}}}});
  c.push_back({"roll", {uniform({3, 4})}, {{"shifts", Ints{1, -2}}, {"dims", Ints{0, -1}}}});
  c.push_back({"roll", {uniform({3, 4})}, {{"shifts", Ints{9}}, {"dims", Ints{1}}}});  // more than the dim
  c.push_back({"roll", {uniform({2, 3})}, {{"shifts", Ints{-4}}}});                     // the flattened input
  c.push_back({"triu", {uniform({3, 4})}});
  c.push_back({"triu", {uniform({2, 3, 3})}, {{"diagonal", int64_t(1)}}});
  c.push_back({"tril", {uniform({3, 4})}, {{"diagonal", int64_t(-1)}}});
  return c;
}

std::vector<GradCase> partCases() {
  std::vector<GradCase> c;
  c.push_back({"narrow", {uniform({3, 5})}, {{"dim", int64_t(1)}, {"start", int64_t(1)}, {"length", int64_t(3)}}});
  c.push_back({"narrow", {uniform({4, 2})}, {{"dim", int64_t(0)}, {"start", int64_t(-2)}, {"length", int64_t(2)}}});
  c.push_back({"slice", {uniform({5, 3})}, {{"start", int64_t(1)}, {"step", int64_t(2)}}});
  c.push_back({"slice", {uniform({3, 7})}, {{"dim", int64_t(-1)}, {"start", int64_t(-6)}, {"end", int64_t(-1)}, {"step", int64_t(3)}}});
  c.push_back({"slice", {uniform({2, 6, 2})}, {{"dim", int64_t(1)}, {"start", int64_t(1)}, {"end", int64_t(5)}}});
  c.push_back({"slice", {uniform({4, 3})}, {{"start", int64_t(2)}, {"step", int64_t(5)}}});   // one row
  c.push_back({"slice", {uniform({4, 3})}, {{"start", int64_t(3)}, {"end", int64_t(1)}}});    // none
  c.push_back({"pad", {uniform({3, 4})}, {{"pad", Ints{1, 2}}}});
  c.push_back({"pad", {uniform({3, 4})}, {{"pad", Ints{1, -2, -1, 2}}, {"value", 0.5}}});  // crops too
  c.push_back({"pad", {uniform({2, 3, 5})}, {{"pad", Ints{2, 4, 1, 2}}, {"mode", std::string("reflect")}}});
  c.push_back({"pad", {uniform({2, 3, 4})}, {{"pad", Ints{3, 1, 0, 2}}, {"mode", std::string("replicate")}}});
  c.push_back({"pad", {uniform({2, 1, 3})}, {{"pad", Ints{0, 2, 2, 1, 1, 0}}, {"mode", std::string("replicate")}}});
  c.push_back({"repeat", {uniform({2, 3})}, {{"repeats", Ints{2, 1, 3}}}});
  c.push_back({"repeat", {uniform({3, 1})}, {{"repeats", Ints{1, 4}}}});
  c.push_back({"repeat", {uniform({2, 3})}, {{"repeats", Ints{0, 2}}}});
  c.push_back({"repeat", {uniform({2, 2, 1, 2, 2})}, {{"repeats", Ints{2, 2, 2, 2, 2}}}});  // splits into > 8 dims
  return c;
}

std::vector<GradCase> severalCases() {
  std::vector<GradCase> c;
  c.push_back({"cat", {uniform({2, 3}), uniform({2, 1}), uniform({2, 2})}, {{"dim", int64_t(-1)}}});
  c.push_back({"cat", {uniform({2, 3}), values({0}, {}), uniform({1, 3})}});  // an empty 1-D tensor is skipped
  c.push_back({"cat", {uniform({3})}});
  c.push_back({"stack", {uniform({2, 3}), uniform({2, 3})}, {{"dim", int64_t(1)}}});
  c.push_back({"stack", {uniform({2}), uniform({2}), uniform({2})}, {{"dim", int64_t(-1)}}});
  c.push_back({"split", {uniform({5, 3})}, {{"split_size_or_sections", Ints{2}}}});
  c.push_back({"split", {uniform({3, 5})}, {{"split_size_or_sections", Ints{1, 3, 1}}, {"dim", int64_t(-1)}}});
  c.push_back({"chunk", {uniform({5, 2})}, {{"chunks", int64_t(3)}}});
  c.push_back({"chunk", {uniform({2, 4})}, {{"chunks", int64_t(2)}, {"dim", int64_t(1)}}});
  return c;
}

const std::vector<GradCase> kViews = viewAndPermuteCases();
const std::vector<GradCase> kParts = partCases();
const std::vector<GradCase> kSeveral = severalCases();
TENSORD_GRAD_CASES(shape_views, kViews);
TENSORD_GRAD_CASES(shape_parts, kParts);
TENSORD_GRAD_CASES(shape_several, kSeveral);

TEST_F(GradcheckTest, ShapeViewsAndPermutations) { checkAll(kViews); }
TEST_F(GradcheckTest, ShapeParts) { checkAll(kParts); }
TEST_F(GradcheckTest, ShapeSeveralTensors) { checkAll(kSeveral); }

// Finite differences see sums only; this pins where replicate padding's
// border gradients land: grad [1 .. 6] of pad([a, b, c], (2, 1)) = [a a a b c c].
TEST_F(GradcheckTest, ShapeReplicatePadSumsBorders) {
  auto got = call("pad_backward", {makeTensor(DType::F32, {6}, {1, 2, 3, 4, 5, 6}), makeTensor(DType::F32, {3}, {0, 0, 0})},
                  {{"pad", Ints{2, 1}}, {"mode", std::string("replicate")}});
  expectClose(got.at(0), makeTensor(DType::F32, {3}, {6, 4, 11}), "pad_backward");
}

TEST_F(GradcheckTest, ShapeBackwardErrors) {
  auto t = [](Shape s) { return randomTensor(DType::F32, s); };
  auto expectMentions = [](const std::string& got, std::initializer_list<const char*> parts) {
    for (const char* p : parts) EXPECT_NE(got.find(p), std::string::npos) << "message: " << got << "\nmissing: " << p;
  };
  expectMentions(errorOf("permute_backward", {t({2, 3}), t({2, 3})}, {{"dims", Ints{1, 0}}}),
                 {"permute_backward: input 'grad' has shape [2, 3]; expected [3, 2]"});
  expectMentions(errorOf("expand_backward", {t({2, 4}), t({3, 1})}, {{"size", Ints{2, 3, 4}}}),
                 {"expand_backward: input 'grad' has shape [2, 4]; expected [2, 3, 4]"});
  expectMentions(errorOf("cat_backward", {t({2, 4}), t({2, 3}), t({2, 2})}, {{"dim", int64_t(1)}}),
                 {"cat_backward: input 'grad' has shape [2, 4]; expected [2, 5]"});
  expectMentions(errorOf("split_backward", {t({5, 3}), t({2, 3}), t({3, 3})}, {{"split_size_or_sections", Ints{2}}}),
                 {"split_backward: input 'grad' has 2 tensors; expected 3"});
  expectMentions(errorOf("chunk_backward", {t({5, 3}), t({3, 3}), t({2, 2})}, {{"chunks", int64_t(2)}}),
                 {"chunk_backward: input 'grad 1' has shape [2, 2]; expected [2, 3]"});
  // Forward inputs no forward call could have had: the forward's check, under the backward's name.
  expectMentions(errorOf("stack_backward", {t({2, 2}), t({2}), t({3})}),
                 {"stack_backward", "stack: input 'tensors' 1 is", "expected shape [2]"});
}

}  // namespace
}  // namespace tensord::compute::testing
