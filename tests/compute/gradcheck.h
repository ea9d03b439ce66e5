#pragma once
// Gradcheck: every differentiable op's backward against finite differences
// of its forward op, both on the device in f32.
//
// For a case (an op, inputs drawn as described, attributes) the check runs
// the forward op, draws a random cotangent r for each float output, and calls
// the backward op by the convention of op_families.h, as the client's
// autograd does. With L(x) = sum_k <r_k, out_k(x)>, for each input that gets a
// gradient g and for a few directions v (two dense random ones, two single
// elements) it compares
//   L(x + h v) - L(x - h v)   with   <g, (x + h v) - (x - h v)>
// (the perturbation as rounded to f32, so rounding does not count as error).
// They must agree within
//   rtol * sum |g_j dx_j|  +  1e-5 * sum_k |r_k| . |out_k|
// the second term being f32 rounding of L (about 1e-7 per term, with room
// for the approximations of exp, erf and friends). rtol is 1e-2 unless a
// case says otherwise; h is 1e-2 (relative to the input's range) unless a
// case says otherwise. Inputs of kind kDistinct are spaced wider than 2h, so
// max, sort and friends never swap elements under the perturbation.

#include <string>
#include <vector>

#include "compute/template_graph.h"
#include "tests/compute/conformance.h"

namespace tensord::compute::testing {

struct GradInput {
  enum class Kind {
    kUniform,       // uniform in [lo, hi]
    kDistinct,      // evenly spaced values in [lo, hi], shuffled (no ties, gaps >> h)
    kAwayFromZero,  // |x| uniform in [max(lo, 0.2), hi], random sign (kinks at 0: relu, abs)
    kNonInteger,    // k + [0.2, 0.8] for integers k in [lo, hi) (floor, round ...: zero gradient)
    kIndex,         // int64 uniform in [lo, hi)
    kMask,          // bool, true with probability 1/2
    kValues,        // exactly `values`
  };
  Shape shape;
  Kind kind = Kind::kUniform;
  double lo = -1, hi = 1;
  std::vector<double> values = {};
  DType dtype = DType::F32;  // kIndex: I64 unless set to I32; kMask: Bool
};

struct GradCase {
  std::string op;
  std::vector<GradInput> inputs;  // the forward call's inputs, in order (optional ones may be left off)
  StepAttrs attrs = {};
  double rtol = 1e-2;
  double h = 1e-2;
};

// Shorthands for inputs.
inline GradInput uniform(Shape s, double lo = -1, double hi = 1) { return {std::move(s), GradInput::Kind::kUniform, lo, hi}; }
inline GradInput distinct(Shape s, double lo = -1, double hi = 1) { return {std::move(s), GradInput::Kind::kDistinct, lo, hi}; }
inline GradInput awayFromZero(Shape s, double hi = 1) { return {std::move(s), GradInput::Kind::kAwayFromZero, 0.2, hi}; }
inline GradInput nonInteger(Shape s, double lo = -3, double hi = 3) { return {std::move(s), GradInput::Kind::kNonInteger, lo, hi}; }
inline GradInput indices(Shape s, int64_t hi, int64_t lo = 0) {
  return {std::move(s), GradInput::Kind::kIndex, double(lo), double(hi), {}, DType::I64};
}
inline GradInput mask(Shape s) { return {std::move(s), GradInput::Kind::kMask, 0, 1, {}, DType::Bool}; }
inline GradInput values(Shape s, std::vector<double> v) { return {std::move(s), GradInput::Kind::kValues, 0, 0, std::move(v)}; }

// Registers cases for the coverage test; use at namespace scope next to the
// TEST that runs them:  TENSORD_GRAD_CASES(elementwise, kElementwiseCases);
bool registerGradCases(const std::vector<GradCase>& cases);
#define TENSORD_GRAD_CASES(tag, cases) [[maybe_unused]] static const bool kGradCases_##tag = registerGradCases(cases)
const std::vector<std::string>& gradCheckedOps();

class GradcheckTest : public ConformanceTest {
 protected:
  // Runs one case; failures name the op, the input and the direction.
  static void check(const GradCase& c);
  static void checkAll(const std::vector<GradCase>& cases) {
    for (const auto& c : cases) check(c);
  }
};

}  // namespace tensord::compute::testing
