// Gradcheck cases of the nn family (see gradcheck.h), plus what finite
// differences cannot see (embedding's padding_idx row) and the backward ops'
// errors.

#include "tests/compute/gradcheck.h"

namespace tensord::compute::testing {
namespace {

using Ints = std::vector<int64_t>;

GradInput i32(GradInput in) {
  in.dtype = DType::I32;
  return in;
}

std::vector<GradCase> softmaxCases() {
  std::vector<GradCase> c;
  for (const char* op : {"softmax", "log_softmax"}) {
    c.push_back({op, {uniform({3, 5}, -2, 2)}});
    c.push_back({op, {uniform({2, 4, 3}, -2, 2)}, {{"dim", int64_t(1)}}});  // a strided dim
    c.push_back({op, {uniform({2, 3, 2}, -2, 2)}, {{"dim", int64_t(-3)}}});
    c.push_back({op, {uniform({2, 70}, -2, 2)}});  // rows of more than 64: one workgroup per row
  }
  return c;
}

std::vector<GradCase> normCases() {
  std::vector<GradCase> c;
  // Inputs on a shuffled grid: no row or group has a tiny variance, where finite differences of a
  // normalization lose their accuracy.
  const StepAttrs ns4 = {{"normalized_shape", Ints{4}}};
  c.push_back({"layer_norm", {distinct({3, 4}, -2, 2), uniform({4}, 0.5, 1.5), uniform({4})}, ns4});
  c.push_back({"layer_norm", {distinct({3, 4}, -2, 2)}, ns4});
  c.push_back({"layer_norm", {distinct({3, 4}, -2, 2), uniform({4}, 0.5, 1.5)}, {{"normalized_shape", Ints{4}}, {"eps", 0.1}}});
  c.push_back({"layer_norm", {distinct({2, 2, 3}, -2, 2), uniform({2, 3}, 0.5, 1.5), uniform({2, 3})},
               {{"normalized_shape", Ints{2, 3}}}});
  c.push_back({"layer_norm", {distinct({2, 72}, -2, 2), uniform({72}, 0.5, 1.5), uniform({72})},
               {{"normalized_shape", Ints{72}}}});  // one workgroup per row
  c.push_back({"rms_norm", {distinct({3, 4}, -2, 2), uniform({4}, 0.5, 1.5)}, ns4});
  c.push_back({"rms_norm", {distinct({2, 3, 2}, -2, 2)}, {{"normalized_shape", Ints{3, 2}}, {"eps", 0.01}}});
  c.push_back({"rms_norm", {distinct({2, 80}, -2, 2), uniform({80}, 0.5, 1.5)}, {{"normalized_shape", Ints{80}}}});
  c.push_back({"group_norm", {distinct({2, 4, 3}, -2, 2), uniform({4}, 0.5, 1.5), uniform({4})}, {{"num_groups", int64_t(2)}}});
  c.push_back({"group_norm", {distinct({2, 6, 2, 2}, -2, 2), uniform({6}, 0.5, 1.5)}, {{"num_groups", int64_t(3)}}});
  c.push_back({"group_norm", {distinct({3, 2, 3}, -2, 2)}, {{"num_groups", int64_t(1)}, {"eps", 0.1}}});
  c.push_back({"group_norm", {distinct({2, 2, 70}, -2, 2), uniform({2}, 0.5, 1.5), uniform({2})}, {{"num_groups", int64_t(2)}}});
  // batch_norm: batch statistics (with and without running ones to update), then running statistics.
  const StepAttrs train = {{"training", true}};
  c.push_back({"batch_norm", {distinct({4, 3}, -2, 2)}, train});
  c.push_back({"batch_norm",
               {distinct({2, 3, 2, 2}, -2, 2), uniform({3}), uniform({3}, 0.5, 1.5), uniform({3}, 0.5, 1.5), uniform({3})},
               train});
  c.push_back({"batch_norm", {distinct({3, 2, 3}, -2, 2), uniform({2}), uniform({2}, 0.5, 1.5), uniform({2}, 0.5, 1.5)},
               {{"training", true}, {"eps", 0.1}}});
  c.push_back({"batch_norm", {distinct({4, 3}, -2, 2), uniform({3}), uniform({3}, 0.5, 1.5)}, {{"training", false}}});
  c.push_back({"batch_norm",
               {distinct({2, 3, 2}, -2, 2), uniform({3}), uniform({3}, 0.5, 1.5), uniform({3}, 0.5, 1.5), uniform({3})},
               {{"training", false}}});
  return c;
}

std::vector<GradCase> miscCases() {
  std::vector<GradCase> c;
  // 8 indices into 5 rows: some row is named twice or more.
  c.push_back({"embedding", {uniform({5, 3}), indices({2, 4}, 5)}});
  c.push_back({"embedding", {uniform({4, 2}), i32(indices({6}, 4))}});
  c.push_back({"embedding", {uniform({3, 2}), indices({}, 3)}});
  c.push_back({"dropout", {uniform({4, 5})}, {{"p", 0.3}, {"seed", int64_t(7)}}});
  c.push_back({"dropout", {uniform({3, 4})}, {{"p", 0.5}, {"training", false}}});
  return c;
}

std::vector<GradCase> lossCases() {
  std::vector<GradCase> c;
  const Shape s = {3, 4};
  auto red = [](const char* r) { return StepAttrs{{"reduction", std::string(r)}}; };
  for (const char* r : {"mean", "sum", "none"}) {
    c.push_back({"mse_loss", {uniform(s), uniform(s)}, red(r)});
    // |input - target| >= 0.1: away from l1's kink.
    c.push_back({"l1_loss", {awayFromZero(s, 1), uniform(s, -0.1, 0.1)}, red(r)});
    c.push_back({"smooth_l1_loss", {uniform(s, -2, 2), uniform(s)}, red(r)});
    c.push_back({"binary_cross_entropy", {uniform(s, 0.1, 0.9), uniform(s, 0, 1)}, red(r)});
    c.push_back({"binary_cross_entropy_with_logits", {uniform(s, -3, 3), uniform(s, 0, 1)}, red(r)});
    c.push_back({"kl_div", {uniform(s, -2, 0), uniform(s, 0.1, 1)}, red(r)});
  }
  c.push_back({"smooth_l1_loss", {uniform(s, -2, 2), uniform(s)}, {{"beta", 0.5}}});
  c.push_back({"smooth_l1_loss", {awayFromZero(s, 1), uniform(s, -0.1, 0.1)}, {{"beta", 0.0}, {"reduction", std::string("sum")}}});
  c.push_back({"binary_cross_entropy", {uniform(s, 0.1, 0.9), uniform(s, 0, 1), uniform({4}, 0.5, 2)}});
  c.push_back({"binary_cross_entropy", {uniform(s, 0.1, 0.9), uniform(s, 0, 1), uniform({3, 1}, 0.5, 2)}, red("none")});
  c.push_back({"binary_cross_entropy_with_logits", {uniform(s, -3, 3), uniform(s, 0, 1), uniform({4}, 0.5, 2)}, red("sum")});
  c.push_back({"binary_cross_entropy_with_logits",
               {uniform(s, -3, 3), uniform(s, 0, 1), uniform({3, 1}, 0.5, 2), uniform({4}, 0.5, 3)}});
  c.push_back({"binary_cross_entropy_with_logits",
               {uniform(s, -3, 3), uniform(s, 0, 1), uniform(s, 0.5, 2), uniform({4}, 0.5, 3)}, red("none")});
  c.push_back({"kl_div", {uniform(s, -2, 0), uniform(s, 0.1, 1)}, red("batchmean")});
  c.push_back({"kl_div", {uniform(s, -2, 0), uniform(s, -2, 0)}, {{"log_target", true}, {"reduction", std::string("batchmean")}}});
  c.push_back({"kl_div", {uniform(s, -2, 0), uniform(s, -2, 0)}, {{"log_target", true}, {"reduction", std::string("none")}}});

  // Class losses: [N, C], [N, C, d...] and [C]; weights, ignore_index (class 1
  // here, so some samples are ignored), label smoothing, every reduction.
  for (const char* op : {"nll_loss", "cross_entropy"}) {
    for (const char* r : {"mean", "sum", "none"}) {
      c.push_back({op, {uniform({4, 3}, -2, 2), indices({4}, 3)}, red(r)});
      c.push_back({op, {uniform({4, 3}, -2, 2), indices({4}, 3), uniform({3}, 0.5, 2)}, red(r)});
      c.push_back({op, {uniform({2, 3, 2, 2}, -2, 2), i32(indices({2, 2, 2}, 3)), uniform({3}, 0.5, 2)},
                   {{"reduction", std::string(r)}, {"ignore_index", int64_t(1)}}});
    }
    c.push_back({op, {uniform({3}, -2, 2), indices({}, 3)}});
    c.push_back({op, {uniform({5, 4}, -2, 2), indices({5}, 4), uniform({4}, 0.5, 2)}, {{"ignore_index", int64_t(2)}}});
  }
  for (const char* r : {"mean", "sum", "none"}) {
    c.push_back({"cross_entropy", {uniform({4, 3}, -2, 2), indices({4}, 3), uniform({3}, 0.5, 2)},
                 {{"reduction", std::string(r)}, {"label_smoothing", 0.2}, {"ignore_index", int64_t(0)}}});
  }
  c.push_back({"cross_entropy", {uniform({2, 3, 4}, -2, 2), indices({2, 4}, 3)}, {{"label_smoothing", 0.1}}});
  c.push_back({"cross_entropy", {uniform({3, 70}, -2, 2), indices({3}, 70)}, {{"label_smoothing", 0.1}}});  // C > 64
  c.push_back({"nll_loss", {uniform({3, 70}, -2, 0), indices({3}, 70)}, red("sum")});
  return c;
}

std::vector<GradCase> attentionCases() {
  std::vector<GradCase> c;
  const char* op = "scaled_dot_product_attention";
  c.push_back({op, {uniform({2, 3, 4}), uniform({2, 5, 4}), uniform({2, 5, 2})}});
  c.push_back({op, {uniform({2, 3, 4}), uniform({2, 5, 4}), uniform({2, 5, 2})}, {{"scale", 0.7}}});
  c.push_back({op, {uniform({1, 4, 3}), uniform({1, 4, 3}), uniform({1, 4, 3})}, {{"is_causal", true}}});
  c.push_back({op, {uniform({1, 4, 3}), uniform({1, 2, 3}), uniform({1, 2, 2})}, {{"is_causal", true}}});  // L > S
  // Broadcast batch dims: query [2, 2, ...] against shared key and value.
  c.push_back({op, {uniform({2, 2, 3, 4}), uniform({2, 1, 5, 4}), uniform({5, 3})}});
  c.push_back({op, {uniform({3, 4}), uniform({5, 4}), uniform({2, 5, 3})}});
  // Masks: a float one (which gets a gradient) broadcast over the batch, a bool one.
  c.push_back({op, {uniform({2, 3, 4}), uniform({2, 5, 4}), uniform({2, 5, 2}), uniform({3, 5})}});
  c.push_back({op, {uniform({2, 3, 4}), uniform({2, 5, 4}), uniform({2, 5, 2}), uniform({2, 1, 5})}});
  c.push_back({op, {uniform({2, 3, 4}), uniform({2, 5, 4}), uniform({2, 5, 2}), mask({2, 3, 5})}});
  c.push_back({op, {uniform({1, 2, 4}), uniform({1, 70, 4}), uniform({1, 70, 3})}});  // S > 64
  return c;
}

const std::vector<GradCase> kSoftmax = softmaxCases();
const std::vector<GradCase> kNorms = normCases();
const std::vector<GradCase> kMisc = miscCases();
const std::vector<GradCase> kLosses = lossCases();
const std::vector<GradCase> kAttention = attentionCases();
TENSORD_GRAD_CASES(nn_softmax, kSoftmax);
TENSORD_GRAD_CASES(nn_norms, kNorms);
TENSORD_GRAD_CASES(nn_misc, kMisc);
TENSORD_GRAD_CASES(nn_losses, kLosses);
TENSORD_GRAD_CASES(nn_attention, kAttention);

TEST_F(GradcheckTest, NnSoftmax) { checkAll(kSoftmax); }
TEST_F(GradcheckTest, NnNorms) { checkAll(kNorms); }
TEST_F(GradcheckTest, NnEmbeddingDropout) { checkAll(kMisc); }
TEST_F(GradcheckTest, NnLosses) { checkAll(kLosses); }
TEST_F(GradcheckTest, NnAttention) { checkAll(kAttention); }

// padding_idx changes only the gradient, so finite differences cannot see it.
TEST_F(GradcheckTest, NnEmbeddingPaddingRowGetsNoGradient) {
  const HostTensor weight = randomTensor(DType::F32, {4, 2});
  const HostTensor idx = makeTensor(DType::I64, {5}, {0, 2, 2, 1, 2});
  const HostTensor grad = makeTensor(DType::F32, {5, 2}, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10});
  for (int64_t pad : {1, -3}) {
    auto g = call("embedding_backward", {grad, weight, idx}, {{"padding_idx", pad}});
    ASSERT_EQ(g.size(), 1u);
    // Row 0: grad row 0; row 1: padding; row 2: grad rows 1 + 2 + 4; row 3: unused.
    expectClose(g[0], makeTensor(DType::F32, {4, 2}, {1, 2, 0, 0, 3 + 5 + 9, 4 + 6 + 10, 0, 0}),
                "padding_idx " + std::to_string(pad));
  }
}

// The backward kernels in f16 and bf16 against f32 on the same (rounded)
// inputs: loads, stores and f32 accumulation in the narrow dtypes.
TEST_F(GradcheckTest, NnBackwardHalfPrecisionMatchesF32) {
  struct Case {
    std::string op;
    std::vector<HostTensor> inputs;  // f32 (and index) tensors
    StepAttrs attrs = {};
  };
  auto t = [](Shape s, double lo = -1, double hi = 1) { return randomTensor(DType::F32, s, lo, hi); };
  auto idx = [](Shape s, std::vector<double> v) { return makeTensor(DType::I64, s, std::move(v)); };
  const std::vector<Case> cases = {
      {"softmax_backward", {t({3, 5}), t({3, 5}, 0, 1)}},
      {"log_softmax_backward", {t({2, 4, 3}), t({2, 4, 3}, -2, 0)}, {{"dim", int64_t(1)}}},
      {"layer_norm_backward", {t({3, 8}), t({3, 8}), t({8}), t({8})}, {{"normalized_shape", Ints{8}}}},
      {"rms_norm_backward", {t({3, 8}), t({3, 8}), t({8})}, {{"normalized_shape", Ints{8}}}},
      {"group_norm_backward", {t({2, 4, 3}), t({2, 4, 3}), t({4}), t({4})}, {{"num_groups", int64_t(2)}}},
      {"batch_norm_backward", {t({4, 3}), t({4, 3}), t({3}), t({3}, 0.5, 1.5), t({3}), t({3})}, {{"training", true}}},
      {"batch_norm_backward", {t({4, 3}), t({4, 3}), t({3}), t({3}, 0.5, 1.5), t({3}), t({3})}, {{"training", false}}},
      {"embedding_backward", {t({5, 2}), t({4, 2}), idx({5}, {3, 0, 3, 1, 3})}},
      {"dropout_backward", {t({4, 5})}, {{"p", 0.4}, {"seed", int64_t(3)}}},
      {"cross_entropy_backward", {t({}), t({4, 3}), idx({4}, {0, 2, 1, 2}), t({3}, 0.5, 2)}, {{"label_smoothing", 0.1}}},
      {"nll_loss_backward", {t({4}), t({4, 3}), idx({4}, {0, 2, 1, 2})}, {{"reduction", std::string("none")}}},
      {"binary_cross_entropy_with_logits_backward", {t({}), t({3, 4}), t({3, 4}, 0, 1), t({4}, 0.5, 2), t({4}, 0.5, 2)}},
      {"scaled_dot_product_attention_backward", {t({2, 3, 2}), t({2, 3, 4}), t({2, 5, 4}), t({2, 5, 2})}},
  };
  for (DType dtype : {DType::F16, DType::BF16}) {
    const Tolerance tol = dtype == DType::F16 ? Tolerance{1e-2, 1e-2} : Tolerance{5e-2, 5e-2};
    for (const auto& c : cases) {
      std::vector<HostTensor> narrow, wide;
      for (const auto& in : c.inputs) {
        const bool data = in.dtype == DType::F32;
        narrow.push_back(data ? makeTensor(dtype, in.shape, in.values) : in);
        wide.push_back(data ? makeTensor(DType::F32, in.shape, narrow.back().values) : in);
      }
      const auto got = call(c.op, narrow, c.attrs), want = call(c.op, wide, c.attrs);
      ASSERT_EQ(got.size(), want.size()) << c.op;
      for (size_t k = 0; k < got.size(); ++k) {
        expectClose(got[k], makeTensor(dtype, want[k].shape, want[k].values),
                    c.op + " output " + std::to_string(k) + " in " + std::string(dtypeName(dtype)), 1, tol);
      }
    }
  }
}

void expectMentions(const std::string& error, std::initializer_list<const char*> parts) {
  for (const char* p : parts) EXPECT_NE(error.find(p), std::string::npos) << "'" << p << "' not in: " << error;
}

TEST_F(GradcheckTest, NnBackwardErrors) {
  auto t = [](Shape s) { return randomTensor(DType::F32, s); };
  expectMentions(errorOf("softmax_backward", {t({3, 4}), t({3, 5})}),
                 {"softmax_backward", "'grad'", "[3, 4]", "expected [3, 5]"});
  expectMentions(errorOf("layer_norm_backward", {t({3, 5}), t({3, 4})}, {{"normalized_shape", Ints{4}}}),
                 {"layer_norm_backward", "'grad'", "[3, 5]", "expected [3, 4]"});
  // The forward's own checks, under the backward's name.
  expectMentions(errorOf("layer_norm_backward", {t({3, 4}), t({3, 4}), t({3})}, {{"normalized_shape", Ints{4}}}),
                 {"layer_norm_backward", "'weight'", "[3]", "expected [4]"});
  expectMentions(errorOf("batch_norm_backward", {t({4, 3}), t({4, 3})}, {{"training", false}}),
                 {"batch_norm_backward", "running_mean"});
  expectMentions(errorOf("mse_loss_backward", {t({3}), t({3}), t({3})}), {"mse_loss_backward", "'grad'", "[3]", "expected []"});
  expectMentions(errorOf("cross_entropy_backward", {t({}), t({4, 3}), makeTensor(DType::I64, {4}, {0, 1, 2, 0})},
                         {{"reduction", std::string("none")}}),
                 {"cross_entropy_backward", "'grad'", "[]", "expected [4]"});
  expectMentions(errorOf("cross_entropy_backward", {t({}), t({4, 3}), makeTensor(DType::I64, {4}, {0, 1, 3, 0})}),
                 {"cross_entropy", "target 3", "out of range"});
  expectMentions(errorOf("embedding_backward", {t({2, 3}), t({5, 3}), makeTensor(DType::I64, {3}, {0, 1, 2})}),
                 {"embedding_backward", "'grad'", "[2, 3]", "expected [3, 3]"});
  expectMentions(errorOf("scaled_dot_product_attention_backward", {t({2, 3, 3}), t({2, 3, 4}), t({2, 5, 4}), t({2, 5, 2})}),
                 {"scaled_dot_product_attention_backward", "'grad'", "[2, 3, 3]", "expected [2, 3, 2]"});
}

}  // namespace
}  // namespace tensord::compute::testing
