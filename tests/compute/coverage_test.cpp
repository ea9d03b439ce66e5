// The op table and the conformance suite agree: every op has a case.

#include <gtest/gtest.h>

#include <algorithm>

#include "compute/op_table.h"
#include "tests/compute/conformance.h"
#include "tests/compute/gradcheck.h"

namespace tensord::compute::testing {
namespace {

TEST(OpCoverage, EveryOpInTheTableHasAConformanceCase) {
  OpTable table;
  const auto& covered = coveredOps();
  std::string missing;
  const auto& gradChecked = gradCheckedOps();
  for (const OpSpec& op : table.all()) {
    if (std::find(covered.begin(), covered.end(), op.name) != covered.end()) continue;
    // A backward op's case is its forward op's gradcheck case.
    const std::string suffix = "_backward";
    if (op.name.size() > suffix.size() && op.name.ends_with(suffix) &&
        std::find(gradChecked.begin(), gradChecked.end(), op.name.substr(0, op.name.size() - suffix.size())) !=
            gradChecked.end()) {
      continue;
    }
    missing += " " + op.name;
  }
  EXPECT_EQ(missing, "") << "ops without a conformance case:" << missing;
}

TEST(OpCoverage, EveryDifferentiableOpHasABackwardAndAGradcheckCase) {
  OpTable table;
  const auto& checked = gradCheckedOps();
  std::string noBackward, noCase;
  for (const OpSpec& op : table.all()) {
    if (!op.differentiable) continue;
    if (op.backward.empty()) noBackward += " " + op.name;
    if (std::find(checked.begin(), checked.end(), op.name) == checked.end()) noCase += " " + op.name;
  }
  EXPECT_EQ(noBackward, "") << "differentiable ops without a backward op:" << noBackward;
  EXPECT_EQ(noCase, "") << "differentiable ops without a gradcheck case:" << noCase;
}

TEST(OpCoverage, EveryGradcheckCaseNamesADifferentiableOp) {
  OpTable table;
  for (const auto& name : gradCheckedOps()) {
    const OpSpec* op = table.find(name);
    ASSERT_NE(op, nullptr) << "no op '" << name << "'";
    EXPECT_TRUE(op->differentiable) << name;
  }
}

TEST(OpCoverage, EveryCaseNamesARealOp) {
  OpTable table;
  for (const auto& name : coveredOps()) EXPECT_NE(table.find(name), nullptr) << "no op '" << name << "'";
}

}  // namespace
}  // namespace tensord::compute::testing
